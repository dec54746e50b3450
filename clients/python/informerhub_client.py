"""A small Python client of informerhub.

It wraps the generated gRPC stubs (see generate.sh) with what every client
needs: bearer-token and TLS setup, events as dataclasses with decoded
objects (and their previous states), snapshots read to their last page, and
a watch that reconnects by itself and resumes from the last token it
delivered, so that nothing is lost or repeated. Selectors, filters (CEL),
projections (fields) and object formats are the contract's. A Digest of
what a client holds, kept up event by event, checks it against the hub's
(Client.digest).

    with Client("127.0.0.1:8080", token=open(".cache/run/token").read().strip()) as hub:
        sel = Selector(resource="configmaps", namespace="demo")
        with hub.resuming_watch(sel, send_initial_events=True) as watch:
            for event in watch:
                print(event.type, event.object["metadata"]["name"] if event.object else "")
                save(event.resume_token)  # a later watch from it continues right here

It mirrors the Go SDK (clients/go) in miniature; it has no replica failover.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import json
import logging
import os
import random
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

try:
    from informerhub.v1 import informerhub_pb2 as pb
    from informerhub.v1 import informerhub_pb2_grpc as pb_grpc
except ImportError:
    # Not on PYTHONPATH: use what generate.sh wrote beside this file.
    _BUILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build")
    if not os.path.isdir(os.path.join(_BUILD, "informerhub", "v1")):
        raise ImportError(
            "informerhub_client: the generated stubs are missing: run generate.sh, "
            "or put the directory it wrote them to on PYTHONPATH") from None
    sys.path.append(_BUILD)
    from informerhub.v1 import informerhub_pb2 as pb
    from informerhub.v1 import informerhub_pb2_grpc as pb_grpc

__all__ = [
    "Backoff", "Client", "Digest", "ErrorInfo", "Event", "EventType", "FieldViolation", "HubDigest",
    "IncompleteSnapshot", "ObjectFormat", "Resource", "ResumingWatch", "Selector", "Snapshot", "WatchStream",
    "error_info", "field_violations", "object_hash",
]

log = logging.getLogger("informerhub_client")

StatusCode = grpc.StatusCode

# A Watch that ends with one of these cannot succeed by retrying (README:
# fix the request, get credentials or a RoleBinding).
TERMINAL_CODES = frozenset({
    StatusCode.INVALID_ARGUMENT,
    StatusCode.NOT_FOUND,
    StatusCode.PERMISSION_DENIED,
    StatusCode.UNAUTHENTICATED,
    StatusCode.UNIMPLEMENTED,
})


class EventType(str, enum.Enum):
    """What an Event reports; the values are Kubernetes' watch event types."""
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


_EVENT_TYPES = {
    pb.EVENT_TYPE_ADDED: EventType.ADDED,
    pb.EVENT_TYPE_MODIFIED: EventType.MODIFIED,
    pb.EVENT_TYPE_DELETED: EventType.DELETED,
    pb.EVENT_TYPE_BOOKMARK: EventType.BOOKMARK,
}


class ObjectFormat(enum.Enum):
    """How the hub sends objects. Either way they are delivered as dicts;
    STRUCT turns every number into a float (see README)."""
    JSON = pb.OBJECT_FORMAT_UNSPECIFIED     # the API server's JSON (the default)
    STRUCT = pb.OBJECT_FORMAT_STRUCT        # google.protobuf.Struct


@dataclass(frozen=True)
class Selector:
    """Objects of one resource type, as a Kubernetes LIST or WATCH selects
    them, and a CEL filter."""
    resource: str                 # plural, as in the REST path: "configmaps"
    version: str = "v1"
    group: str = ""               # "" for the core group, "apps", ...
    namespace: str = ""           # "" for all namespaces
    label_selector: str = ""      # "app=web,tier in (front,back)"
    field_selector: str = ""      # "status.phase=Running": Resource.selectable_fields
    filter: str = ""              # CEL over object: 'object.status.phase == "Running"'
    # A Kubernetes shard selector, for the replicas of a sharded consumer:
    # "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    shard_selector: str = ""

    def to_proto(self) -> pb.ResourceSelector:
        return pb.ResourceSelector(
            group=self.group, version=self.version, resource=self.resource,
            namespace=self.namespace, label_selector=self.label_selector,
            field_selector=self.field_selector, filter=self.filter,
            shard_selector=self.shard_selector)


