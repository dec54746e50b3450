"""Tests of informerhub_client against a real hub and kube-apiserver.

test/clients/python_test.go runs them (go test -run TestPythonClient
./test/clients/): it starts the control plane and the hub, generates the
stubs, and sets

    INFORMERHUB_ADDR                the hub's host:port (plaintext, loopback)
    INFORMERHUB_SHORT_HISTORY_ADDR  a hub whose history holds INFORMERHUB_SHORT_HISTORY_SIZE changes
    INFORMERHUB_SHORT_HISTORY_SIZE  (one test makes it answer OUT_OF_RANGE)
    INFORMERHUB_LIMITED_ADDR        a hub that allows one distinct filter and projection per type
    INFORMERHUB_TOKEN               a token that may list and watch configmaps in TEST_NAMESPACE
    KUBE_SERVER                     the API server's URL
    KUBE_CA_FILE                    the CA of its serving certificate
    KUBE_TOKEN                      a token that may write configmaps in TEST_NAMESPACE
    TEST_NAMESPACE                  the namespace

Without them every test fails. The suite writes ConfigMaps through the API
server's REST API and checks what the hub delivers against what those
writes returned: names, event types and resourceVersions, in order. Each
test selects its own objects by label. Nothing waits by sleeping: each
expected event is waited for, at most TIMEOUT seconds, and its absence
fails the test.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.request
import uuid
from concurrent import futures
from typing import Optional

import grpc

import informerhub_client as hub
from informerhub_client import EventType

TIMEOUT = 30.0  # seconds an expected event may take

# Selects ConfigMaps whose data.state is "on".
STATE_ON = 'has(object.data) && has(object.data.state) && object.data.state == "on"'

ENV = {}


def setUpModule():
    names = ("INFORMERHUB_ADDR", "INFORMERHUB_SHORT_HISTORY_ADDR", "INFORMERHUB_SHORT_HISTORY_SIZE",
             "INFORMERHUB_LIMITED_ADDR", "INFORMERHUB_TOKEN", "KUBE_SERVER", "KUBE_CA_FILE", "KUBE_TOKEN",
             "TEST_NAMESPACE")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not set: run these tests with "
                           "`go test -run TestPythonClient ./test/clients/` (see test/clients/python_test.go)")
    ENV.update({n: os.environ[n] for n in names})


class Kube:
    """Writes ConfigMaps in one namespace through the API server's REST API."""

    def __init__(self, server: str, ca_file: str, token: str, namespace: str):
        self.base = (server if "://" in server else "https://" + server).rstrip("/")
        self.base += f"/api/v1/namespaces/{namespace}/configmaps"
        self.tls = ssl.create_default_context(cafile=ca_file)
        self.token = token

    def _call(self, method: str, path: str = "", body: Optional[dict] = None) -> dict:
        req = urllib.request.Request(
            self.base + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + self.token, "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=TIMEOUT) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as err:
            raise AssertionError(f"{method} {req.full_url}: {err.code} {err.read().decode()}") from None

    def create(self, name: str, labels: dict, data: Optional[dict] = None) -> dict:
        return self._call("POST", body={"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": name, "labels": labels}, "data": data or {}})

    def update(self, obj: dict, data: dict) -> dict:
        """Replace obj's data; obj's resourceVersion makes it fail if anything came between."""
        return self._call("PUT", "/" + obj["metadata"]["name"], dict(obj, data=data))

    def delete(self, obj: dict) -> "Deleted":
        """Delete obj, if it is still at its resourceVersion."""
        self._call("DELETE", "/" + obj["metadata"]["name"],
                   {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"resourceVersion": obj["metadata"]["resourceVersion"]}})
        return Deleted(obj)


def change(type_: EventType, obj: dict) -> tuple:
    """What a create or update, which returned obj, must look like through the hub."""
    return (type_.value, obj["metadata"]["name"], obj["metadata"]["resourceVersion"])


class Deleted:
    """What a delete must look like through the hub. The API server answers
    a DELETE of a ConfigMap with a Status, without the deletion's
    resourceVersion: it must be later than the object's last one (and, as
    Events checks, than every event's before it and earlier than every
    event's after it)."""

    def __init__(self, obj: dict):
        self.name, self.after = obj["metadata"]["name"], int(obj["metadata"]["resourceVersion"])

    def __eq__(self, other) -> bool:
        return (isinstance(other, tuple) and other[:2] == (EventType.DELETED.value, self.name)
                and int(other[2]) > self.after)

    def __repr__(self) -> str:
        return f"('DELETED', {self.name!r}, > {self.after})"


def seen(e: hub.Event) -> tuple:
    """What an event says, in the form of change(); also checks it is whole."""
    assert e.resume_token, f"an event without a resume token: {e}"
    assert e.object is not None, f"a {e.type} without an object"
    assert e.object["metadata"]["resourceVersion"] == e.resource_version, \
        f"the event's resourceVersion {e.resource_version} is not its object's: {e.object['metadata']}"
    return (e.type.value, e.object["metadata"]["name"], e.resource_version)


class _End:
    def __init__(self, error: Optional[BaseException]):
        self.error = error


