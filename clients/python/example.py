#!/usr/bin/python3
"""An example command line client of informerhub, on informerhub_client.

    example.py --insecure --token-file .cache/run/token watch configmaps -n demo
    example.py --insecure --token-file .cache/run/token snapshot configmaps -n demo
    example.py --insecure --token-file .cache/run/token resources -n demo
    example.py --insecure --token-file .cache/run/token watch configmaps -n demo \
        --filter 'object.data.mode == "on"' --field data.mode --include-previous

watch prints one JSON line per event (the objects first, then every change;
it reconnects and resumes by itself); on Ctrl-C it prints the token to
continue from with --resume-token. snapshot prints one JSON line per object,
resources one per resource type (with the fields a field selector may name).
"""

from __future__ import annotations

# Ctrl-C must never raise inside grpcio: a KeyboardInterrupt there breaks
# its locks (grpc/grpc#19973) and the resume line would be lost, or name an
# event not yet printed. So SIGINT raises nothing anywhere, from before the
# first import on: it only wakes the main thread (which runs no gRPC code)
# through the wakeup fd, and the calls run on a worker thread.
import os
import signal

_wake_r, _wake_w = os.pipe()
os.set_blocking(_wake_w, False)
signal.set_wakeup_fd(_wake_w)
signal.signal(signal.SIGINT, lambda signum, frame: None)

import argparse  # noqa: E402 (after the handler: see above)
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from typing import Callable  # noqa: E402

import grpc  # noqa: E402

from informerhub_client import Client, ObjectFormat, Selector  # noqa: E402

_VERSION = re.compile(r"v\d+((alpha|beta)\d+)?$")


def parse_resource(name: str, version: str) -> tuple[str, str, str]:
    """configmaps, deployments.apps, deployments.v1.apps, foos.v1beta1.example.com
    → (resource, version, group)."""
    resource, _, rest = name.partition(".")
    first, _, after = rest.partition(".")
    if _VERSION.match(first):
        return resource, version or first, after
    return resource, version or "v1", rest


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="Watch and list Kubernetes objects through informerhub.")
    p.add_argument("--hub", default=os.environ.get("INFORMERHUB_ADDRESS", "127.0.0.1:8080"),
                   help="the hub's host:port (default $INFORMERHUB_ADDRESS or 127.0.0.1:8080)")
    p.add_argument("--insecure", action="store_true", help="connect without TLS (a hub on loopback)")
    p.add_argument("--ca-file", help="CA certificates to verify the hub with (default: the system's)")
    p.add_argument("--token-file", help="a file holding a bearer token, re-read for every call")
    sub = p.add_subparsers(dest="command", required=True)
    for command in ("watch", "snapshot"):
        c = sub.add_parser(command)
        c.add_argument("resource", help="configmaps, deployments.apps, deployments.v1.apps, ...")
        c.add_argument("--version", default="", help="the API version (default: from RESOURCE, or v1)")
        c.add_argument("-n", "--namespace", default="", help="the namespace (default: all)")
        c.add_argument("-l", "--selector", default="", help="a label selector, e.g. app=web")
        c.add_argument("--field-selector", default="",
                       help="e.g. status.phase=Running (the fields `resources` lists for the type)")
        c.add_argument("--filter", default="", help="a CEL expression over object, e.g. 'object.data.mode == \"on\"'")
        c.add_argument("--field", action="append", default=[], dest="fields", metavar="PATH",
                       help="keep only this field of each object, e.g. status.phase (repeatable; "
                            "name, namespace, uid and resourceVersion stay)")
        c.add_argument("--object-format", choices=[f.name.lower() for f in ObjectFormat], default="json",
                       help="how the hub sends objects (struct: every number becomes a float)")
        if command == "watch":
            c.add_argument("--include-previous", action="store_true",
                           help="MODIFIED events carry previousObject, the state before the change")
            c.add_argument("--resume-token", default="", help="continue right after the event that carried it")
            c.add_argument("--watch-only", action="store_true", help="only changes, not the current objects first")
    r = sub.add_parser("resources")
    r.add_argument("-n", "--namespace", default="", help="what you may watch in this namespace (default: cluster-wide)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    if args.insecure and args.ca_file:
        p.error("--insecure and --ca-file contradict each other")
    token = None
    if args.token_file:
        def token() -> str:  # re-read for every call: projected tokens rotate
            with open(args.token_file) as f:
                return f.read().strip()
    try:
        client = Client(args.hub, token=token, tls=not args.insecure, ca_file=args.ca_file)
    except (OSError, ValueError) as err:
        p.error(str(err))
    out = sys.stdout
    try:
        if args.command == "resources":
            def resources() -> None:
                for res in client.list_resources(args.namespace):
                    print(json.dumps(dataclasses.asdict(res)), file=out, flush=True)
            return 0 if run_until_interrupted(resources, client.close) else 130
        resource, version, group = parse_resource(args.resource, args.version)
        sel = Selector(resource=resource, version=version, group=group, namespace=args.namespace,
                       label_selector=args.selector, field_selector=args.field_selector, filter=args.filter)
        view = {"fields": args.fields, "object_format": ObjectFormat[args.object_format.upper()]}
        if args.command == "snapshot":
            def snapshot() -> None:
                snap = client.snapshot(sel, **view)
                for obj in snap.objects:
                    print(json.dumps(obj), file=out)
                out.flush()  # here, where a closed pipe is handled (below)
                print(f"watch from here with: --resume-token {snap.resume_token}", file=sys.stderr)
            return 0 if run_until_interrupted(snapshot, client.close) else 130
        watch = client.resuming_watch(sel, resume_token=args.resume_token, include_previous=args.include_previous,
                                      send_initial_events=not args.watch_only and not args.resume_token, **view)

        def print_events() -> None:
            for e in watch:
                line = {"type": e.type.value, "resourceVersion": e.resource_version, "resumeToken": e.resume_token}
                if e.initial_events_end:
                    line["initialEventsEnd"] = True
                if e.resync:
                    line["resync"] = True
                if e.object is not None:
                    line["object"] = e.object
                if e.previous_object is not None:
                    line["previousObject"] = e.previous_object
                print(json.dumps(line), file=out, flush=True)

        # On Ctrl-C the watch is cancelled, and the worker prints the event
        # it holds, if any, before it ends: the watch's token is then that of
        # the last line printed.
        if not run_until_interrupted(print_events, watch.cancel):
            print(f"\nresume with: --resume-token {watch.resume_token}", file=sys.stderr)
        return 0
    except grpc.RpcError as err:
        print(f"example.py: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Whoever read stdout has gone (example.py ... | head -3): stop as
        # quietly as they did. Python flushes stdout once more at exit,
        # which would fail again: point it at /dev/null (as the Python
        # documentation of SIGPIPE advises).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        client.close()


def run_until_interrupted(work: Callable[[], None], cancel: Callable[[], None]) -> bool:
    """Runs work on a worker thread until it returns (True) or Ctrl-C
    (False; then cancel() ends it, and this waits for it). What work raises
    is raised here, unless Ctrl-C came first."""
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            work()
        except BaseException as err:  # handed to the main thread
            failure.append(err)
        finally:
            os.write(_wake_w, b"\0")

    t = threading.Thread(target=worker, name="example", daemon=True)
    t.start()
    interrupted = os.read(_wake_r, 1) != b"\0"  # the wakeup fd writes the signal's number
    if interrupted:
        cancel()
    t.join()
    if failure and not interrupted:
        raise failure[0]
    return not interrupted

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