@dataclass(frozen=True)
class Event:
    """One event of a watch."""
    type: EventType
    object: Optional[dict]        # the object, decoded from the API server's JSON; None on bookmarks
    resource_version: str         # informational: resume with resume_token
    resume_token: str             # a watch from it continues right after this event
    initial_events_end: bool = False  # the bookmark that ends the initial events
    # Set by ResumingWatch on the events of a re-sync: the hub could no
    # longer resume (OUT_OF_RANGE), so the watch listed every object again
    # as ADDED, then a BOOKMARK with resync set. Replace what you hold with
    # what the re-sync lists: drop what it did not list.
    resync: bool = False
    # On MODIFIED, with include_previous: the state before the change,
    # projected like object. None otherwise.
    previous_object: Optional[dict] = None
    # A difference the hub found by relisting (WatchResponse.from_relist):
    # what happened in between is unknown.
    from_relist: bool = False
    # Why the filter could not decide on the object (WatchResponse.filter_error:
    # its evaluation failed, e.g. a missing field, or exceeded the hub's cost
    # limit); the event is delivered as if it matched. "" otherwise.
    filter_error: str = ""


@dataclass(frozen=True)
class Snapshot:
    """Every matching object at one point in time."""
    objects: list[dict]           # ordered by namespace and name
    resume_token: str             # a watch from it yields exactly the later changes
    resource_version: str         # informational
    pages: int                    # how many pages the hub sent them in
    # Parallel to objects: why the filter could not decide on each ("" where
    # it did; see Event.filter_error); empty when it decided on every one.
    filter_errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Resource:
    """A resource type the cluster serves, and the hub's activity on it."""
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    informer_active: bool
    subscribers: int
    cached_objects: int
    # The fields a Selector's field_selector may name for this type, sorted.
    selectable_fields: tuple[str, ...] = ()
    # The oldest position a resume token continues from without the API
    # server (in memory, or on disk with --history-dir), and when the hub
    # reached it (seconds since the epoch); "" and None when the hub holds
    # nothing of the type. retained: the hub records it whatever watches
    # it (--retain). Cluster-wide listings only, like the activity above.
    retained_resource_version: str = ""
    retained_since: Optional[float] = None
    retained: bool = False


class IncompleteSnapshot(Exception):
    """The Snapshot stream ended before its last page."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter, between reconnection attempts."""
    initial: float = 0.1          # seconds
    max: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2           # spread each wait by this fraction up or down

    def delay(self, failures: int) -> float:
        d = min(self.initial * self.multiplier ** max(failures - 1, 0), self.max)
        return d * (1 + self.jitter * (2 * random.random() - 1))


TokenSource = Union[None, str, Callable[[], str]]