class Events:
    """Reads a WatchStream or ResumingWatch (or any iterator) on a thread of
    its own, so that the test can wait for each event with a timeout."""

    def __init__(self, stream):
        self.stream = stream
        self.queue: queue.Queue = queue.Queue()
        self.last_rv = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for e in self.stream:
                self.queue.put(e)
            self.queue.put(_End(None))
        except BaseException as err:  # handed to the test
            self.queue.put(_End(err))

    def _item(self):
        try:
            return self.queue.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"nothing arrived within {TIMEOUT}s") from None

    def get(self):
        """The next item, as read."""
        item = self._item()
        if isinstance(item, _End):
            raise AssertionError(f"the stream ended: {item.error!r}")
        return item

    def next(self, bookmarks: bool = False) -> hub.Event:
        """The next event. Periodic bookmarks (timing-dependent) are skipped
        unless bookmarks; the one that ends the initial events never is."""
        while True:
            item = self.get()
            if item.type == EventType.BOOKMARK and not item.initial_events_end and not bookmarks:
                continue
            if item.type != EventType.BOOKMARK:
                # In the order they happened. (Clients must not compute with
                # resourceVersions; a test of one API server may compare them.)
                rv = int(item.resource_version)
                assert rv > self.last_rv, f"resourceVersion {rv} after {self.last_rv}: out of order"
                self.last_rv = rv
            return item

    def changes(self, n: int) -> list:
        return [seen(self.next()) for _ in range(n)]

    def end(self) -> Optional[BaseException]:
        """Wait for the watch to end; what it raised, if anything. Events
        still queued are an error: none may come after the end."""
        while True:
            item = self._item()
            if isinstance(item, _End):
                return item.error
            if item.type != EventType.BOOKMARK:
                raise AssertionError(f"an event where the end was expected: {item}")

    def close(self):
        self.stream.cancel()
        self.thread.join(TIMEOUT)


