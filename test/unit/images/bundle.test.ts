/**
 * The bundled CLI (src/images/bundle.ts), which the image runs, against the CLI run from
 * src/: the same operator, including what the bundle cannot see statically and loads at run
 * time (prom-client's files one by one, yaml for a YAML kubeconfig, node:child_process for an
 * exec plugin, node:fs and node:crypto through process.getBuiltinModule). No cluster: the
 * kubeconfig names a closed port, so the operator starts, serves its metrics and probes,
 * runs the exec plugin for its first request and keeps retrying its lists.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { isBuiltin } from "node:module";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { stringify } from "yaml";
import { packageRoot } from "../../../src/cluster/paths.ts";
import { bundleLayout, ensureBundle } from "../../../src/images/bundle.ts";
import { freePort } from "../../harness/images.ts";
import { scratchDir } from "../../harness/scratch.ts";

const dir = scratchDir("bundle");
const source = join(packageRoot, "src", "cli", "main.ts");
let entry: string;

/** Loaded at start (--import) in the operator's process: the CommonJS files it loaded, at exit. */
const loadedHook = `data:text/javascript,${encodeURIComponent(`
  import { createRequire } from "node:module";
  import { writeFileSync } from "node:fs";
  process.on("exit", () => writeFileSync(process.env.LOADED_FILE, JSON.stringify(Object.keys(createRequire("/").cache))));
`)}`;

function kubeconfig(format: "json" | "yaml", marker: string): string {
  const plugin = join(dir, `plugin-${format}.sh`);
  writeFileSync(
    plugin,
    `#!/bin/sh\ntouch ${marker}\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}'\n`,
  );
  chmodSync(plugin, 0o755);
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster: { server: "https://127.0.0.1:9" } }],
    users: [
      {
        name: "u",
        user: { exec: { apiVersion: "client.authentication.k8s.io/v1", command: plugin } },
      },
    ],
    contexts: [{ name: "x", context: { cluster: "c", user: "u" } }],
    "current-context": "x",
  };
  const path = join(dir, `kubeconfig.${format}`);
  writeFileSync(path, format === "json" ? JSON.stringify(config) : stringify(config));
  return path;
}

interface Run {
  families: string[];
  readyz: string;
  pluginRan: boolean;
  loaded: string[];
}

async function run(script: string, format: "json" | "yaml"): Promise<Run> {
  const marker = join(dir, `ran-${format}-${Math.random()}`);
  const loadedFile = join(dir, `loaded-${Math.random()}.json`);
  const [metrics, health] = [await freePort(), await freePort()];
  const child: ChildProcess = spawn(
    process.execPath,
    [
      "--import",
      loadedHook,
      script,
      "operator",
      "--kubeconfig",
      kubeconfig(format, marker),
      "--namespace",
      "x",
      "--metrics-bind-address",
      `127.0.0.1:${metrics}`,
      "--health-probe-bind-address",
      `127.0.0.1:${health}`,
      "--log-level",
      "error",
    ],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, LOADED_FILE: loadedFile } },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  try {
    let text: string | undefined;
    for (let i = 0; i < 300 && text === undefined; i++) {
      if (child.exitCode !== null) assert.fail(`the operator exited with ${child.exitCode}: ${stderr}`);
      text = await fetch(`http://127.0.0.1:${metrics}/metrics`)
        .then((r) => r.text())
        .catch(() => undefined);
      if (text === undefined) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(text, `no /metrics: ${stderr}`);
    // The first list request runs the plugin; wait for it (the requests then fail: nothing listens).
    for (let i = 0; i < 300 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 100));
    const readyz = await fetch(`http://127.0.0.1:${health}/readyz`).then((r) => r.text());
    child.kill("SIGTERM");
    assert.equal(await exited, 0, `a clean shutdown: ${stderr}`);
    return {
      families: [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => `${m[1]} ${m[2]}`),
      readyz,
      pluginRan: existsSync(marker),
      loaded: JSON.parse(readFileSync(loadedFile, "utf8")) as string[],
    };
  } finally {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
  }
}