class Client:
    """A connection to one hub.

    token: a Kubernetes bearer token, or a function returning one, called for
    every call (projected tokens rotate; re-read the file). It is sent as
    "authorization: Bearer <token>". Without TLS, tokens only go to loopback
    addresses unless allow_token_without_tls.

    tls, ca_file: connect with TLS, verified with the CA file's PEM (default:
    the system's roots); a ca_file implies tls.

    options: more gRPC channel options, after the client's own.
    """

    def __init__(self, address: str, *, token: TokenSource = None, tls: bool = False,
                 ca_file: Optional[str] = None, allow_token_without_tls: bool = False,
                 options: Sequence[Tuple[str, object]] = ()):
        opts = [
            # Notice a hub that died without closing the connection: a watch
            # only reads. The hub allows pings every 10s.
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.max_pings_without_data", 0),
            # Objects are at most 1.5 MiB, snapshot pages about 1 MiB.
            ("grpc.max_receive_message_length", 64 << 20),
            *options,
        ]
        if tls or ca_file:
            roots = None
            if ca_file:
                with open(ca_file, "rb") as f:
                    roots = f.read()
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(roots), opts)
        else:
            if token is not None and not allow_token_without_tls and not _is_loopback(address):
                raise ValueError(f"a bearer token would cross the network to {address} in the clear: "
                                 "use tls (or allow_token_without_tls)")
            self._channel = grpc.insecure_channel(address, opts)
        self._token = token
        self._stub = pb_grpc.InformerHubServiceStub(self._channel)

    def close(self) -> None:
        """Close the connection; calls in progress end with CANCELLED."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _metadata(self) -> Tuple[Tuple[str, str], ...]:
        if self._token is None:
            return ()
        token = self._token() if callable(self._token) else self._token
        return (("authorization", "Bearer " + token),)

    def watch(self, selector: Selector, *, send_initial_events: bool = False,
              resume_token: str = "", fields: Sequence[str] = (), include_previous: bool = False,
              object_format: ObjectFormat = ObjectFormat.JSON) -> "WatchStream":
        """Start one Watch call: from resume_token if given, else from now;
        with every current object as ADDED first if send_initial_events.
        It does not reconnect: see resuming_watch.

        fields: projection, the paths to keep ("status.phase",
        "metadata.labels"); a MODIFIED that changes none of them is not sent.
        include_previous: MODIFIED events carry previous_object.
        object_format: how the hub sends objects (ObjectFormat)."""
        req = pb.WatchRequest(selector=selector.to_proto(), resume_token=resume_token,
                              send_initial_events=send_initial_events, fields=_paths(fields),
                              include_previous=include_previous,
                              object_format=_object_format(object_format).value)
        return WatchStream(self._stub.Watch(req, metadata=self._metadata()), resume_token)

    def resuming_watch(self, selector: Selector, *, send_initial_events: bool = False,
                       resume_token: str = "", fields: Sequence[str] = (), include_previous: bool = False,
                       object_format: ObjectFormat = ObjectFormat.JSON,
                       backoff: Backoff = Backoff()) -> "ResumingWatch":
        """A watch that reconnects by itself and resumes from the last token
        it delivered: see ResumingWatch. The options are watch's; every
        reconnection and re-sync asks for the same."""
        view = _View(_paths(fields), include_previous, _object_format(object_format))
        return ResumingWatch(self, selector, send_initial_events, resume_token, backoff, view)

    def snapshot(self, selector: Selector, *, fields: Sequence[str] = (),
                 object_format: ObjectFormat = ObjectFormat.JSON,
                 timeout: Optional[float] = None) -> Snapshot:
        """Every object that matches selector, from one point in time, read
        from all the pages of a Snapshot call, projected by fields and sent
        as object_format says (as in watch). Raises grpc.RpcError."""
        req = pb.SnapshotRequest(selector=selector.to_proto(), fields=_paths(fields),
                                 object_format=_object_format(object_format).value)
        call = self._stub.Snapshot(req, metadata=self._metadata(), timeout=timeout)
        objects, filter_errors, pages = [], [], 0
        try:
            for page in call:
                pages += 1
                # A page holds JSON strings or Structs, as asked.
                before = len(objects)
                objects.extend(json.loads(o) for o in page.objects)
                objects.extend(_dict(s) for s in page.object_structs)
                if page.filter_errors or filter_errors:
                    filter_errors.extend([""] * (before - len(filter_errors)))
                    filter_errors.extend(page.filter_errors or [""] * (len(objects) - before))
                if page.last:
                    return Snapshot(objects, page.resume_token, page.resource_version, pages, filter_errors)
        finally:
            call.cancel()
        raise IncompleteSnapshot("the snapshot ended before its last page")

    def watch_many(self, watches: Sequence["ManyWatch"], *, resume_token: str = "") -> "WatchManyStream":
        """Start one WatchMany call: several watches on one stream, each a
        ManyWatch (as watch takes its options). Iterate for ManyEvent: the
        initial events of every watch first, initial_events_end on the last
        one's end, then each watch's changes as they come. resume_token, a
        ManyEvent's, resumes every watch exactly (with the same watches, or
        some dropped, added or changed); a watch's own resume_token wins.
        A watch that fails ends the stream with its status, whose
        ErrorInfo metadata "index" names it. It does not reconnect."""
        req = pb.WatchManyRequest(resume_token=resume_token, watches=[
            pb.WatchRequest(selector=w.selector.to_proto(), resume_token=w.resume_token,
                            send_initial_events=w.send_initial_events, fields=_paths(w.fields),
                            include_previous=w.include_previous,
                            object_format=_object_format(w.object_format).value)
            for w in watches])
        return WatchManyStream(self._stub.WatchMany(req, metadata=self._metadata()), resume_token)

    def count(self, selector: Selector, *, group_by: str = "") -> "CountStream":
        """Start one Count call: iterate for Counts, the current counts of
        the objects selector selects, then new ones whenever they change.
        group_by: "" (the total only), "namespace", "label:<key>", or a
        path such as "status.phase". It does not reconnect."""
        req = pb.CountRequest(selector=selector.to_proto(), group_by=group_by)
        return CountStream(self._stub.Count(req, metadata=self._metadata()))

    def digest(self, selector: Selector, *, resume_token: str = "",
               timeout: Optional[float] = None) -> "HubDigest":
        """The hub's digest of what selector selects at resume_token (an
        event's or a snapshot's token of this selector; "" for now), to
        compare with a Digest of what you hold there (Digest.matches).
        Raises grpc.RpcError."""
        resp = self._stub.Digest(pb.DigestRequest(selector=selector.to_proto(), resume_token=resume_token),
                                 metadata=self._metadata(), timeout=timeout)
        return HubDigest(resp.count, resp.digest, resp.resource_version, resp.resume_token, resp.moved)

    def list_resources(self, namespace: str = "", *, timeout: Optional[float] = None) -> list[Resource]:
        """The resource types the caller may list and watch in namespace
        (cluster-wide if empty), as Resource."""
        resp = self._stub.ListResources(pb.ListResourcesRequest(namespace=namespace),
                                        metadata=self._metadata(), timeout=timeout)
        return [Resource(r.group, r.version, r.resource, r.kind, r.namespaced,
                         r.informer_active, r.subscribers, r.cached_objects,
                         tuple(r.selectable_fields), r.retained_resource_version,
                         r.retained_since.seconds + r.retained_since.nanos / 1e9 if r.HasField("retained_since") else None,
                         r.retained)
                for r in resp.resources]


@dataclass(frozen=True)
class _View:
    """The options of a watch that say what form its events take."""
    fields: tuple[str, ...]
    include_previous: bool
    object_format: ObjectFormat


def _paths(fields: Sequence[str]) -> tuple[str, ...]:
    # A string is a sequence too: "status.phase" would ask for 12 paths.
    if isinstance(fields, (str, bytes)) or not all(isinstance(f, str) for f in fields):
        raise TypeError(f"fields is a list of paths, like ['status.phase', 'metadata.labels'], not {fields!r}")
    return tuple(fields)


def _object_format(value: ObjectFormat) -> ObjectFormat:
    if not isinstance(value, ObjectFormat):
        raise TypeError(f"object_format is ObjectFormat.JSON or ObjectFormat.STRUCT, not {value!r}")
    return value


def _dict(struct) -> dict:
    """A google.protobuf.Struct as the dict json.loads gives for its JSON,
    except that every number is a float."""
    return json_format.MessageToDict(struct)


def _object(resp, json_field: str, struct_field: str) -> Optional[dict]:
    """An object of a response: from its Struct if the hub sent one, else
    from its JSON; None if neither."""
    if resp.HasField(struct_field):
        return _dict(getattr(resp, struct_field))
    raw = getattr(resp, json_field)
    return json.loads(raw) if raw else None


def _event(resp: pb.WatchResponse) -> Event:
    return Event(
        type=_EVENT_TYPES[resp.type],
        object=_object(resp, "object", "object_struct"),
        previous_object=_object(resp, "previous_object", "previous_object_struct"),
        resource_version=resp.resource_version,
        resume_token=resp.resume_token,
        initial_events_end=resp.initial_events_end,
        from_relist=resp.from_relist,
        filter_error=resp.filter_error)


@dataclass(frozen=True)
class ManyWatch:
    """One watch of a WatchMany, with watch's options."""
    selector: Selector
    send_initial_events: bool = False
    resume_token: str = ""
    fields: Sequence[str] = ()
    include_previous: bool = False
    object_format: ObjectFormat = ObjectFormat.JSON


