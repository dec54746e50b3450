#!/usr/bin/env node
'use strict';
// An example CLI on informerhub.js: watch, snapshot and resources, printing
// JSON lines. Run `node example.js --help`.

const { parseArgs } = require('node:util');
const { connect, ObjectFormat } = require('./informerhub.js');

const USAGE = `usage:
  node example.js [global flags] watch RESOURCE [selection] [view] [--include-previous] [--resume-token TOKEN] [--watch-only]
  node example.js [global flags] snapshot RESOURCE [selection] [view]
  node example.js [global flags] resources [-n NAMESPACE]

watch     prints one JSON line per event ({type, object, previousObject, resourceVersion,
          resumeToken, ...}): the current objects, the bookmark that ends them, then every
          change. It reconnects and resumes by itself; on Ctrl-C it prints the token to
          resume from.
snapshot  prints one JSON line per object, then (on stderr) the token to watch from.
resources prints one JSON line per resource type you may watch (selectableFields: what
          --field-selector may name).

RESOURCE is a plural resource name with an optional version and group:
configmaps, deployments.apps, deployments.v1.apps.

selection:
  -n, --namespace NAMESPACE  the namespace (default: all)
  -l, --selector LABELS      a label selector, e.g. app=web
  --field-selector FIELDS    a field selector, e.g. status.phase=Running (see resources)
  --filter EXPR              a CEL expression over object, e.g. 'object.data.mode == "on"'
view:
  --field PATH               keep only this field of each object, e.g. status.phase
                             (repeatable; name, namespace, uid, resourceVersion stay)
  --object-format FORMAT     json (default) or struct: how the hub sends objects
  --include-previous         MODIFIED events carry previousObject, the state before

global flags:
  --hub HOST:PORT      the hub (default: $INFORMERHUB_ADDRESS, else 127.0.0.1:8080)
  --token-file FILE    send the bearer token in FILE, re-read for every call
  --ca-file FILE       use TLS, verifying the hub with this CA (default: plaintext to
                       a loopback address, TLS with the system's roots otherwise)
  --insecure           plaintext (bearer tokens only to loopback)
`;

async function main(argv) {
  const { values: flags, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      hub: { type: 'string' },
      addr: { type: 'string' }, // the former name of --hub
      'token-file': { type: 'string' },
      'ca-file': { type: 'string' },
      insecure: { type: 'boolean' },
      namespace: { type: 'string', short: 'n', default: '' },
      selector: { type: 'string', short: 'l', default: '' },
      'field-selector': { type: 'string', default: '' },
      filter: { type: 'string', default: '' },
      field: { type: 'string', multiple: true, default: [] },
      'object-format': { type: 'string', default: 'json' },
      'include-previous': { type: 'boolean', default: false },
      'resume-token': { type: 'string', default: '' },
      'watch-only': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, resourceName, ...rest] = positionals;
  if (flags.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (!['watch', 'snapshot', 'resources'].includes(command) || rest.length > 0 ||
      (command === 'resources') !== (resourceName === undefined)) {
    process.stderr.write(USAGE);
    return 2;
  }
  if (!Object.values(ObjectFormat).includes(flags['object-format'])) {
    process.stderr.write(`--object-format is json or struct, not ${JSON.stringify(flags['object-format'])}\n`);
    return 2;
  }
  if (flags['include-previous'] && command !== 'watch') {
    process.stderr.write('--include-previous is for watch\n');
    return 2;
  }
  const address = flags.hub ?? flags.addr ?? (process.env.INFORMERHUB_ADDRESS || '127.0.0.1:8080');
  const hub = connect(address, { tokenFile: flags['token-file'], caFile: flags['ca-file'], insecure: flags.insecure });
  try {
    if (command === 'resources') {
      for (const r of await hub.listResources(flags.namespace)) print(r);
      return 0;
    }
    const selector = {
      ...(await resolve(hub, resourceName, flags.namespace)),
      namespace: flags.namespace,
      labelSelector: flags.selector,
      fieldSelector: flags['field-selector'],
      filter: flags.filter,
    };
    const view = { fields: flags.field, objectFormat: flags['object-format'] };
    if (command === 'snapshot') {
      const snap = await hub.snapshot(selector, view);
      for (const o of snap.objects) print(o);
      process.stderr.write(`${snap.objects.length} objects at resourceVersion ${snap.resourceVersion}; ` +
        `watch the changes after them with: --resume-token ${snap.resumeToken}\n`);
      return 0;
    }
    const resumeToken = flags['resume-token'];
    const watch = hub.resumingWatch(selector, {
      ...view,
      includePrevious: flags['include-previous'],
      resumeToken,
      sendInitialEvents: !flags['watch-only'] && resumeToken === '',
      onRetry: (err) => process.stderr.write(`(reconnecting: ${err.message})\n`),
    });
    const interrupted = new Promise((resolve) => process.once('SIGINT', resolve));
    interrupted.then(() => watch.cancel());
    for await (const e of watch) print(e);
    if (watch.resumeToken) process.stderr.write(`resume with: --resume-token ${watch.resumeToken}\n`);
    return 0;
  } finally {
    hub.close();
  }
}

/** Finds the group and version of a resource name by asking the hub what it serves. */
async function resolve(hub, name, namespace) {
  const served = await hub.listResources(namespace);
  const matches = served.filter((r) =>
    (name === r.resource && r.group === '') ||
    name === `${r.resource}.${r.group}` ||
    (name === `${r.resource}.${r.version}` && r.group === '') ||
    name === `${r.resource}.${r.version}.${r.group}`);
  if (matches.length === 0) {
    throw new Error(`no resource ${JSON.stringify(name)} that you may list and watch${namespace ? ` in ${namespace}` : ' cluster-wide'} (see: resources)`);
  }
  matches.sort((a, b) => versionRank(b.version) - versionRank(a.version));
  return { group: matches[0].group, version: matches[0].version, resource: matches[0].resource };
}

/** Orders Kubernetes versions: GA before beta before alpha, newer first. */
function versionRank(v) {
  const m = /^v(\d+)(?:(alpha|beta)(\d+))?$/.exec(v);
  if (!m) return -Infinity;
  const stage = { alpha: 0, beta: 1 }[m[2]] ?? 2;
  return stage * 1e6 + Number(m[1]) * 1e3 + Number(m[3] ?? 0);
}

function print(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

// Whoever reads stdout may go away (example.js ... | head -3): stop as
// quietly as they did, as a command line tool does on SIGPIPE, rather than
// with an unhandled EPIPE.
process.stdout.on('error', (err) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
}, (err) => {
  process.stderr.write(`error: ${err.message}\n`);
  process.exitCode = 1;
});
