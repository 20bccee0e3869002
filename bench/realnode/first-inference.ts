/**
 * Time to first inference on real pods (`npm run bench -- --series first-inference --runs 3`):
 * on a real-node cluster of the bench's own, the sample scikit-learn model is applied and timed
 * until the first successful prediction through its Service, split into
 *   download    apply -> the download Job complete (claim bound, Job pod started, file fetched, unpacked)
 *   pod start   Job complete -> the serving container running (Deployment, scheduling, container start)
 *   model load  container running -> pod Ready (MLServer starts, loads the model, the probe passes)
 *   readiness   pod Ready -> the first 200 through the ClusterIP (endpoints, kube-proxy's rules)
 * then the update's traffic figures: 25 requests/s through the Service while v1 -> v2 rolls
 * (requests served, failed, latency p50/p99), and while a broken v3 crash-loops and is rolled
 * back to v2. Times are first observations of a 100 ms poll, on this machine's clock. Never
 * passes or fails on time; where the machine cannot host a real node it says why and skips.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { down, ensureRealNodePrerequisites, realNodeSupport, up } from "../../src/cluster/index.ts";
import {
  ensureImage,
  ensureImagePrerequisites,
  imageNames,
  imagesMachineProblem,
} from "../../src/images/index.ts";
import { inferV2, type SampleModel, type ServiceEndpoint } from "../../src/images/sample-model.ts";
import { builtinKinds } from "../../src/runtime/index.ts";
import {
  applyCaSecret,
  applyModel,
  endpointOf,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
  waitForModel,
} from "../../test/e2e/realnode/fixture.ts";
import { realNodeDirEnv } from "../../test/harness/realnode.ts";
import { Traffic, type TrafficReport, versionClassifier } from "../../test/harness/traffic.ts";
import { percentile } from "../lib/stats.ts";
import { type FirstInferenceSplit, type Milestones, splitMilestones } from "./first-inference-cases.ts";

export type Log = (line: string) => void;

export interface FirstInferenceRun extends FirstInferenceSplit {
  roll: TrafficFigures;
  rollback: TrafficFigures;
}

export interface TrafficFigures {
  sent: number;
  served: number;
  failed: number;
  p50Ms?: number;
  p99Ms?: number;
}

export interface FirstInferenceResult {
  skipped?: string;
  nodeUpS?: number;
  imagesS?: number;
  runs: FirstInferenceRun[];
  loadAverage: number[];
}

export const seconds = (ms: number) => Math.round(ms / 100) / 10;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Why this machine cannot run the series, or undefined. */
export async function unsupported(): Promise<string | undefined> {
  const support = await realNodeSupport();
  if (!support.ok) return `this machine cannot host a real node: ${support.reason}`;
  const problem = imagesMachineProblem();
  return problem ? `cannot build images here: ${problem}` : undefined;
}

const figures = (r: TrafficReport): TrafficFigures => ({
  sent: r.sent,
  served: r.served,
  failed: r.failed,
  p50Ms: r.latencyMs.p50,
  p99Ms: r.latencyMs.p99,
});

/**
 * Applies `model` and polls its Job, pods and status every 100 ms, keeping the first time each
 * milestone was seen, until the first correct prediction through its Service, every replica
 * Ready and the status Ready.
 */