@dataclass(frozen=True)
class ManyEvent:
    """One event of a WatchMany: of the watch at index."""
    index: int
    event: Event
    resume_token: str  # resumes every watch right after this event
    initial_events_end: bool  # on the end of the last watch's initial events


@dataclass(frozen=True)
class Counts:
    """The counts of a Count at one point in time."""
    groups: dict  # group value ("" for objects without one) -> count
    total: int
    resource_version: str


@dataclass(frozen=True)
class HubDigest:
    """The hub's digest of a selection at a position (Client.digest)."""
    count: int                    # the objects selected there
    digest: str                   # 32 hexadecimal digits, as Digest's str()
    resource_version: str         # informational
    resume_token: str             # a watch from it continues right after the position digested
    # The token asked for was older than the hub's history: the digest is of
    # the position at resume_token instead. Compare once you have applied
    # the events up to it.
    moved: bool


class _Stream:
    """A server stream: iteration raises grpc.RpcError when the hub or the
    network ends the call, and stops after cancel(), which any thread may
    call."""

    def __init__(self, call):
        self._call = call
        self._cancelled = threading.Event()

    def __iter__(self):
        return self

    def _next(self):
        try:
            return next(self._call)
        except grpc.RpcError as err:
            if self._cancelled.is_set() and err.code() == StatusCode.CANCELLED:
                raise StopIteration from None
            raise

    def cancel(self) -> None:
        self._cancelled.set()
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class WatchManyStream(_Stream):
    """One WatchMany call; see Client.watch_many."""

    def __init__(self, call, resume_token: str):
        super().__init__(call)
        self.resume_token = resume_token  # of the last event, or the request's

    def __next__(self) -> ManyEvent:
        resp = self._next()
        e = ManyEvent(resp.index, _event(resp.event), resp.resume_token, resp.initial_events_end)
        self.resume_token = e.resume_token
        return e


