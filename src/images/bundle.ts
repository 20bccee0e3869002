/**
 * The CLI as the image runs it: src/cli/main.ts and everything it imports, bundled by esbuild
 * into dist/bundle/ (the entry `mlmodel.mjs`, and one chunk per set of commands that share
 * code: `mlmodel operator` loads 14 chunks and prom-client's 24 files instead of 123 modules).
 * Resolving 123 modules made one function of node:path hot enough for TurboFan, whose code
 * then stayed mapped; with the built-ins and kubeconfig changes, an idle operator went from
 * 79.4 to 67.9 MiB of resident memory in the benchmark's memory series.
 *
 * What stays out of the bundle, loaded from node_modules at run time (so node_modules stays
 * beside dist/bundle, as in the image's /app): every production dependency but pino
 * (`bundledDependencies`), that is client-node (imported only for auth-provider users), the
 * download command's S3, Azure, tar, zip and undici, and what the runtime loads with
 * createRequire: prom-client's files one by one (src/runtime/metrics.ts) and yaml for a YAML
 * kubeconfig. Source maps are written beside the chunks (`.mjs.map`, without the sources:
 * they point to ../../src, which the image ships); Node uses them with
 * `NODE_OPTIONS=--enable-source-maps`, off by default because it costs memory.
 *
 * The image build (the Dockerfile's `bundle` stage and recipes.ts) calls `buildBundle`; the
 * benchmark runs the operator from `ensureBundle`, the same build cached by content in the
 * checkout's dist/bundle. The unbundled CLI (bin/mlmodel.js, src/) is unchanged.
 *
 *   node src/images/bundle.ts [OUTDIR]   builds into OUTDIR (default dist/bundle)
 */
import { createHash } from "node:crypto";
import { chmod, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { withBuildLock } from "../cluster/binaries.ts";
import { packageRoot } from "../cluster/paths.ts";
import { listFiles, treeKey } from "./files.ts";

/** Bumped when how the bundle is made changes without a change to its inputs' files. */
export const bundleVersion = 1;

/** Where the bundle lies under the package root (the image's /app), and its entry. */
export const bundleLayout = {
  dir: "dist/bundle",
  entry: "dist/bundle/mlmodel.mjs",
} as const;

/** The production dependencies bundled; the others are loaded from node_modules (see above). */
export const bundledDependencies = ["pino"];

/**
 * Before every output file: the shebang (the entry is `mlmodel` on the image's PATH) and a
 * `require` for the CommonJS packages bundled (pino requires Node's built-ins; esbuild's
 * ESM output has no `require` of its own).
 */
const banner = [
  "#!/usr/bin/env node",
  'import { createRequire as __bundleCreateRequire } from "node:module";',
  "const require = __bundleCreateRequire(import.meta.url);",
].join("\n");

async function externals(root: string): Promise<string[]> {
  const pkg = JSON.parse(await readFile(join(root, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
  };
  return Object.keys(pkg.dependencies)
    .filter((d) => !bundledDependencies.includes(d))
    .sort();
}

/** The files the bundle is made from: package.json, the lock (esbuild's and pino's versions), src/. */
async function inputFiles(root: string): Promise<string[]> {
  const src = await listFiles(join(root, "src"), (f) => !f.endsWith(".test.ts"));
  return ["package.json", "package-lock.json", ...src.map((f) => `src/${f}`)];
}

/** The bundle's cache key: its input files' contents and `bundleVersion`. */
export async function bundleKey(root = packageRoot): Promise<string> {
  const files = await treeKey(root, await inputFiles(root));
  return createHash("sha256").update(`${bundleVersion}\0${files}`).digest("hex").slice(0, 16);
}

/**
 * Bundles the CLI into `outDir` (emptied first); returns the files written, relative to it.
 * esbuild is a dev dependency, imported here only.
 */
export async function buildBundle(outDir: string, root = packageRoot): Promise<string[]> {
  const esbuild = await import("esbuild");
  await rm(outDir, { recursive: true, force: true });
  const result = await esbuild.build({
    absWorkingDir: root,
    entryPoints: { mlmodel: "src/cli/main.ts" },
    outdir: outDir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node24",
    outExtension: { ".js": ".mjs" },
    chunkNames: "chunks/[name]-[hash]",
    external: await externals(root),
    sourcemap: "linked",
    sourcesContent: false,
    banner: { js: banner },
    logLevel: "silent",
  });
  if (result.warnings.length) {
    const text = await esbuild.formatMessages(result.warnings, { kind: "warning" });
    throw new Error(`esbuild warned while bundling the CLI:\n${text.join("\n")}`);
  }
  await chmod(join(outDir, "mlmodel.mjs"), 0o755);
  return listFiles(outDir);
}

export interface EnsuredBundle {
  /** The entry, `<root>/dist/bundle/mlmodel.mjs`. */
  entry: string;
  key: string;
  built: boolean;
}

/**
 * The bundle of the checkout's current sources in `<root>/dist/bundle`, built unless the one
 * there was made from the same inputs (its bundle.json holds the key). Processes that ask at
 * once (test files, a benchmark) build it once: under a lock file beside it.
 */
export async function ensureBundle(root = packageRoot): Promise<EnsuredBundle> {
  const dir = join(root, bundleLayout.dir);
  const entry = join(root, bundleLayout.entry);
  const key = await bundleKey(root);
  const current = async () =>
    (
      await readFile(join(dir, "bundle.json"), "utf8")
        .then((t) => JSON.parse(t) as { key?: string })
        .catch(() => undefined)
    )?.key === key;
  if (await current()) return { entry, key, built: false };
  await mkdir(dirname(dir), { recursive: true });
  return withBuildLock(dir, async () => {
    if (await current()) return { entry, key, built: false };
    const staging = `${dir}.building-${process.pid}`;
    try {
      const files = await buildBundle(staging, root);
      if ((await bundleKey(root)) !== key)
        throw new Error("the sources changed while the CLI was being bundled; bundle again");
      await writeFile(join(staging, "bundle.json"), `${JSON.stringify({ key, files }, null, 2)}\n`);
      await rm(dir, { recursive: true, force: true });
      await rename(staging, dir);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    return { entry, key, built: true };
  });
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(packageRoot, bundleLayout.dir));
  const files = await buildBundle(out);
  console.log(`bundled the CLI into ${out} (${files.length} files)`);
}
