/**
 * Work queue throughput, in process (no API server): keys/s through add -> get -> done with
 * W concurrent workers, for unique keys and for a hot set of keys (dedup at work).
 *
 *   node bench/runtime/queue-throughput.ts [keys]
 */
import { WorkQueue } from "../../src/runtime/index.ts";

const n = Number(process.argv[2] ?? 200_000);

async function run(label: string, keyOf: (i: number) => string, workers: number): Promise<void> {
  const q = new WorkQueue();
  let processed = 0;
  const t0 = performance.now();
  const loops = Array.from({ length: workers }, async () => {
    for (;;) {
      const key = await q.get();
      if (key === undefined) return;
      processed++;
      q.done(key);
    }
  });
  for (let i = 0; i < n; i++) {
    q.add(keyOf(i), i % 2 === 0 ? "high" : "low");
    if (i % 1000 === 0) await new Promise((r) => setImmediate(r)); // let workers interleave
  }
  while (q.length > 0 || q.processing > 0) await new Promise((r) => setImmediate(r));
  const ms = performance.now() - t0;
  await q.shutdown();
  await Promise.all(loops);
  console.log(
    `${label.padEnd(34)} adds=${n} processed=${processed} workers=${workers} ${((n / ms) * 1000).toFixed(0)} adds/s ${((processed / ms) * 1000).toFixed(0)} processed/s`,
  );
}

await run("unique keys", (i) => `ns/key-${i}`, 1);
await run("unique keys", (i) => `ns/key-${i}`, 8);
await run("100 hot keys (dedup)", (i) => `ns/key-${i % 100}`, 8);