export async function timeFirstInference(
  bed: RealNodeBed,
  model: MLModel,
  sample: SampleModel,
  replicas: number,
  endpointFor: (model: MLModel) => Promise<ServiceEndpoint> = (m) => endpointOf(bed, m),
) {
  const seen: Milestones = {};
  const mark = (what: keyof Milestones, now: number) => {
    seen[what] ??= now;
  };
  const name = model.metadata.name!;
  const t0 = performance.now();
  await applyModel(bed, model);
  const selector = `serving.mlmodel.dev/model=${name}`;
  let endpoint: ServiceEndpoint | undefined;
  let podNodes = 0;
  let wrongAnswers = 0;
  let storageMode: string | undefined;
  for (;;) {
    const now = performance.now() - t0;
    const [jobs, pods, model_] = await Promise.all([
      bed.admin.list(builtinKinds.Job, { namespace: bed.ns.name, labelSelector: selector }),
      bed.admin.list(builtinKinds.Pod, {
        namespace: bed.ns.name,
        labelSelector: `${selector},app.kubernetes.io/component=server`,
      }),
      bed.admin.get<MLModel>(mlModelKind, { namespace: bed.ns.name, name }),
    ]);
    if ((jobs.items as unknown as V1Job[]).some((j) => (j.status?.succeeded ?? 0) > 0))
      mark("downloaded", now);
    const serving = (pods.items as unknown as V1Pod[]).filter((p) => !p.metadata?.deletionTimestamp);
    if (serving.some((p) => p.status?.containerStatuses?.[0]?.state?.running)) mark("running", now);
    const ready = serving.filter((p) =>
      p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
    );
    if (ready.length > 0) mark("ready", now);
    if (ready.length >= replicas && seen.allReady === undefined) {
      mark("allReady", now);
      podNodes = new Set(ready.map((p) => p.spec?.nodeName)).size;
    }
    if (model_?.status?.phase === "Ready") {
      mark("statusReady", now);
      storageMode ??= model_.status.storageMode;
    }
    // The URL is in the status once the Service exists; ask as soon as a pod is Ready.
    if (seen.ready !== undefined && model_?.status?.url && seen.answered === undefined) {
      endpoint ??= await endpointFor(model_);
      const answer = await inferV2(endpoint, sample.name, sample.inputs, { timeoutMs: 2000 }).catch(
        () => undefined,
      );
      if (answer?.status === 200) {
        if (isDeepStrictEqual(answer.data, sample.predictions)) mark("answered", performance.now() - t0);
        else wrongAnswers++;
      }
    }
    if (seen.answered !== undefined && seen.statusReady !== undefined && seen.allReady !== undefined) break;
    if (now > 15 * 60_000) throw new Error(`no prediction within 15 minutes: ${JSON.stringify(seen)}`);
    await sleep(100);
  }
  return {
    ...splitMilestones(seen),
    podNodes,
    wrongAnswers,
    ...(storageMode ? { storageModeReported: storageMode } : {}),
    endpoint: endpoint!,
  };
}

async function oneRun(bed: RealNodeBed, run: number, log: Log): Promise<FirstInferenceRun> {
  const name = `iris-${run}`;
  const [v1, v2, v3] = await Promise.all([
    publishSample(bed, `${name}-v1.tgz`, { name, version: 1 }),
    publishSample(bed, `${name}-v2.tgz`, { name, version: 2 }),
    publishSample(bed, `${name}-v3.tgz`, { name, version: 3, broken: true }),
  ]);
  const first = await timeFirstInference(bed, sklearnModel(name, v1), v1, 1);
  log(
    `run ${run}: first prediction ${first.totalS}s after apply (${JSON.stringify({ ...first, endpoint: undefined })})`,
  );

  const traffic = new Traffic({
    send: () => inferV2(first.endpoint, name, v1.inputs),
    judge: versionClassifier({ v1: v1.predictions, v2: v2.predictions }),
    ratePerSecond: 25,
    maxRequests: 25 * 900,
    maxDurationMs: 900_000,
  }).start();
  try {
    traffic.mark("roll");
    await applyModel(bed, sklearnModel(name, v2));
    await waitForModel(
      bed,
      name,
      "v2 Ready",
      (m) => m.status?.phase === "Ready" && m.status.revision?.currentNumber === 2,
    );
    await untilOnly(traffic, "v2");
    traffic.mark("rollback");
    await applyModel(bed, sklearnModel(name, v3));
    await waitForModel(bed, name, "v3 rolled back", (m) =>
      Boolean(m.status?.conditions?.some((c) => c.type === "RolledBack" && c.status === "True")),
    );
    await untilOnly(traffic, "v2");
    traffic.mark("end");
  } finally {
    await traffic.stop();
  }
  const roll = figures(traffic.report("roll", "rollback"));
  const rollback = figures(traffic.report("rollback", "end"));
  log(`run ${run}: during the roll ${JSON.stringify(roll)}; during the rollback ${JSON.stringify(rollback)}`);
  const { endpoint: _, podNodes: _n, wrongAnswers: _w, storageModeReported: _s, ...times } = first;
  return { ...times, roll, rollback };
}