class CountStream(_Stream):
    """One Count call; see Client.count."""

    def __next__(self) -> Counts:
        resp = self._next()
        return Counts(dict(resp.groups), resp.total, resp.resource_version)


class WatchStream:
    """One Watch call. Iterate for its events; iteration raises
    grpc.RpcError when the hub or the network ends the call (code() says
    why), and stops after cancel(), which any thread may call."""

    def __init__(self, call, resume_token: str):
        self._call = call
        self._cancelled = threading.Event()
        self.resume_token = resume_token  # of the last event, or the request's

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        try:
            resp = next(self._call)
        except grpc.RpcError as err:
            if self._cancelled.is_set() and err.code() == StatusCode.CANCELLED:
                raise StopIteration from None
            raise
        e = _event(resp)
        self.resume_token = e.resume_token
        return e

    def start_token(self) -> str:
        """The token of the stream's start, from its response headers (it
        waits for them): resuming from it loses nothing even when the
        stream drops before its first event. "" if the call failed first."""
        for key, value in self._call.initial_metadata() or ():
            if key == "resume-token":
                return value
        return ""

    def cancel(self) -> None:
        """End the call: a real disconnect, as far as the hub can tell."""
        self._cancelled.set()
        self._call.cancel()

    def __enter__(self) -> "WatchStream":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class ResumingWatch:
    """A watch without gaps. Iterating it yields events; when the stream
    breaks on an error that retrying can fix (UNAVAILABLE, RESOURCE_EXHAUSTED,
    INTERNAL, a dropped connection, ...), it reconnects with backoff and
    resumes from the token of the last event it delivered (or, before the
    first, from the token in the stream's headers), so nothing is lost or
    repeated.

    OUT_OF_RANGE (the token expired) makes it re-sync: it watches again
    with initial events and yields every object as ADDED with resync set,
    then a BOOKMARK with resync set; replace what you held with that. Until
    that bookmark, its events carry the token from before the re-sync, so
    a caller that stops halfway re-syncs again. The re-sync asks for the
    same selector (its filter too), fields and format as the watch.

    RESOURCE_EXHAUSTED, whatever its reason (a slow reader, the rate
    limit, TOO_MANY_DISTINCT filters or projections), is retried with
    backoff.

    Errors that retrying cannot fix (INVALID_ARGUMENT, NOT_FOUND,
    PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED) raise grpc.RpcError.
    One exception: a running stream ended UNAUTHENTICATED because its
    credentials expired is reopened (a token function gives fresh ones);
    only a refusal to open it again raises. cancel(), from any thread, ends
    the iteration.
    """

    def __init__(self, client: Client, selector: Selector, send_initial_events: bool,
                 resume_token: str, backoff: Backoff, view: Optional[_View] = None):
        self._client, self._selector, self._backoff = client, selector, backoff
        self._view = view or _View((), False, ObjectFormat.JSON)
        self._position = resume_token        # where a reconnection continues
        self._from_hub = False               # _position came from the hub (so it covers initial events)
        self._send_initial = send_initial_events
        self._initial_pending = send_initial_events
        self._resync_from: Optional[str] = None  # during a re-sync: the token from before it
        self._failures = 0
        self._error: Optional[grpc.RpcError] = None
        self._lock = threading.Lock()        # guards _stream against cancel()
        self._stream: Optional[WatchStream] = None
        self._closed = threading.Event()

    @property
    def resume_token(self) -> str:
        """The token of the last event delivered (or the start): a new watch
        from it continues exactly here."""
        return self._position if self._resync_from is None else self._resync_from

    def cancel(self) -> None:
        self._closed.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.cancel()

    def __enter__(self) -> "ResumingWatch":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        while True:
            if self._error is not None:
                raise self._error
            if self._closed.is_set():
                raise StopIteration
            if self._stream is None:
                self._connect()
                continue
            try:
                e = next(self._stream)
            except StopIteration:
                self._failed(None)  # cancelled, or the hub ended the stream
                continue
            except grpc.RpcError as err:
                self._failed(err)
                continue
            self._failures = 0
            return self._deliver(e)

    def _connect(self) -> None:
        if self._failures and self._closed.wait(self._backoff.delay(self._failures)):
            return
        # Until the hub has issued a token, ask for what the caller asked;
        # the hub's tokens carry the initial events' progress themselves.
        initial = self._send_initial and not self._from_hub
        try:
            stream = self._client.watch(self._selector, send_initial_events=initial,
                                        resume_token=self._position, fields=self._view.fields,
                                        include_previous=self._view.include_previous,
                                        object_format=self._view.object_format)
        except OSError as err:  # a token file in the middle of its rotation
            self._failures += 1
            log.warning("getting the bearer token: %s; retrying", err)
            return
        with self._lock:
            self._stream = stream
        if self._closed.is_set():
            stream.cancel()
            return
        if not self._from_hub:
            token = stream.start_token()
            if token:
                self._position, self._from_hub = token, True

    def _deliver(self, e: Event) -> Event:
        if e.resume_token:
            self._position, self._from_hub = e.resume_token, True
        if self._resync_from is not None:
            end = e.initial_events_end
            e = replace(e, resync=True, resume_token=e.resume_token if end else self._resync_from,
                        initial_events_end=end and self._initial_pending)
            if end:
                self._resync_from = None
        if e.initial_events_end:
            self._initial_pending = False
        return e

    def _failed(self, err: Optional[grpc.RpcError]) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        if self._closed.is_set():
            return
        code = err.code() if err is not None else StatusCode.UNAVAILABLE
        if code == StatusCode.OUT_OF_RANGE:
            log.info("the hub can no longer resume this watch; re-syncing: %s", _details(err))
            if self._resync_from is None:
                self._resync_from = self.resume_token
            else:
                self._failures += 1  # the re-sync itself expired: do not spin
            self._position, self._from_hub, self._send_initial = "", False, True
        elif code == StatusCode.UNAUTHENTICATED and _ended_mid_stream(err):
            log.info("the hub no longer accepts this watch's credentials; reconnecting: %s", _details(err))
            self._failures += 1
        elif code in TERMINAL_CODES:
            self._error = err
        else:
            self._failures += 1
            log.debug("watch interrupted (attempt %d); reconnecting: %s", self._failures, _details(err))