describe("the bundled CLI", () => {
  before(async () => {
    entry = (await ensureBundle()).entry;
  });

  it("is built once per content: a second ensureBundle reuses it", async () => {
    const again = await ensureBundle();
    assert.equal(again.entry, entry);
    assert.equal(again.built, false);
    assert.equal(entry, join(packageRoot, bundleLayout.entry));
    assert.ok(statSync(entry).mode & 0o100, "the entry is executable (`mlmodel` on the image's PATH)");
  });

  it("runs the operator as the sources do: the same metric families, probes and exec plugin", async () => {
    const [bundled, unbundled] = [await run(entry, "json"), await run(source, "json")];
    assert.equal(bundled.families.length, 61, bundled.families.join("\n"));
    assert.deepEqual(bundled.families, unbundled.families);
    assert.match(bundled.readyz, /caches not synced/);
    assert.equal(bundled.readyz, unbundled.readyz);
    assert.ok(
      bundled.pluginRan,
      "the bundled operator ran the exec plugin (node:child_process, loaded lazily)",
    );
    assert.ok(unbundled.pluginRan);
    // prom-client's files one by one, from node_modules beside the bundle; not its index.
    const bundledFiles = bundled.loaded.map((f) => f.slice(packageRoot.length + 1));
    assert.ok(bundledFiles.includes("node_modules/prom-client/lib/registry.js"), bundledFiles.join("\n"));
    assert.ok(!bundledFiles.includes("node_modules/prom-client/index.js"));
    // A JSON kubeconfig loads no yaml; pino is in the bundle, not loaded from node_modules.
    assert.deepEqual(
      bundledFiles.filter((f) => /node_modules\/(yaml|pino)\//.test(f)),
      [],
    );
    assert.ok(
      unbundled.loaded.some((f) => f.includes("node_modules/pino/")),
      "the sources load pino's files",
    );
  });

  it("reads a YAML kubeconfig (yaml loaded from node_modules at run time)", async () => {
    const bundled = await run(entry, "yaml");
    assert.ok(bundled.pluginRan);
    assert.ok(
      bundled.loaded.some((f) => f.includes("node_modules/yaml/")),
      "yaml was loaded for the YAML file",
    );
  });

  it("imports its external packages by names that resolve from where the bundle lies", () => {
    // Left out of the bundle (client-node, the downloader's packages, yaml): `import ... from`
    // and `import()` in the chunks, resolved at run time from node_modules beside dist/bundle.
    const chunks = join(entry, "..", "chunks");
    const specifiers = new Set<string>();
    for (const file of [entry, ...readdirSync(chunks).map((f) => join(chunks, f))].filter((f) =>
      f.endsWith(".mjs"),
    ))
      for (const m of readFileSync(file, "utf8").matchAll(/(?:\bfrom |\bimport\()"([^".][^"]*)"/g))
        if (!isBuiltin(m[1]!)) specifiers.add(m[1]!);
    assert.ok(specifiers.has("@kubernetes/client-node"), [...specifiers].join(" "));
    assert.ok(specifiers.has("yaml"));
    assert.ok(!specifiers.has("pino"), "pino is bundled");
    // --input-type=module code resolves against its working directory: here, the chunks'.
    const script = `for (const s of ${JSON.stringify([...specifiers])}) import.meta.resolve(s);`;
    const res = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: chunks,
      encoding: "utf8",
    });
    assert.equal(res.status, 0, res.stderr);
  });

  it("ships source maps that point to the sources", () => {
    const text = readFileSync(entry, "utf8");
    assert.match(text, /^#!\/usr\/bin\/env node\n/, "a shebang: the entry runs as `mlmodel`");
    assert.match(text, /\/\/# sourceMappingURL=mlmodel\.mjs\.map\n?$/);
    const map = JSON.parse(readFileSync(`${entry}.map`, "utf8")) as { sources: string[] };
    assert.ok(map.sources.includes("../../src/cli/main.ts"), map.sources.join("\n"));
    for (const s of map.sources.filter((s) => s.startsWith("../../src/")))
      assert.ok(existsSync(join(entry, "..", s)), `${s} exists`);
  });
});
