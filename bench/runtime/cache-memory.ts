/**
 * Memory per cached object: N ConfigMaps (default 10 000) cached with managedFields stripped
 * (the default transform) and kept. Run with --expose-gc:
 *
 *   KUBECONFIG=... node --expose-gc bench/runtime/cache-memory.ts [count] [strip|keep|both]
 *
 * "both" (default) measures each mode in a fresh child process, so one does not skew the other.
 */
import { spawnSync } from "node:child_process";
import { builtinKinds, Informer, KubeClient, type KubeObject } from "../../src/runtime/index.ts";
import { benchKubeConfig, ensureConfigMaps, ensureNamespace } from "./common.ts";

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  console.error("run with node --expose-gc");
  process.exit(2);
}
const count = Number(process.argv[2] ?? 10_000);
const ns = "bench-runtime-mem";
const client = KubeClient.fromKubeConfig(benchKubeConfig());
if ((process.argv[3] ?? "both") === "both") {
  await ensureNamespace(client, ns);
  console.log(`# ensuring ${count} ConfigMaps in ${ns} (first run creates them)`);
  await ensureConfigMaps(client, ns, count);
} else {
  // Warm up the client (TLS, code paths) so its one-time allocations are not counted.
  await client.list(builtinKinds.ConfigMap, { namespace: ns, limit: 1 });
}

async function measure(label: string, transform?: (o: KubeObject) => KubeObject): Promise<void> {
  gc!();
  const before = process.memoryUsage().heapUsed;
  const inf = new Informer(client, builtinKinds.ConfigMap, {
    scope: { namespace: ns },
    ...(transform ? { transform } : {}),
  });
  const ac = new AbortController();
  const run = inf.run(ac.signal);
  const t0 = performance.now();
  await inf.waitForSync();
  const syncMs = performance.now() - t0;
  ac.abort();
  await run;
  gc!();
  const after = process.memoryUsage().heapUsed;
  const perObject = (after - before) / inf.store.size;
  console.log(
    `${label.padEnd(28)} objects=${inf.store.size} heap=${((after - before) / 2 ** 20).toFixed(1)} MiB per_object=${perObject.toFixed(0)} B initial_list+sync=${syncMs.toFixed(0)} ms`,
  );
  // Keep the store alive until measured; drop it now.
  inf.store.replace([]);
}

const mode = process.argv[3] ?? "both";
if (mode === "both") {
  for (const m of ["strip", "keep"]) {
    spawnSync(process.execPath, ["--expose-gc", import.meta.filename, String(count), m], {
      stdio: "inherit",
    });
  }
} else if (mode === "strip") {
  await measure("managedFields stripped");
} else {
  await measure("managedFields kept", (o) => o);
}