# A digest is a sum of 128-bit hashes modulo 2**128.
_DIGEST_MODULUS = 1 << 128


def object_hash(obj: dict) -> int:
    """The hash of one object in a digest, an int below 2**128, as the
    proto's DigestResponse.digest defines it: of the object's metadata
    namespace, name, uid and resourceVersion. Raises TypeError for an object
    without name, uid or resourceVersion: the hub's digest counts them, so
    one without them could never match (a projection by fields keeps them)."""
    m = obj.get("metadata") or {}
    parts = (m.get("namespace", ""), m.get("name"), m.get("uid"), m.get("resourceVersion"))
    if not all(isinstance(p, str) for p in parts):
        raise TypeError(f"a digest needs metadata.name, uid and resourceVersion; {m.get('name')!r} lacks one")
    sha = hashlib.sha256(b"".join(p.encode() + b"\0" for p in parts)).digest()
    return int.from_bytes(sha[:16], "big")


class Digest:
    """The digest of the objects a client holds, as the proto's
    DigestResponse.digest defines it, and their count. Start it from a
    snapshot's objects (Digest(snapshot.objects)), or empty before a watch's
    initial events, and keep it up with apply as you apply each event to
    what you hold; then at any event's token it matches the hub's digest
    there (Client.digest). str() gives its 32 hexadecimal digits.
    docs/grpcurl.md#digest works an example through."""

    def __init__(self, objects: Iterable[dict] = ()):
        self._sum = 0
        self._count = 0
        for obj in objects:
            self.add(obj)

    @property
    def count(self) -> int:
        """How many objects it holds."""
        return self._count

    def add(self, obj: dict) -> "Digest":
        """Add an object now held."""
        self._sum = (self._sum + object_hash(obj)) % _DIGEST_MODULUS
        self._count += 1
        return self

    def remove(self, obj: dict) -> "Digest":
        """Remove an object no longer held: the state that was added,
        resourceVersion included."""
        self._sum = (self._sum - object_hash(obj)) % _DIGEST_MODULUS
        self._count -= 1
        return self

    def apply(self, event: Event, held: Optional[dict] = None) -> "Digest":
        """Apply a watch event; held is the state of the event's object you
        held before it (None if none). ADDED adds the object (in place of
        held, if given: a re-sync lists as ADDED what you may hold);
        MODIFIED replaces held with the object; DELETED removes held, not the
        event's object, which carries the deletion's resourceVersion rather
        than the state's. BOOKMARKs change nothing. A MODIFIED or DELETED
        without held raises ValueError: the digest cannot be kept without it."""
        if event.type == EventType.BOOKMARK:
            return self
        if event.type == EventType.ADDED:
            if held is not None:
                self.remove(held)
            return self.add(event.object)
        if held is None:
            name = (event.object or {}).get("metadata", {}).get("name")
            raise ValueError(f"a {EventType(event.type).value} of {name!r} needs the state held before it")
        self.remove(held)
        if event.type == EventType.MODIFIED:
            self.add(event.object)
        return self

    def matches(self, answer: HubDigest) -> bool:
        """Whether it equals the hub's digest (Client.digest): the same
        count and digest."""
        return answer.count == self._count and answer.digest == str(self)

    def __str__(self) -> str:
        return f"{self._sum:032x}"

    def __repr__(self) -> str:
        return f"Digest({str(self)!r}, count={self._count})"