/** Waits until the last 50 answers all carry `label` (the old pods have drained), for 5 minutes at most. */
async function untilOnly<T>(traffic: Traffic<T>, label: string): Promise<void> {
  const deadline = performance.now() + 5 * 60_000;
  for (;;) {
    const last = traffic.report().labels.slice(-50);
    if (last.length === 50 && last.every((l) => l === label)) return;
    if (performance.now() > deadline)
      throw new Error(
        `the last 50 answers did not all come from ${label} within 5 minutes: ${last.join(" ")}`,
      );
    await sleep(500);
  }
}

export async function runFirstInferenceBench(options: {
  runs: number;
  log: Log;
}): Promise<FirstInferenceResult> {
  const { log } = options;
  const why = await unsupported();
  if (why) {
    log(`first-inference: skipped: ${why}`);
    return { skipped: why, runs: [], loadAverage: loadavg() };
  }
  await ensureRealNodePrerequisites(log);
  await ensureImagePrerequisites(log);
  const imagesStarted = performance.now();
  const images = await Promise.all(imageNames.map((n) => ensureImage(n, (line) => log(`${n}: ${line}`))));
  const imagesS = seconds(performance.now() - imagesStarted);
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-bench-realnode-"));
  const upStarted = performance.now();
  await up({
    dir,
    realNode: true,
    images: images.map((i) => i.archive),
    stopWhenGone: process.pid,
    nodeLockWaitMs: 60 * 60_000,
    progress: (line) => log(`[real-node] ${line}`),
  });
  const nodeUpS = seconds(performance.now() - upStarted);
  process.env[realNodeDirEnv] = dir;
  const runs: FirstInferenceRun[] = [];
  let bed: RealNodeBed | undefined;
  try {
    bed = await realNodeBed("bench-first-inference");
    await applyCaSecret(bed);
    for (let run = 1; run <= options.runs; run++) runs.push(await oneRun(bed, run, log));
  } finally {
    if (bed) await removeRealNodeBed(bed);
    await down(dir);
  }
  return { nodeUpS, imagesS, runs, loadAverage: loadavg() };
}

const p = (values: number[], q: number) => percentile(values, q);

/** A table of the runs and their medians. */
export function firstInferenceSummary(result: FirstInferenceResult): string {
  if (result.skipped) return `first-inference: skipped: ${result.skipped}`;
  const rows = result.runs.map((r, i) => [
    String(i + 1),
    r.totalS,
    r.downloadS,
    r.podStartS,
    r.modelLoadS,
    r.readinessS,
    r.statusReadyS,
    `${r.roll.served}/${r.roll.sent} (${r.roll.failed} failed) p50 ${r.roll.p50Ms} p99 ${r.roll.p99Ms} ms`,
    `${r.rollback.served}/${r.rollback.sent} (${r.rollback.failed} failed) p50 ${r.rollback.p50Ms} p99 ${r.rollback.p99Ms} ms`,
  ]);
  const median = (key: keyof FirstInferenceRun) =>
    p(
      result.runs.map((r) => r[key] as number),
      50,
    );
  return [
    `first-inference: real node up in ${result.nodeUpS}s (images ready in ${result.imagesS}s); load average ${result.loadAverage.map((l) => l.toFixed(1)).join(" ")}`,
    "run | total s | download | pod start | model load | readiness | status Ready | roll v1->v2 | rollback v3->v2",
    ...rows.map((r) => r.join(" | ")),
    `median | ${median("totalS")} | ${median("downloadS")} | ${median("podStartS")} | ${median("modelLoadS")} | ${median("readinessS")} | ${median("statusReadyS")}`,
  ].join("\n");
}

export function writeFirstInferenceResult(result: FirstInferenceResult, file: string): void {
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
}