class Proxy:
    """A TCP proxy in front of the hub whose connections the test cuts:
    cut() closes every connection and refuses new ones until restore()."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.lock = threading.Lock()  # guards blocked, open and forwarded
        self.blocked = False
        self.open: list = []
        self.forwarded = 0  # connections passed to the hub
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                if self.blocked:
                    conn.close()
                    continue
                up = socket.create_connection(self.target)
                self.open += [conn, up]
                self.forwarded += 1
            threading.Thread(target=self._serve, args=(conn, up), daemon=True).start()

    def _serve(self, conn, up):
        back = threading.Thread(target=self._pipe, args=(up, conn))
        back.start()
        self._pipe(conn, up)
        back.join()
        conn.close()
        up.close()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            self.blocked = True
            cut, self.open = self.open, []
        for s in cut:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def restore(self):
        with self.lock:
            self.blocked = False

    def close(self):
        self.listener.close()
        self.cut()


class LogSeen(logging.Handler):
    """Notices a log record of informerhub_client that contains text: the
    library logs each reconnection of a resuming watch, with its cause."""

    def __init__(self, text: str):
        super().__init__(logging.DEBUG)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record):
        if self.text in record.getMessage():
            self.seen.set()


class HubTest(unittest.TestCase):
    def setUp(self):
        self.kube = Kube(ENV["KUBE_SERVER"], ENV["KUBE_CA_FILE"], ENV["KUBE_TOKEN"], ENV["TEST_NAMESPACE"])
        self.client = self.connect()
        # This test's objects: a label no other test uses.
        self.labels = {"test": uuid.uuid4().hex[:12]}
        self.prefix = self.id().rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")[:40]
        # Every change of this test's objects as the hub delivers it. The
        # hub serves from its cache, which a write the API server has
        # acknowledged may not have reached yet: tests that read state wait
        # here first (synced).
        stream = self.client.watch(self.selector())
        self.assertTrue(stream.start_token())  # the response headers: the watch is on
        self.hub_changes = self.read(stream)

    def connect(self, address: Optional[str] = None, **kwargs) -> hub.Client:
        kwargs.setdefault("token", ENV["INFORMERHUB_TOKEN"])
        client = hub.Client(address or ENV["INFORMERHUB_ADDR"], **kwargs)
        self.addCleanup(client.close)
        return client

    def selector(self, **kwargs) -> hub.Selector:
        kwargs.setdefault("label_selector", "test=" + self.labels["test"])
        return hub.Selector(resource="configmaps", namespace=ENV["TEST_NAMESPACE"], **kwargs)

    def create(self, name: str, data: Optional[dict] = None) -> dict:
        return self.kube.create(f"{self.prefix}-{name}", self.labels, data)

    def synced(self, write):
        """Wait until the hub has delivered write (a change() or Deleted),
        and so every write before it."""
        while write != self.hub_changes.changes(1)[0]:
            pass

    def read(self, stream) -> Events:
        events = Events(stream)
        self.addCleanup(events.close)
        return events

    def assertNothingElse(self, events: Events, data: Optional[dict] = None):
        """Nothing arrives before a change made now (an object with data,
        which the watch must select): the events so far were all."""
        sentinel = self.create("sentinel", data)
        self.assertEqual(events.changes(1), [change(EventType.ADDED, sentinel)],
                         "an event arrived that no write explains")

    def has_seen(self, client: hub.Client, selector: hub.Selector, written: dict):
        """Wait until the hub of client has seen written (what the API server
        answered to a write), for a hub other than the one synced() reads."""
        target = int(written["metadata"]["resourceVersion"])
        events = Events(client.watch(selector, send_initial_events=True))
        try:
            while True:
                e = events.get()
                if e.resource_version and int(e.resource_version) >= target:
                    return
        finally:
            events.close()

    def assertCode(self, err: BaseException, code: grpc.StatusCode, reason: Optional[str] = None):
        self.assertIsInstance(err, grpc.RpcError)
        self.assertEqual(err.code(), code, err.details())
        if reason is not None:
            info = hub.error_info(err)
            self.assertIsNotNone(info, f"no ErrorInfo in {err.code().name}: {err.details()}")
            self.assertEqual((info.domain, info.reason), ("informerhub.io", reason))

    def test_watch_sends_initial_events_then_changes_in_order(self):
        a, b = self.create("a"), self.create("b")
        self.synced(change(EventType.ADDED, b))
        events = self.read(self.client.watch(self.selector(), send_initial_events=True))
        initial = [events.next(), events.next()]
        self.assertEqual(sorted(seen(e) for e in initial), [change(EventType.ADDED, a), change(EventType.ADDED, b)])
        end = events.next()
        self.assertEqual((end.type, end.initial_events_end, end.object, end.from_relist), (EventType.BOOKMARK, True, None, False), end)
        self.assertTrue(end.resume_token)

        c = self.create("c")
        a2 = self.kube.update(a, {"k": "v2"})
        gone = self.kube.delete(b)
        self.assertEqual(events.changes(3), [change(EventType.ADDED, c), change(EventType.MODIFIED, a2), gone])
        self.assertNothingElse(events)

    def test_resume_after_disconnect_delivers_exactly_the_missed_changes(self):
        x = self.create("x")
        self.synced(change(EventType.ADDED, x))
        first = self.connect()
        stream = first.watch(self.selector(), send_initial_events=True)
        events = Events(stream)
        self.assertEqual(seen(events.next()), change(EventType.ADDED, x))
        self.assertTrue(events.next().initial_events_end)
        x = self.kube.update(x, {"k": "v2"})
        last = events.next()
        self.assertEqual(seen(last), change(EventType.MODIFIED, x))
        self.assertEqual(stream.resume_token, last.resume_token)

        # Disconnect: cancel the call and close the connection.
        stream.cancel()
        first.close()
        self.assertIsNone(events.end())

        missed = [change(EventType.ADDED, y := self.create("y"))]
        missed.append(change(EventType.MODIFIED, x := self.kube.update(x, {"k": "v3"})))
        missed.append(change(EventType.MODIFIED, self.kube.update(y, {"k": "v2"})))
        missed.append(self.kube.delete(x))

        events = self.read(self.client.watch(self.selector(), resume_token=last.resume_token))
        self.assertEqual(events.changes(len(missed)), missed)
        self.assertNothingElse(events)

    def test_resuming_watch_reconnects_by_itself_after_the_connection_drops(self):
        proxy = Proxy(ENV["INFORMERHUB_ADDR"])
        self.addCleanup(proxy.close)
        client = self.connect(proxy.addr, options=[
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500),
        ])
        p = self.create("p")
        self.synced(change(EventType.ADDED, p))
        watch = client.resuming_watch(self.selector(), send_initial_events=True,
                                      backoff=hub.Backoff(initial=0.05, max=0.5))
        events = self.read(watch)
        self.assertEqual(seen(events.next()), change(EventType.ADDED, p))
        self.assertTrue(events.next().initial_events_end)
        p = self.kube.update(p, {"k": "v2"})
        self.assertEqual(events.changes(1), [change(EventType.MODIFIED, p)])
        self.assertEqual(proxy.forwarded, 1)

        proxy.cut()
        missed = [change(EventType.ADDED, q := self.create("q"))]
        missed.append(change(EventType.MODIFIED, self.kube.update(p, {"k": "v3"})))
        missed.append(self.kube.delete(q))
        proxy.restore()

        self.assertEqual(events.changes(len(missed)), missed)
        self.assertNothingElse(events)
        self.assertGreaterEqual(proxy.forwarded, 2, "the watch never reconnected")

    def test_snapshot_reads_every_page_and_its_token_resumes_after_it(self):
        # Three objects of 600 KB: more than a page (--snapshot-page-bytes, 1 MiB) holds.
        blob = {"blob": "x" * 600_000}
        objs = [self.create(n, blob) for n in ("s1", "s2", "s3")]
        self.synced(change(EventType.ADDED, objs[-1]))
        snap = self.client.snapshot(self.selector())
        self.assertEqual([(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in snap.objects],
                         [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in objs])
        self.assertGreaterEqual(snap.pages, 2)
        self.assertTrue(snap.resume_token)
        self.assertTrue(snap.resource_version)

        later = [change(EventType.MODIFIED, self.kube.update(objs[0], {"k": "small"}))]
        later.append(change(EventType.ADDED, self.create("s4")))
        later.append(self.kube.delete(objs[1]))
        events = self.read(self.client.watch(self.selector(), resume_token=snap.resume_token))
        self.assertEqual(events.changes(len(later)), later)
        self.assertNothingElse(events)

    def test_a_digest_of_a_snapshot_kept_up_with_its_watch_matches_the_hubs(self):
        a, b = self.create("a", {"v": "1"}), self.create("b")
        self.synced(change(EventType.ADDED, b))
        snap = self.client.snapshot(self.selector())
        digest = hub.Digest(snap.objects)
        at_snapshot = self.client.digest(self.selector(), resume_token=snap.resume_token)
        self.assertEqual((at_snapshot.count, at_snapshot.digest, at_snapshot.moved), (2, str(digest), False))
        self.assertTrue(digest.matches(at_snapshot))
        self.assertTrue(at_snapshot.resume_token and at_snapshot.resource_version)

        # What a consumer holds, by name, kept up with the digest.
        held = {o["metadata"]["name"]: o for o in snap.objects}
        later = [change(EventType.MODIFIED, a2 := self.kube.update(a, {"v": "2"}))]
        later.append(self.kube.delete(b))
        later.append(change(EventType.ADDED, c := self.create("c")))
        events = self.read(self.client.watch(self.selector(), resume_token=snap.resume_token))
        got = [events.next() for _ in later]
        self.assertEqual([seen(e) for e in got], later)
        # The DELETED carries the deletion's resourceVersion: the digest
        # must subtract the state held, as apply does.
        self.assertNotEqual(got[1].resource_version, held[b["metadata"]["name"]]["metadata"]["resourceVersion"])
        for e in got:
            name = e.object["metadata"]["name"]
            digest.apply(e, held.get(name))
            if e.type is EventType.DELETED:
                del held[name]
            else:
                held[name] = e.object
        self.assertEqual(str(digest), str(hub.Digest([a2, c])), "the digest of what the API server answered")

        at_last = self.client.digest(self.selector(), resume_token=got[-1].resume_token)
        self.assertEqual((at_last.count, at_last.digest, at_last.moved), (2, str(digest), False))
        self.assertFalse(digest.matches(at_snapshot), "the snapshot's digest no longer matches")

        with self.assertRaises(grpc.RpcError) as garbage:
            self.client.digest(self.selector(), resume_token="garbage")
        self.assertCode(garbage.exception, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_RESUME_TOKEN")

    def test_filter_selects_objects_as_updates_make_them_enter_and_leave(self):
        x, y = self.create("x", {"state": "off"}), self.create("y", {"state": "on"})
        self.synced(change(EventType.ADDED, y))
        events = self.read(self.client.watch(self.selector(filter=STATE_ON), send_initial_events=True))
        self.assertEqual(seen(events.next()), change(EventType.ADDED, y))  # not x: it is off
        self.assertTrue(events.next().initial_events_end)

        x_on = self.kube.update(x, {"state": "on"})
        x_more = self.kube.update(x_on, {"state": "on", "more": "1"})
        x_off = self.kube.update(x_more, {"state": "off", "more": "1"})
        self.kube.update(x_off, {"state": "off", "more": "2"})  # still off: nothing
        got = [events.next() for _ in range(3)]
        self.assertEqual([seen(e) for e in got], [change(EventType.ADDED, x_on), change(EventType.MODIFIED, x_more),
                                                  change(EventType.DELETED, x_off)])
        # It left with the change to off, in the last state the filter selected.
        self.assertEqual(got[2].object["data"], {"state": "on", "more": "1"})
        self.assertNothingElse(events, {"state": "on"})

    def test_fields_project_objects_and_skip_modifications_of_other_fields(self):
        a = self.create("a", {"watched": "1", "other": "1"})
        self.synced(change(EventType.ADDED, a))
        events = self.read(self.client.watch(self.selector(), send_initial_events=True, fields=["data.watched"]))
        added = events.next()
        self.assertEqual(added.object, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {k: a["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
            "data": {"watched": "1"},
        })
        self.assertTrue(events.next().initial_events_end)

        a2 = self.kube.update(a, {"watched": "1", "other": "2"})  # not sent
        a3 = self.kube.update(a2, {"watched": "2", "other": "2"})
        gone = self.kube.delete(a3)
        got = [events.next(), events.next()]
        self.assertEqual([seen(e) for e in got], [change(EventType.MODIFIED, a3), gone])
        self.assertEqual([e.object["data"] for e in got], [{"watched": "2"}, {"watched": "2"}])
        self.assertNothingElse(events)

    def test_include_previous_carries_the_state_before_each_modification(self):
        a = self.create("a", {"v": "1"})
        self.synced(change(EventType.ADDED, a))
        events = self.read(self.client.watch(self.selector(), send_initial_events=True, include_previous=True))
        added = events.next()
        self.assertEqual((seen(added), added.previous_object), (change(EventType.ADDED, a), None))
        self.assertTrue(events.next().initial_events_end)

        a2 = self.kube.update(a, {"v": "2"})
        a3 = self.kube.update(a2, {"v": "3"})
        gone = self.kube.delete(a3)
        got = [events.next() for _ in range(3)]
        self.assertEqual([seen(e) for e in got], [change(EventType.MODIFIED, a2), change(EventType.MODIFIED, a3), gone])
        # The states before, exactly as the API server returned them.
        self.assertEqual([e.previous_object for e in got], [a, a2, None])

    def test_struct_format_delivers_the_same_objects_as_dicts(self):
        a = self.create("a", {"v": "1"})
        self.synced(change(EventType.ADDED, a))
        options = dict(send_initial_events=True, include_previous=True, fields=["data", "metadata.labels"])
        as_json = self.read(self.client.watch(self.selector(), **options))
        as_struct = self.read(self.client.watch(self.selector(), object_format=hub.ObjectFormat.STRUCT, **options))
        initial = []
        for events in (as_json, as_struct):
            initial.append(events.next())
            self.assertEqual(seen(initial[-1]), change(EventType.ADDED, a))
            self.assertTrue(events.next().initial_events_end)
        self.assertEqual(initial[1].object, initial[0].object)
        self.assertEqual(initial[1].object["metadata"]["labels"], self.labels)  # nested dicts

        a2 = self.kube.update(a, {"v": "2"})
        b = self.create("b", {"v": "b"})
        expected = [change(EventType.MODIFIED, a2), change(EventType.ADDED, b)]
        got_json, got_struct = [as_json.next(), as_json.next()], [as_struct.next(), as_struct.next()]
        self.assertEqual([seen(e) for e in got_json], expected)
        self.assertEqual([seen(e) for e in got_struct], expected)
        for from_json, from_struct in zip(got_json, got_struct):
            self.assertEqual((from_struct.object, from_struct.previous_object),
                             (from_json.object, from_json.previous_object))
        self.assertEqual(got_struct[0].previous_object["data"], {"v": "1"})

    def test_snapshot_with_a_filter_fields_and_struct_format(self):
        a = self.create("a", {"keep": "a", "drop": "a"})
        b = self.create("b", {"keep": "b"})
        c = self.create("c", {"drop": "c"})
        self.synced(change(EventType.ADDED, c))
        sel = self.selector(filter="has(object.data) && has(object.data.keep)")
        snap = self.client.snapshot(sel, fields=["data.keep"])
        self.assertEqual([(o["metadata"]["name"], o["metadata"]["resourceVersion"], o["data"]) for o in snap.objects],
                         [(o["metadata"]["name"], o["metadata"]["resourceVersion"], {"keep": o["data"]["keep"]})
                          for o in (a, b)])
        self.assertTrue(all("labels" not in o["metadata"] for o in snap.objects))
        struct = self.client.snapshot(sel, fields=["data.keep"], object_format=hub.ObjectFormat.STRUCT)
        self.assertEqual(struct.objects, snap.objects)
        self.assertTrue(struct.resume_token)

    def test_resuming_watch_resyncs_with_its_filter_and_fields_when_its_token_expired(self):
        # This hub keeps INFORMERHUB_SHORT_HISTORY_SIZE changes: a token from
        # inside initial events, which only its history can resume, expires
        # after that many more.
        short = self.connect(ENV["INFORMERHUB_SHORT_HISTORY_ADDR"])
        sel, fields = self.selector(filter=STATE_ON), ["data.state"]
        a = self.create("a", {"state": "on", "other": "a"})
        b = self.create("b", {"state": "on", "other": "b"})
        c = self.create("c", {"state": "off"})
        self.has_seen(short, self.selector(), c)
        first = Events(short.watch(sel, send_initial_events=True, fields=fields))
        inside = first.next()
        self.assertEqual(seen(inside), change(EventType.ADDED, a))
        first.close()

        self.kube.update(a, {"state": "off", "other": "a"})  # leaves
        c_on = self.kube.update(c, {"state": "on"})  # enters
        filler = self.kube.create(self.prefix + "-filler", {"test": "filler-" + self.labels["test"]})
        for i in range(int(ENV["INFORMERHUB_SHORT_HISTORY_SIZE"])):
            filler = self.kube.update(filler, {"i": str(i)})
        self.has_seen(short, self.selector(field_selector="metadata.name=" + filler["metadata"]["name"],
                                           label_selector=""), filler)

        watch = short.resuming_watch(sel, resume_token=inside.resume_token, fields=fields,
                                     backoff=hub.Backoff(initial=0.05, max=0.5))
        events = self.read(watch)
        listed = [events.next(bookmarks=True) for _ in range(3)]
        # What the filter selects now (b, and c, which entered; not a, which
        # left), projected by fields.
        self.assertEqual([(e.type, e.resync) for e in listed],
                         [(EventType.ADDED, True), (EventType.ADDED, True), (EventType.BOOKMARK, True)])
        self.assertEqual([seen(e) for e in listed[:2]], [change(EventType.ADDED, b), change(EventType.ADDED, c_on)])
        self.assertEqual([e.object["data"] for e in listed[:2]], [{"state": "on"}, {"state": "on"}])

        b2 = self.kube.update(b, {"state": "on", "other": "b2"})  # not in fields: not sent
        b_off = self.kube.update(b2, {"state": "off", "other": "b2"})  # leaves
        self.assertEqual(events.changes(1), [change(EventType.DELETED, b_off)])
        self.assertNothingElse(events, {"state": "on"})

    def test_too_many_distinct_filters_or_projections_is_resource_exhausted(self):
        # This hub allows one distinct filter and one distinct projection
        # per resource type at once.
        limited = self.connect(ENV["INFORMERHUB_LIMITED_ADDR"])

        def started(sel, **options) -> Events:
            # This test's selection is empty: the first event ends the initial ones.
            events = self.read(limited.watch(sel, send_initial_events=True, **options))
            self.assertTrue(events.next().initial_events_end)
            return events

        holder = started(self.selector(filter="true"), fields=["data"])
        filters = self.read(limited.watch(self.selector(filter="!false"))).end()
        self.assertCode(filters, grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_DISTINCT")
        self.assertEqual((hub.error_info(filters).metadata["limit"], hub.error_info(filters).metadata["max"]),
                         ("max-filters-per-resource", "1"))
        projections = self.read(limited.watch(self.selector(), fields=["metadata.labels"])).end()
        self.assertCode(projections, grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_DISTINCT")
        self.assertEqual(hub.error_info(projections).metadata["limit"], "max-projections-per-resource")
        # The expression and the projection in use are fine.
        same = started(self.selector(filter="true"), fields=["data"])

        # A resuming watch retries until there is room.
        log = logging.getLogger("informerhub_client")
        refused = LogSeen("max-filters-per-resource")
        log.addHandler(refused)
        self.addCleanup(log.removeHandler, refused)
        self.addCleanup(log.setLevel, log.level)
        log.setLevel(logging.DEBUG)
        waiting = self.read(limited.resuming_watch(self.selector(filter="!false"), send_initial_events=True,
                                                   backoff=hub.Backoff(initial=0.05, max=0.2)))
        self.assertTrue(refused.seen.wait(TIMEOUT), "the resuming watch was not refused")
        holder.close()
        same.close()
        self.assertTrue(waiting.next().initial_events_end)

    def test_errors_carry_the_documented_codes(self):
        with self.assertRaises(grpc.RpcError) as bad_selector:
            self.client.snapshot(self.selector(label_selector="app in (web"))
        self.assertCode(bad_selector.exception, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")

        events = self.read(self.client.watch(self.selector(), resume_token="garbage"))
        self.assertCode(events.end(), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_RESUME_TOKEN")

        with self.assertRaises(grpc.RpcError) as anonymous:
            self.connect(token=None).list_resources(ENV["TEST_NAMESPACE"])
        self.assertCode(anonymous.exception, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")

        with self.assertRaises(grpc.RpcError) as secrets:
            self.client.snapshot(hub.Selector(resource="secrets", namespace=ENV["TEST_NAMESPACE"]))
        self.assertCode(secrets.exception, grpc.StatusCode.PERMISSION_DENIED, "FORBIDDEN")

        # A resuming watch gives up on what retrying cannot fix.
        watch = self.client.resuming_watch(self.selector(label_selector="app in (web"))
        self.assertCode(self.read(watch).end(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_shard_selectors_split_the_objects_between_them(self):
        objs = [self.create(f"s{i}") for i in range(8)]
        self.synced(change(EventType.ADDED, objs[-1]))
        halves = ["shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                  "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"]
        names = [sorted(o["metadata"]["name"] for o in self.client.snapshot(self.selector(shard_selector=h)).objects)
                 for h in halves]
        self.assertEqual(sorted(names[0] + names[1]), sorted(o["metadata"]["name"] for o in objs))
        self.assertFalse(set(names[0]) & set(names[1]), names)

    def test_watch_many_sends_every_initial_event_first_and_resumes_them_all(self):
        a = self.create("a", {"k": "1"})
        self.synced(change(EventType.ADDED, a))
        watches = [hub.ManyWatch(self.selector(), send_initial_events=True),
                   hub.ManyWatch(self.selector(field_selector="metadata.name=" + a["metadata"]["name"]), send_initial_events=True)]
        stream = self.client.watch_many(watches)
        events = self.read(stream)
        got = [events.get() for _ in range(4)]
        self.assertEqual([(m.index, m.event.type, m.initial_events_end) for m in got],
                         [(0, EventType.ADDED, False), (0, EventType.BOOKMARK, False),
                          (1, EventType.ADDED, False), (1, EventType.BOOKMARK, True)])
        last = got[-1].resume_token
        stream.cancel()
        # A change while no one watches; the first watch alone resumes.
        a2 = self.kube.update(a, {"k": "2"})
        events = self.read(self.client.watch_many(watches[:1], resume_token=last))
        m = events.get()
        while m.event.type == EventType.BOOKMARK:
            m = events.get()
        self.assertEqual((m.index, seen(m.event)), (0, change(EventType.MODIFIED, a2)))

    def test_count_counts_per_group_then_follows_changes(self):
        a = self.create("a")
        self.synced(change(EventType.ADDED, a))
        events = self.read(self.client.count(self.selector(), group_by="label:test"))
        first = events.get()
        self.assertEqual((first.groups, first.total), ({self.labels["test"]: 1}, 1))
        self.assertTrue(first.resource_version)
        self.create("b")
        self.assertEqual(events.get().total, 2)

    def test_invalid_filters_fields_and_field_selectors_name_the_field(self):
        cases = {
            "selector.filter": dict(selector=self.selector(filter="object.data.(")),  # a CEL syntax error
            # data.v is not a field a field selector on configmaps may name
            "selector.field_selector": dict(selector=self.selector(field_selector="data.v=1")),
            "fields": dict(selector=self.selector(), fields=["metadata..name"]),
        }
        for field, request in cases.items():
            with self.subTest(field):
                selector = request.pop("selector")
                err = self.read(self.client.watch(selector, **request)).end()
                self.assertCode(err, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
                self.assertEqual(hub.error_info(err).metadata["field"], field)
                violations = hub.field_violations(err)
                self.assertEqual([v.field for v in violations], [field])
                self.assertTrue(violations[0].description, "the violation says what is wrong")
                # A resuming watch does not retry it either.
                self.assertCode(self.read(self.client.resuming_watch(selector, **request)).end(),
                                grpc.StatusCode.INVALID_ARGUMENT)
        # The field selector's refusal names the fields there are.
        err = self.read(self.client.watch(self.selector(field_selector="data.v=1"))).end()
        self.assertIn("metadata.name", hub.field_violations(err)[0].description)

    def test_list_resources_shows_what_the_caller_may_watch(self):
        resources = {(r.group, r.version, r.resource): r for r in self.client.list_resources(ENV["TEST_NAMESPACE"])}
        cm = resources.get(("", "v1", "configmaps"))
        self.assertIsNotNone(cm, sorted(resources))
        self.assertEqual((cm.kind, cm.namespaced), ("ConfigMap", True))
        self.assertEqual(cm.selectable_fields, ("metadata.name", "metadata.namespace"))
        # The hub's activity and retained window are cluster-wide: not in a
        # namespace's listing.
        self.assertEqual((cm.retained_resource_version, cm.retained_since, cm.retained), ("", None, False))
        self.assertNotIn(("", "v1", "secrets"), resources)

    def example(self) -> list[str]:
        """The command line of example.py against the hub, with a token file."""
        with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
            f.write(ENV["INFORMERHUB_TOKEN"] + "\n")
        self.addCleanup(os.remove, f.name)
        return [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "example.py"),
                "--hub", ENV["INFORMERHUB_ADDR"], "--insecure", "--token-file", f.name]

    def test_example_prints_json_lines_and_the_token_to_resume_from(self):
        obj = self.create("cli")
        self.synced(change(EventType.ADDED, obj))
        example = self.example()
        sel = ["configmaps", "-n", ENV["TEST_NAMESPACE"], "-l", "test=" + self.labels["test"]]

        snap = subprocess.run(example + ["snapshot", *sel], capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        self.assertEqual([json.loads(line)["metadata"]["resourceVersion"] for line in snap.stdout.splitlines()],
                         [obj["metadata"]["resourceVersion"]])
        self.assertIn("--resume-token ", snap.stderr)

        watch = subprocess.Popen(example + ["watch", *sel], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(watch.kill)
        lines = Events(iter(watch.stdout.readline, ""))  # reads the lines on a thread
        added, end = json.loads(lines.get()), json.loads(lines.get())
        self.assertEqual((added["type"], added["object"]["metadata"]["name"], added["resourceVersion"]),
                         change(EventType.ADDED, obj))
        self.assertEqual((end["type"], end.get("initialEventsEnd")), ("BOOKMARK", True))
        watch.send_signal(signal.SIGINT)  # Ctrl-C
        _, stderr = watch.communicate(timeout=TIMEOUT)
        self.assertEqual(watch.returncode, 0, stderr)
        self.assertIn("resume with: --resume-token " + end["resumeToken"], stderr)

    def test_example_watches_with_a_filter_fields_previous_states_and_structs(self):
        self.create("off", {"state": "off", "v": "1"})
        on = self.create("on", {"state": "on", "v": "1"})
        self.synced(change(EventType.ADDED, on))
        watch = subprocess.Popen(self.example() + [
            "watch", "configmaps", "-n", ENV["TEST_NAMESPACE"], "-l", "test=" + self.labels["test"],
            "--filter", STATE_ON, "--field", "data.v", "--include-previous", "--object-format", "struct",
        ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(watch.kill)
        lines = Events(iter(watch.stdout.readline, ""))  # reads the lines on a thread

        def change_line() -> dict:
            while (line := json.loads(lines.get()))["type"] == "BOOKMARK" and not line.get("initialEventsEnd"):
                pass  # a periodic bookmark
            return line

        added = change_line()
        self.assertEqual((added["type"], added["object"]["metadata"]["name"], added["object"]["data"]),
                         ("ADDED", on["metadata"]["name"], {"v": "1"}))  # not "off"; only data.v
        self.assertNotIn("labels", added["object"]["metadata"])
        self.assertTrue(change_line()["initialEventsEnd"])
        on2 = self.kube.update(on, {"state": "on", "v": "2"})
        modified = change_line()
        self.assertEqual((modified["type"], modified["resourceVersion"]),
                         ("MODIFIED", on2["metadata"]["resourceVersion"]))
        self.assertEqual((modified["object"]["data"], modified["previousObject"]["data"]), ({"v": "2"}, {"v": "1"}))
        watch.send_signal(signal.SIGINT)
        _, stderr = watch.communicate(timeout=TIMEOUT)
        self.assertEqual(watch.returncode, 0, stderr)

    def test_example_lists_resources_with_their_selectable_fields(self):
        out = subprocess.run(self.example() + ["resources", "-n", ENV["TEST_NAMESPACE"]],
                             capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(out.returncode, 0, out.stderr)
        resources = [json.loads(line) for line in out.stdout.splitlines()]
        cm = [r for r in resources if (r["group"], r["resource"]) == ("", "configmaps")]
        self.assertEqual([r["selectable_fields"] for r in cm], [["metadata.name", "metadata.namespace"]], resources)


class FakeHub(hub.pb_grpc.InformerHubServiceServicer):
    """Plays a script of Watch calls: the real hub cannot be made to drop a
    stream between its headers and its first event, nor to expire the token
    of a watch that has been running."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.lock = threading.Lock()

    def Watch(self, request, context):
        with self.lock:
            self.requests.append(request)
            step = self.script.pop(0) if self.script else []
        for item in step:
            if isinstance(item, grpc.StatusCode):
                context.abort(item, "scripted")
            elif isinstance(item, str):
                context.send_initial_metadata((("resume-token", item),))
            else:
                yield item
        # A stream that the script does not end stays open until the client leaves.
        left = threading.Event()
        if context.add_callback(left.set):
            left.wait()


