// Builds dist/informerhub-web.js (the package as one script that sets
// window.informerhubWeb, for pages without a bundler), or, with --tests, the
// tests into build/test for node --test. Deterministic: the same sources
// give the same bytes (no timestamps, paths relative to this directory).

import { build } from "esbuild";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
process.chdir(root);

if (process.argv.includes("--tests")) {
  await build({
    entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => join("test", f)),
    outdir: "build/test",
    bundle: true,
    // Dependencies load from node_modules, as an application's would.
    packages: "external",
    platform: "node",
    format: "esm",
    target: "node20",
    outExtension: { ".js": ".js" },
    logLevel: "warning",
  });
} else {
  await build({
    entryPoints: ["src/browser.ts"],
    outfile: "dist/informerhub-web.js",
    bundle: true,
    format: "iife",
    platform: "browser",
    target: "es2022",
    minify: true,
    legalComments: "eof",
    charset: "utf8",
    logLevel: "warning",
  });
}
