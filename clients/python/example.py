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

import argparse
import dataclasses
import json
import logging
import os
import re
import sys

import grpc

from informerhub_client import Client, ObjectFormat, Selector

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
            for res in client.list_resources(args.namespace):
                print(json.dumps(dataclasses.asdict(res)), file=out, flush=True)
            return 0
        resource, version, group = parse_resource(args.resource, args.version)
        sel = Selector(resource=resource, version=version, group=group, namespace=args.namespace,
                       label_selector=args.selector, field_selector=args.field_selector, filter=args.filter)
        view = {"fields": args.fields, "object_format": ObjectFormat[args.object_format.upper()]}
        if args.command == "snapshot":
            snap = client.snapshot(sel, **view)
            for obj in snap.objects:
                print(json.dumps(obj), file=out)
            print(f"watch from here with: --resume-token {snap.resume_token}", file=sys.stderr)
            return 0
        watch = client.resuming_watch(sel, resume_token=args.resume_token, include_previous=args.include_previous,
                                      send_initial_events=not args.watch_only and not args.resume_token, **view)
        try:
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
        except KeyboardInterrupt:
            watch.cancel()
            print(f"\nresume with: --resume-token {watch.resume_token}", file=sys.stderr)
        return 0
    except grpc.RpcError as err:
        print(f"example.py: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
