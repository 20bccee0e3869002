/**
 * Event -> reconcile latency on a real API server: patch a ConfigMap, measure until the
 * reconciler sees that resourceVersion in the cache. Sequential samples.
 *
 *   KUBECONFIG=... node bench/runtime/latency.ts [samples]
 */
import pino from "pino";
import { builtinKinds, KubeClient, Manager } from "../../src/runtime/index.ts";
import { benchKubeConfig, ensureConfigMaps, ensureNamespace, percentile } from "./common.ts";

const samples = Number(process.argv[2] ?? 300);
const ns = "bench-runtime-lat";
const kc = benchKubeConfig();
const client = KubeClient.fromKubeConfig(kc);
await ensureNamespace(client, ns);
await ensureConfigMaps(client, ns, 50);

const waiting = new Map<string, { rv: number; resolve: () => void }>();
const mgr = new Manager({ kubeConfig: kc, namespaces: [ns], logger: pino({ level: "warn" }) });
mgr
  .controller("latency")
  .for(builtinKinds.ConfigMap)
  .concurrency(4)
  .reconcile(async (ctx) => {
    const w = waiting.get(ctx.request.name);
    const obj = ctx.cache(builtinKinds.ConfigMap).get(ctx.request);
    if (w && obj && Number(obj.metadata.resourceVersion) >= w.rv) w.resolve();
  });
const ac = new AbortController();
const running = mgr.start(ac.signal);
while (!mgr.cachesSynced()) await new Promise((r) => setTimeout(r, 50));
await new Promise((r) => setTimeout(r, 1000)); // let the initial reconciles pass

const latencies: number[] = [];
const apiLatencies: number[] = [];
for (let i = 0; i < samples; i++) {
  const name = `cm-${i % 50}`;
  const t0 = performance.now();
  let resolveSeen!: () => void;
  const seen = new Promise<void>((r) => {
    resolveSeen = r;
  });
  const patched = await client.patch(
    builtinKinds.ConfigMap,
    { namespace: ns, name },
    { metadata: { annotations: { sample: String(i) } } },
    "merge",
  );
  const t1 = performance.now();
  waiting.set(name, { rv: Number(patched.metadata.resourceVersion), resolve: resolveSeen });
  // The event may have been handled before we registered: check the cache once.
  const cached = mgr.cache(builtinKinds.ConfigMap).get({ namespace: ns, name });
  if (cached && Number(cached.metadata.resourceVersion) >= Number(patched.metadata.resourceVersion)) {
    mgr.controllers[0]!.queue.add(`${ns}/${name}`);
  }
  await seen;
  waiting.delete(name);
  latencies.push(performance.now() - t0);
  apiLatencies.push(t1 - t0);
}
ac.abort();
await running;
const s = [...latencies].sort((a, b) => a - b);
const a = [...apiLatencies].sort((x, y) => x - y);
console.log(
  `patch->reconcile (incl. the PATCH round trip) samples=${samples} p50=${percentile(s, 50).toFixed(1)} ms p95=${percentile(s, 95).toFixed(1)} ms p99=${percentile(s, 99).toFixed(1)} ms`,
);
console.log(
  `PATCH round trip alone                     p50=${percentile(a, 50).toFixed(1)} ms p95=${percentile(a, 95).toFixed(1)} ms`,
);
