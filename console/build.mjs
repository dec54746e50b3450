// Builds the console into ../server/console/dist, which the hub embeds and
// serves at /: index.html, app.js and app.css, nothing else. Deterministic:
// the same sources give the same bytes (no timestamps, no source maps, no
// absolute paths), so the committed files can be checked by rebuilding.
// With --tests, builds the unit tests into build/test for node --test.

import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
process.chdir(root);

// @informerhub/web resolves to ../clients/web/src through tsconfig.json's
// paths, and its dependencies from ../clients/web/node_modules: one copy of
// connect-es and protobuf in the bundle.
const common = { bundle: true, logLevel: "warning", charset: "utf8", tsconfig: "tsconfig.json" };

if (process.argv.includes("--tests")) {
  await build({
    ...common,
    entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => join("test", f)),
    outdir: "build/test",
    platform: "node",
    format: "esm",
    target: "node20",
    // node:test and node:assert stay imports; everything else is bundled.
    external: ["node:*"],
    loader: { ".html": "text" },
  });
} else {
  const out = join("..", "server", "console", "dist");
  mkdirSync(out, { recursive: true });
  await build({
    ...common,
    entryPoints: { app: "src/main.ts" },
    outdir: out,
    platform: "browser",
    format: "iife",
    target: "es2022",
    minify: true,
    legalComments: "none",
  });
  await build({
    ...common,
    entryPoints: { app: "src/app.css" },
    outdir: out,
    minify: true,
  });
  copyFileSync("src/index.html", join(out, "index.html"));
}