class ResumingWatchScriptTest(unittest.TestCase):
    """The parts of ResumingWatch the real hub cannot be made to exercise
    on demand, against a scripted server."""

    def serve(self, script) -> tuple[FakeHub, hub.Client]:
        fake = FakeHub(script)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        hub.pb_grpc.add_InformerHubServiceServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        self.address = f"127.0.0.1:{port}"
        client = hub.Client(self.address)
        self.addCleanup(client.close)
        return fake, client

    def test_out_of_range_resyncs_and_a_drop_before_the_first_event_resumes_from_the_headers(self):
        def resp(type_, token, name="", initial_end=False):
            rv = token.removeprefix("t")
            obj = json.dumps({"metadata": {"name": name, "resourceVersion": rv}}) if name else ""
            return hub.pb.WatchResponse(type=type_, object=obj, resume_token=token, resource_version=rv,
                                        initial_events_end=initial_end)

        fake, client = self.serve([
            [grpc.StatusCode.OUT_OF_RANGE],  # the token expired
            ["t0", grpc.StatusCode.UNAVAILABLE],  # headers, then a drop
            [resp(hub.pb.EVENT_TYPE_ADDED, "t1", "a"),
             resp(hub.pb.EVENT_TYPE_BOOKMARK, "t2", initial_end=True),
             grpc.StatusCode.UNAVAILABLE],
            [resp(hub.pb.EVENT_TYPE_MODIFIED, "t3", "a")],
        ])
        selector = hub.Selector(resource="configmaps", label_selector="app=web", filter="has(object.data)")
        watch = client.resuming_watch(selector, resume_token="expired", fields=["data", "metadata.labels"],
                                      include_previous=True, object_format=hub.ObjectFormat.STRUCT,
                                      backoff=hub.Backoff(initial=0.01, max=0.05))
        events = Events(watch)
        self.addCleanup(events.close)
        got = [events.next(bookmarks=True) for _ in range(3)]
        self.assertEqual([(e.type, e.resume_token, e.resync, e.initial_events_end) for e in got], [
            (EventType.ADDED, "expired", True, False),  # until the re-sync ends: the token from before it
            (EventType.BOOKMARK, "t2", True, False),
            (EventType.MODIFIED, "t3", False, False),
        ])
        self.assertEqual(watch.resume_token, "t3")
        self.assertEqual([(r.resume_token, r.send_initial_events) for r in fake.requests],
                         [("expired", False), ("", True), ("t0", False), ("t2", False)])
        # Every call, the re-sync's too, asks for the same selection and view.
        for r in fake.requests:
            self.assertEqual((r.selector, list(r.fields), r.include_previous, r.object_format),
                             (selector.to_proto(), ["data", "metadata.labels"], True, hub.pb.OBJECT_FORMAT_STRUCT))

    def test_example_ends_on_ctrl_c_with_the_token_of_its_last_line(self):
        """Ctrl-C, pressed once or twice, at any moment of a stream that
        never pauses: the example exits 0 without a traceback, and its
        resume line names the token of the last line it printed, so that
        resuming from it loses and repeats nothing. (grpcio breaks its own
        locks when KeyboardInterrupt lands inside it: grpc/grpc#19973.)"""
        def endless():
            for i in itertools.count(1):
                obj = json.dumps({"metadata": {"name": "a", "resourceVersion": str(i)}})
                yield hub.pb.WatchResponse(type=hub.pb.EVENT_TYPE_MODIFIED, object=obj,
                                           resume_token=f"t{i}", resource_version=str(i))

        trials = 12
        self.serve([endless() for _ in range(trials)])
        example = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "example.py"),
                   "--hub", self.address, "--insecure", "watch", "configmaps", "--resume-token", "t0"]
        for trial in range(trials):
            with self.subTest(trial=trial):
                errors = tempfile.TemporaryFile("w+")
                self.addCleanup(errors.close)
                watch = subprocess.Popen(example, stdout=subprocess.PIPE, stderr=errors, text=True)
                self.addCleanup(watch.kill)
                self.addCleanup(watch.stdout.close)
                first = [watch.stdout.readline() for _ in range(1 + trial * 37 % 200)]
                watch.send_signal(signal.SIGINT)
                if trial % 2:
                    watch.send_signal(signal.SIGINT)  # impatient
                rest = watch.stdout.read()  # to the end: from the buffer readline filled too
                watch.wait(TIMEOUT)
                errors.seek(0)
                stderr = errors.read()
                lines = [json.loads(line) for line in first + rest.splitlines() if line.strip()]
                self.assertEqual(watch.returncode, 0, stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual([line["resumeToken"] for line in lines], [f"t{i}" for i in range(1, len(lines) + 1)])
                self.assertIn(f"resume with: --resume-token {lines[-1]['resumeToken']}\n", stderr)

    def test_structs_are_delivered_as_dicts_with_float_numbers(self):
        obj = {"apiVersion": "v1", "kind": "Thing",
               "metadata": {"name": "a", "resourceVersion": "2", "labels": {"app": "web"}},
               "spec": {"replicas": 3, "ratio": 0.5, "paused": False, "none": None, "ports": [80, {"name": "http"}]}}
        before = dict(obj, spec={"replicas": 2})
        resp = hub.pb.WatchResponse(type=hub.pb.EVENT_TYPE_MODIFIED, resume_token="t1", resource_version="2")
        resp.object_struct.update(obj)
        resp.previous_object_struct.update(before)
        fake, client = self.serve([[resp]])
        events = Events(client.watch(hub.Selector(resource="things", group="example.com"),
                                     include_previous=True, object_format=hub.ObjectFormat.STRUCT))
        self.addCleanup(events.close)
        e = events.next()
        self.assertEqual((e.object, e.previous_object), (obj, before))
        # Numbers come as floats: 3 == 3.0, but it is not an int.
        self.assertIsInstance(e.object["spec"]["replicas"], float)
        self.assertEqual((fake.requests[0].object_format, fake.requests[0].include_previous),
                         (hub.pb.OBJECT_FORMAT_STRUCT, True))

    def test_options_are_checked_before_any_call(self):
        client = hub.Client("127.0.0.1:1")
        self.addCleanup(client.close)
        sel = hub.Selector(resource="configmaps")
        with self.assertRaisesRegex(TypeError, "fields is a list of paths"):
            client.watch(sel, fields="status.phase")
        with self.assertRaisesRegex(TypeError, "object_format is ObjectFormat.JSON or ObjectFormat.STRUCT"):
            client.resuming_watch(sel, object_format="struct")
        with self.assertRaisesRegex(TypeError, "fields is a list of paths"):
            client.snapshot(sel, fields="status.phase")


if __name__ == "__main__":
    unittest.main()
