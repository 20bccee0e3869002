#!/usr/bin/env node
// Launcher for the `mlmodel` CLI. The CLI is TypeScript run by Node 24's type stripping;
// machines that ship an older Node get the Node 24 binary installed from the npm registry
// (the `node` package) and are re-executed under it.
// The namespace, not a named import: Node before 22.1 has no enableCompileCache, and this
// launcher must still start there to re-execute itself under Node 24.
import * as nodeModule from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// node:fs through require, not an ES import: an ES import of a built-in reads every export,
// and fs.promises is a getter that loads fs/promises, readline and more (34 internal modules)
// into every `mlmodel` process (bench/README.md, phase C). node:child_process is loaded only
// to re-execute under Node 24.
const { existsSync } = nodeModule.createRequire(import.meta.url)("node:fs");

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "cli", "main.js");
const source = join(root, "src", "cli", "main.ts");
const entry = existsSync(source) ? source : compiled;
const major = Number(process.versions.node.split(".")[0]);

if (major >= 24 || entry === compiled) {
  // Node's compile cache keeps each module's TypeScript-stripped source and bytecode on disk
  // ($NODE_COMPILE_CACHE, else the temp dir). On a warm cache the type stripper (a 17 MiB
  // WebAssembly module) is never loaded and nothing is recompiled: the operator starts with
  // 20 MiB less memory (bench/README.md). The image ships a cache made at build time. A cache
  // that cannot be written is simply not used.
  nodeModule.enableCompileCache?.();
  await import(entry);
} else {
  const node24 = join(root, "node_modules", "node", "bin", "node");
  if (!existsSync(node24)) {
    console.error(
      `mlmodel needs Node.js 24 or newer (this is ${process.version}); run \`npm install\` in ${root}.`,
    );
    process.exit(1);
  }
  const { spawnSync } = await import("node:child_process");
  const result = spawnSync(node24, [entry, ...process.argv.slice(2)], { stdio: "inherit" });
  process.exit(result.status ?? 1);
}