def _details(err: Optional[grpc.RpcError]) -> str:
    return "the hub ended the stream" if err is None else f"{err.code().name}: {err.details()}"


def _ended_mid_stream(err: grpc.RpcError) -> bool:
    """Whether the hub ended a running stream with err (its ErrorInfo then
    carries the token to resume from), rather than refused to open it."""
    info = error_info(err)
    return info is not None and bool(info.metadata.get("resume_token"))


def _is_loopback(address: str) -> bool:
    if address.startswith("unix:"):
        return True
    host = address.removeprefix("dns:///").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ErrorInfo:
    """The google.rpc.ErrorInfo detail of a hub error (README: error codes)."""
    reason: str                   # "INVALID_RESUME_TOKEN", "FORBIDDEN", ...
    domain: str                   # "informerhub.io"
    metadata: dict[str, str]


@dataclass(frozen=True)
class FieldViolation:
    """One entry of the google.rpc.BadRequest detail of an INVALID_ARGUMENT:
    the request's field ("selector.filter", "fields", "resume_token", ...)
    and what is wrong with it."""
    field: str
    description: str


def _status_details(err: grpc.RpcError, type_name: str) -> list[bytes]:
    """The encoded details of that type (google.rpc.ErrorInfo, ...) in the
    error's grpc-status-details-bin trailer, a google.rpc.Status."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    found = []
    for key, value in trailers or ():
        if key == "grpc-status-details-bin":
            found.extend(d.value for d in _RPC.Status.FromString(value).details
                         if d.type_url.endswith("/" + type_name))
    return found


def error_info(err: grpc.RpcError) -> Optional[ErrorInfo]:
    """The ErrorInfo among the error's details, or None. Its reason says
    what happened (README: the contract)."""
    for raw in _status_details(err, "google.rpc.ErrorInfo"):
        info = _RPC.ErrorInfo.FromString(raw)
        return ErrorInfo(info.reason, info.domain, {e.key: e.value for e in info.metadata})
    return None


def field_violations(err: grpc.RpcError) -> list[FieldViolation]:
    """The fields of the request an INVALID_ARGUMENT names (its
    google.rpc.BadRequest detail); empty if none."""
    return [FieldViolation(v.field, v.description)
            for raw in _status_details(err, "google.rpc.BadRequest")
            for v in _RPC.BadRequest.FromString(raw).field_violations]


class _RPC:
    """google.rpc.Status, ErrorInfo and BadRequest, wire-compatible, built at
    import from descriptors in a pool of their own: Debian packages no
    googleapis protos, and a private pool cannot clash with them where they
    exist."""
    Status: type
    ErrorInfo: type
    BadRequest: type


def _build_rpc_messages() -> None:
    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="informerhub_client/rpc.proto", package="informerhub_client.rpc", syntax="proto3")

    def message(name, *fields):
        m = file.message_type.add(name=name)
        for number, (field, kind, repeated_of) in enumerate(fields, 1):
            f = m.field.add(name=field, number=number, type=kind,
                            label=F.LABEL_REPEATED if repeated_of else F.LABEL_OPTIONAL)
            if repeated_of:
                f.type_name = ".informerhub_client.rpc." + repeated_of

    message("Any", ("type_url", F.TYPE_STRING, None), ("value", F.TYPE_BYTES, None))
    message("Status", ("code", F.TYPE_INT32, None), ("message", F.TYPE_STRING, None),
            ("details", F.TYPE_MESSAGE, "Any"))
    # A map<string, string> is, on the wire, a repeated key/value message.
    message("Entry", ("key", F.TYPE_STRING, None), ("value", F.TYPE_STRING, None))
    message("ErrorInfo", ("reason", F.TYPE_STRING, None), ("domain", F.TYPE_STRING, None),
            ("metadata", F.TYPE_MESSAGE, "Entry"))
    message("FieldViolation", ("field", F.TYPE_STRING, None), ("description", F.TYPE_STRING, None))
    message("BadRequest", ("field_violations", F.TYPE_MESSAGE, "FieldViolation"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    get_class = getattr(message_factory, "GetMessageClass", None) \
        or message_factory.MessageFactory(pool).GetPrototype
    for name in ("Status", "ErrorInfo", "BadRequest"):
        setattr(_RPC, name, get_class(pool.FindMessageTypeByName("informerhub_client.rpc." + name)))


_build_rpc_messages()
