/**
 * What the real node costs: `up --real-node` (warm: binaries cached), the node's Ready after
 * kubelet starts, pods from create to Ready (one at a time, then a batch), and `down`.
 * Prints figures (and one JSON line with --json); never passes or fails on time.
 *
 *   node bench/cluster/realnode.ts                 # 3 cycles, 5 single pods, a batch of 10
 *   node bench/cluster/realnode.ts --cycles 1 --json
 */
import { mkdtempSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { down, realNodeSupport, up } from "../../src/cluster/index.ts";
import { percentile } from "../lib/stats.ts";

const { values: flags } = parseArgs({
  options: {
    cycles: { type: "string", default: "3" },
    pods: { type: "string", default: "5" },
    batch: { type: "string", default: "10" },
    json: { type: "boolean", default: false },
  },
});

const seconds = (ms: number) => Math.round(ms) / 1000;

function pod(name: string, image: string): V1Pod {
  return {
    metadata: { name },
    spec: {
      terminationGracePeriodSeconds: 0,
      containers: [{ name: "main", image, imagePullPolicy: "Never", command: ["sleep", "3600"] }],
    },
  };
}

async function untilReady(core: CoreV1Api, name: string): Promise<void> {
  for (;;) {
    const p = await core.readNamespacedPod({ name, namespace: "default" });
    if (p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Cycle {
  upSeconds: number;
  nodeReadySeconds: number;
  podReadySeconds: number[];
  batchReadySeconds: number;
  downSeconds: number;
}

async function cycle(index: number, single: number, batch: number): Promise<Cycle> {
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-bench-realnode-"));
  const t0 = performance.now();
  const state = await up({ dir, realNode: true, stopWhenGone: process.pid, nodeLockWaitMs: 30 * 60_000 });
  const upSeconds = seconds(performance.now() - t0);
  const kc = new KubeConfig();
  kc.loadFromFile(state.kubeconfig);
  const core = kc.makeApiClient(CoreV1Api);
  const image = state.realNode!.images.busybox.name;
  const podReadySeconds: number[] = [];
  for (let i = 0; i < single; i++) {
    const start = performance.now();
    await core.createNamespacedPod({ namespace: "default", body: pod(`single-${i}`, image) });
    await untilReady(core, `single-${i}`);
    podReadySeconds.push(seconds(performance.now() - start));
  }
  const batchStart = performance.now();
  const names = Array.from({ length: batch }, (_, i) => `batch-${i}`);
  await Promise.all(
    names.map((name) => core.createNamespacedPod({ namespace: "default", body: pod(name, image) })),
  );
  await Promise.all(names.map((name) => untilReady(core, name)));
  const batchReadySeconds = seconds(performance.now() - batchStart);
  const downStart = performance.now();
  await down(dir);
  const result = {
    upSeconds,
    nodeReadySeconds: state.realNode!.readySeconds,
    podReadySeconds,
    batchReadySeconds,
    downSeconds: seconds(performance.now() - downStart),
  };
  console.log(
    `cycle ${index + 1}: up ${result.upSeconds}s (node Ready ${result.nodeReadySeconds}s after kubelet started), ` +
      `pod Ready ${podReadySeconds.join("/")}s, ${batch} pods Ready in ${batchReadySeconds}s, down ${result.downSeconds}s`,
  );
  return result;
}

const support = await realNodeSupport();
if (!support.ok) {
  console.log(`SKIPPED: ${support.reason}`);
  process.exit(0);
}
const loadBefore = loadavg()[0]!;
const cycles: Cycle[] = [];
for (let i = 0; i < Number(flags.cycles); i++)
  cycles.push(await cycle(i, Number(flags.pods), Number(flags.batch)));
const all = (pick: (c: Cycle) => number[]) => cycles.flatMap(pick).sort((a, b) => a - b);
const summary = {
  cycles: cycles.length,
  upSecondsP50: percentile(
    all((c) => [c.upSeconds]),
    50,
  ),
  nodeReadySecondsP50: percentile(
    all((c) => [c.nodeReadySeconds]),
    50,
  ),
  podReadySecondsP50: percentile(
    all((c) => c.podReadySeconds),
    50,
  ),
  podReadySecondsMax: Math.max(...all((c) => c.podReadySeconds)),
  batch: Number(flags.batch),
  batchReadySecondsP50: percentile(
    all((c) => [c.batchReadySeconds]),
    50,
  ),
  downSecondsP50: percentile(
    all((c) => [c.downSeconds]),
    50,
  ),
  loadAverage: [loadBefore, loadavg()[0]!].map((l) => Math.round(l * 10) / 10),
};
console.log(
  `\nreal node, ${summary.cycles} cycles (load average ${summary.loadAverage.join(" -> ")}): ` +
    `up p50 ${summary.upSecondsP50}s; node Ready p50 ${summary.nodeReadySecondsP50}s after kubelet start; ` +
    `pod create->Ready p50 ${summary.podReadySecondsP50}s (max ${summary.podReadySecondsMax}s); ` +
    `${summary.batch} pods p50 ${summary.batchReadySecondsP50}s; down p50 ${summary.downSecondsP50}s`,
);
if (flags.json) console.log(JSON.stringify(summary));
