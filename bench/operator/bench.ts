/**
 * The operator benchmark: converge, floor, steady state, update wave, delete all and memory
 * scaling, against a real control plane, with the operator as its own process under its own
 * RBAC. Prints figures; never passes or fails on time (the machine is shared and noisy).
 *
 * Models are custom-image MLModels (1 replica, REST): their lifecycle is MLModel -> Deployment
 * + Service -> ReplicaSet -> Pod (scheduled on kwok nodes, Ready in ~0.5 s) -> status Ready.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { desiredDeployment, desiredService } from "../../src/operator/desired.ts";
import { withAppliedHash } from "../../src/operator/drift.ts";
import { fieldManager } from "../../src/operator/names.ts";
import { planModel } from "../../src/operator/plan.ts";
import { resolveRuntime } from "../../src/operator/runtime-selection.ts";
import {
  apiVersionOf,
  builtinKinds,
  controllerOwnerRef,
  type KubeClient,
  type KubeObject,
} from "../../src/runtime/index.ts";
import { type AuditWrites, auditOffset, writesSince } from "../lib/audit.ts";
import type { BenchCluster } from "../lib/cluster.ts";
import { diff, type Sample, sumBy, total } from "../lib/prometheus.ts";
import { inParallel, type Percentiles, percentiles, round } from "../lib/stats.ts";
import { measureStoreCost, type StoreCost } from "./memory.ts";
import { type OperatorProcess, operatorKubeconfig, operatorUser, startOperatorProcess } from "./process.ts";
import { Tracker } from "./tracker.ts";

export type SeriesName = "converge" | "floor" | "steady" | "update" | "delete" | "memory";
export const allSeries: SeriesName[] = ["converge", "floor", "steady", "update", "delete", "memory"];

export interface OperatorBenchOptions {
  models: number;
  /** Operator --concurrency, and the floor client's. */
  concurrency: number;
  idleSeconds: number;
  /** Cached-model counts for the memory series. */
  memoryPoints: number[];
  series: Set<SeriesName>;
  /** Creates and deletes in flight at once from the benchmark's client. */
  clientParallelism: number;
  log: (line: string) => void;
}

export interface ConvergeResult {
  seconds: number;
  latency: Percentiles;
  requestsPerModel: number;
  requestsPerModelByVerb: Record<string, number>;
  reconcilesPerModel: number;
  auditWritesPerModel?: Record<string, number>;
  cpuSeconds: number;
  peakRssMiB: number;
  /** create -> Ready latencies in seconds, for the plot. */
  latencies: number[];
}

export interface FloorResult {
  seconds: number;
  latency: Percentiles;
  latencies: number[];
}

export interface SteadyResult {
  idleSeconds: number;
  writesPerMinute: number;
  reconcilesPerMinute: number;
  requestsPerMinuteByVerb: Record<string, number>;
  auditWrites?: number;
}

export interface UpdateResult {
  models: number;
  seconds: number;
  latency: Percentiles;
  requestsPerModelByVerb: Record<string, number>;
}

export interface DeleteResult {
  seconds: number;
  requestsByVerb: Record<string, number>;
}

export interface MemoryPoint {
  cachedModels: number;
  rssMiB: number;
  heapUsedMiB: number;
}

export interface MemoryResult {
  points: MemoryPoint[];
  /** Heap per cached MLModel in KiB, from the first to the last point. */
  heapKiBPerModel?: number;
  storeCost?: StoreCost;
  note?: string;
}

export interface OperatorBenchResult {
  models: number;
  operatorSeconds?: number;
  floorSeconds?: number;
  ratio?: number;
  requestsPerModel?: number;
  peakRssMiB?: number;
  concurrency: number;
  machine: { cores: number; memoryGiB: number; cluster: string; note: string };
  converge?: ConvergeResult;
  floor?: FloorResult;
  steady?: SteadyResult;
  update?: UpdateResult;
  delete?: DeleteResult;
  memory?: MemoryResult;
}

const modelLabel = "bench.mlmodel.dev/run";
const writeVerbs = new Set(["create", "update", "patch", "apply", "delete"]);
const seconds = (ms: number) => ms / 1000;

/** A custom-image model: no download, one replica, a REST endpoint. */
export function benchModel(
  name: string,
  namespace: string,
  run: string,
  extra: Partial<MLModel["spec"]> = {},
): MLModel {
  return {
    apiVersion: apiVersionOf(mlModelKind),
    kind: "MLModel",
    metadata: { name, namespace, labels: { [modelLabel]: run } },
    spec: {
      image: "registry.example.com/bench/model:1",
      model: { path: "/models/bench", version: "1" },
      replicas: 1,
      endpoint: { protocol: "REST", restPort: 8080 },
      ...extra,
    },
  } as MLModel;
}

export function modelNames(n: number): string[] {
  return Array.from({ length: n }, (_, i) => `m-${String(i).padStart(5, "0")}`);
}

/** Ready for the spec the model has now: the operator saw this generation and its pods are ready. */
export function servesCurrentSpec(m: MLModel, version?: string): boolean {
  const s = m.status;
  return (
    s?.phase === "Ready" &&
    s.observedGeneration === m.metadata.generation &&
    (version === undefined || s.modelVersion === version) &&
    s.revision?.current !== undefined &&
    s.revision.lastReady === s.revision.current
  );
}

async function createNamespace(admin: KubeClient, name: string): Promise<void> {
  await admin.create(builtinKinds.Namespace, {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name, labels: { "mlmodel.dev/bench": "true" } },
  });
}

async function namespaceGone(admin: KubeClient, name: string): Promise<void> {
  while (await admin.get(builtinKinds.Namespace, { name })) await sleep(1000);
}

/** Creates the models with `parallelism` in flight; returns each one's creation start time. */
async function createModels(
  admin: KubeClient,
  models: MLModel[],
  parallelism: number,
  onCreated?: (m: MLModel) => void,
): Promise<Map<string, number>> {
  const started = new Map<string, number>();
  await inParallel(models, parallelism, async (m) => {
    started.set(m.metadata.name!, performance.now());
    const created = await admin.create(mlModelKind, m);
    onCreated?.(created);
  });
  return started;
}

function latenciesOf(started: Map<string, number>, reached: Map<string, number>): number[] {
  return [...reached].map(([name, t]) => seconds(t - started.get(name)!));
}

function perModel(counts: Record<string, number>, n: number): Record<string, number> {
  return Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, round(v / n, 2) ?? 0]));
}

function requestsByVerb(samples: Sample[]): Record<string, number> {
  return sumBy(samples, "rest_client_requests_total", "verb");
}

const liveness = (n: number) => 300_000 + n * 1_000;

/**
 * Converge: N models created at once; time until all Ready, per-model latency, the operator's
 * requests (its own counters and the audit log), CPU and peak RSS.
 */
async function converge(
  cluster: BenchCluster,
  operator: OperatorProcess,
  namespace: string,
  names: string[],
  opts: OperatorBenchOptions,
  tracker: Tracker<MLModel>,
): Promise<ConvergeResult> {
  const n = names.length;
  const before = await operator.metrics();
  const cpuBefore = operator.stats().cpuSeconds;
  const audit = cluster.auditLog ? auditOffset(cluster.auditLog) : 0;
  const t0 = performance.now();
  const ready = tracker.until(names, (m) => servesCurrentSpec(m), liveness(n));
  const started = await createModels(
    cluster.admin,
    names.map((name) => benchModel(name, namespace, namespace)),
    opts.clientParallelism,
  );
  const reached = await ready;
  const elapsed = seconds(Math.max(...reached.values()) - t0);
  const after = await operator.metrics();
  const stats = operator.stats();
  const byVerb = diff(requestsByVerb(after), requestsByVerb(before));
  const reconciles =
    total(after, "controller_runtime_reconcile_total") - total(before, "controller_runtime_reconcile_total");
  const writes: AuditWrites | undefined = cluster.auditLog
    ? writesSince(cluster.auditLog, audit, operatorUser)
    : undefined;
  const latencies = latenciesOf(started, reached);
  return {
    seconds: round(elapsed)!,
    latency: percentiles(latencies),
    requestsPerModel: round(Object.values(byVerb).reduce((a, b) => a + b, 0) / n)!,
    requestsPerModelByVerb: perModel(byVerb, n),
    reconcilesPerModel: round(reconciles / n)!,
    ...(writes ? { auditWritesPerModel: perModel(writes.byVerbResource, n) } : {}),
    cpuSeconds: round(stats.cpuSeconds - cpuBefore)!,
    peakRssMiB: round(stats.peakRssMiB, 1)!,
    latencies,
  };
}

/**
 * Floor: no operator. A bare client creates the same MLModels, then applies the very objects
 * the operator would (the operator's own desired-state functions) with the same concurrency,
 * and waits for the Deployments' pods to be ready. The control plane's own limit on this machine.
 */
async function floor(
  admin: KubeClient,
  namespace: string,
  names: string[],
  opts: OperatorBenchOptions,
): Promise<FloorResult> {
  const deployments = new Tracker<
    KubeObject & { status?: { readyReplicas?: number; updatedReplicas?: number } }
  >(admin, builtinKinds.Deployment, namespace);
  await deployments.start();
  try {
    const t0 = performance.now();
    const ready = deployments.until(
      names,
      (d) => (d.status?.readyReplicas ?? 0) >= 1 && (d.status?.updatedReplicas ?? 0) >= 1,
      liveness(names.length),
    );
    // Children are applied by `concurrency` workers as models are created, like the operator's queue.
    const created: MLModel[] = [];
    const waiting: (() => void)[] = [];
    let finished = false;
    const creating = createModels(
      admin,
      names.map((name) => benchModel(name, namespace, namespace)),
      opts.clientParallelism,
      (m) => {
        created.push(m);
        waiting.shift()?.();
      },
    ).then((started) => {
      finished = true;
      for (const w of waiting.splice(0)) w();
      return started;
    });
    const next = async (): Promise<MLModel | undefined> => {
      while (created.length === 0 && !finished) await new Promise<void>((r) => waiting.push(r));
      return created.shift();
    };
    const worker = async () => {
      for (let m = await next(); m; m = await next()) await applyChildren(admin, m);
    };
    await Promise.all(Array.from({ length: opts.concurrency }, worker));
    const started = await creating;
    const reached = await ready;
    const latencies = latenciesOf(started, reached);
    return {
      seconds: round(seconds(Math.max(...reached.values()) - t0))!,
      latency: percentiles(latencies),
      latencies,
    };
  } finally {
    deployments.stop();
  }
}

/** What the operator writes for a model that serves: its Deployment and Service, by server-side apply. */
async function applyChildren(admin: KubeClient, model: MLModel): Promise<void> {
  const resolution = resolveRuntime(model, [], []);
  if (!resolution.ok) throw new Error(`bench model has no runtime: ${resolution.message}`);
  const plan = planModel(model, resolution.runtime);
  const owner = controllerOwnerRef(model);
  await admin.apply(
    builtinKinds.Deployment,
    withAppliedHash(desiredDeployment(plan, owner) as unknown as KubeObject),
    {
      fieldManager,
      force: true,
    },
  );
  await admin.apply(
    builtinKinds.Service,
    withAppliedHash(desiredService(plan, owner) as unknown as KubeObject),
    {
      fieldManager,
      force: true,
    },
  );
}

/** Steady state: an idle period after convergence. Writes must be zero; reconciles should be. */
async function steady(
  cluster: BenchCluster,
  operator: OperatorProcess,
  idleSeconds: number,
): Promise<SteadyResult> {
  const before = await operator.metrics();
  const audit = cluster.auditLog ? auditOffset(cluster.auditLog) : 0;
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const after = await operator.metrics();
  const byVerb = diff(requestsByVerb(after), requestsByVerb(before));
  const perMinute = (v: number) => round((v * 60) / idleSeconds)!;
  const writes = Object.entries(byVerb)
    .filter(([verb]) => writeVerbs.has(verb))
    .reduce((a, [, v]) => a + v, 0);
  const reconciles =
    total(after, "controller_runtime_reconcile_total") - total(before, "controller_runtime_reconcile_total");
  return {
    idleSeconds,
    writesPerMinute: perMinute(writes),
    reconcilesPerMinute: perMinute(reconciles),
    requestsPerMinuteByVerb: Object.fromEntries(Object.entries(byVerb).map(([k, v]) => [k, perMinute(v)])),
    ...(cluster.auditLog ? { auditWrites: writesSince(cluster.auditLog, audit, operatorUser).total } : {}),
  };
}

/** Update wave: every 10th model gets model version "2"; time until all of them serve it. */
async function updateWave(
  admin: KubeClient,
  operator: OperatorProcess,
  namespace: string,
  names: string[],
  opts: OperatorBenchOptions,
  tracker: Tracker<MLModel>,
): Promise<UpdateResult> {
  const wave = names.filter((_, i) => i % 10 === 0);
  const before = await operator.metrics();
  const t0 = performance.now();
  const ready = tracker.until(wave, (m) => servesCurrentSpec(m, "2"), liveness(wave.length));
  const started = new Map<string, number>();
  await inParallel(wave, opts.clientParallelism, async (name) => {
    started.set(name, performance.now());
    await admin.patch(mlModelKind, { namespace, name }, { spec: { model: { version: "2" } } }, "merge");
  });
  const reached = await ready;
  const after = await operator.metrics();
  return {
    models: wave.length,
    seconds: round(seconds(Math.max(...reached.values()) - t0))!,
    latency: percentiles(latenciesOf(started, reached)),
    requestsPerModelByVerb: perModel(diff(requestsByVerb(after), requestsByVerb(before)), wave.length),
  };
}

/** Delete all: every MLModel deleted; time until the models and every child (down to pods) are gone. */
async function deleteAll(
  admin: KubeClient,
  operator: OperatorProcess,
  namespace: string,
  names: string[],
  opts: OperatorBenchOptions,
): Promise<DeleteResult> {
  const before = await operator.metrics();
  const t0 = performance.now();
  await inParallel(names, opts.clientParallelism, async (name) => {
    await admin.delete(mlModelKind, { namespace, name }, { propagationPolicy: "Background" });
  });
  await waitGone(admin, namespace);
  const elapsed = seconds(performance.now() - t0);
  const after = await operator.metrics();
  return { seconds: round(elapsed)!, requestsByVerb: diff(requestsByVerb(after), requestsByVerb(before)) };
}

const childKinds = [
  mlModelKind,
  builtinKinds.Deployment,
  builtinKinds.ReplicaSet,
  builtinKinds.Pod,
  builtinKinds.Service,
  builtinKinds.Job,
];

/** Polls (one-item lists, cheap at any N) until no model and no child is left in the namespace. */
async function waitGone(admin: KubeClient, namespace: string): Promise<void> {
  const deadline = Date.now() + 1_800_000;
  for (;;) {
    let left = 0;
    for (const kind of childKinds) left += (await admin.list(kind, { namespace, limit: 1 })).items.length;
    if (left === 0) return;
    if (Date.now() > deadline) throw new Error(`objects still left in ${namespace} after 30 minutes`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Memory scaling: a fresh operator process caching 0, then each of `points` MLModels. The
 * models wait for a credentials Secret that does not exist, so each costs one status write
 * and no children: what is measured is the cache, not the children's pods.
 */
async function memory(
  cluster: BenchCluster,
  kubeconfig: string,
  work: string,
  opts: OperatorBenchOptions,
): Promise<MemoryResult> {
  const namespace = `bench-mem-${randomBytes(3).toString("hex")}`;
  await createNamespace(cluster.admin, namespace);
  const operator = await startOperatorProcess({
    kubeconfig,
    namespace,
    concurrency: opts.concurrency,
    logFile: join(work, "operator-memory.log"),
  });
  const tracker = new Tracker<MLModel>(cluster.admin, mlModelKind, namespace);
  await tracker.start();
  const points: MemoryPoint[] = [];
  let note: string | undefined;
  try {
    points.push(await memoryPoint(operator, 0));
    opts.log(`memory: ${JSON.stringify(points[0])}`);
    let have = 0;
    for (const target of [...opts.memoryPoints].sort((a, b) => a - b)) {
      const names = modelNames(target).slice(have);
      opts.log(`memory: creating ${names.length} more models (to ${target} cached)`);
      const waiting = tracker.until(
        names,
        (m) => m.status?.reason === "SecretNotFound" && m.status.observedGeneration === m.metadata.generation,
        liveness(names.length),
      );
      try {
        await createModels(
          cluster.admin,
          names.map((name) =>
            benchModel(name, namespace, namespace, {
              model: { path: "/models/bench", credentialsSecretRef: { name: "absent" } },
            } as Partial<MLModel["spec"]>),
          ),
          opts.clientParallelism,
        );
        await waiting;
      } catch (err) {
        note = `stopped before ${target} cached models: ${(err as Error).message}`;
        opts.log(`memory: ${note}`);
        break;
      }
      have = target;
      const point = await memoryPoint(operator, target);
      points.push(point);
      // Logged as it comes: a run stopped before the end still leaves its points.
      opts.log(`memory: ${JSON.stringify(point)}`);
    }
  } finally {
    tracker.stop();
    await operator.stop();
  }
  const first = points[0]!;
  const last = points.at(-1)!;
  const storeCost = await measureStoreCost(cluster.admin, namespace).catch((err: Error) => {
    opts.log(`memory: store cost not measured: ${err.message}`);
    return undefined;
  });
  await cluster.admin.delete(builtinKinds.Namespace, { name: namespace }).catch(() => {});
  return {
    points,
    ...(last.cachedModels > 0
      ? { heapKiBPerModel: round(((last.heapUsedMiB - first.heapUsedMiB) * 1024) / last.cachedModels, 1)! }
      : {}),
    ...(storeCost ? { storeCost } : {}),
    ...(note ? { note } : {}),
  };
}

/** RSS and heap after a few seconds of quiet (the heap figure still includes uncollected garbage). */
async function memoryPoint(operator: OperatorProcess, cachedModels: number): Promise<MemoryPoint> {
  await new Promise((r) => setTimeout(r, 5000));
  const samples = await operator.metrics();
  return {
    cachedModels,
    rssMiB: round(operator.stats().rssMiB, 1)!,
    heapUsedMiB: round(total(samples, "nodejs_heap_size_used_bytes") / 2 ** 20, 1)!,
  };
}

export function machine(cluster: BenchCluster): OperatorBenchResult["machine"] {
  return {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    cluster: cluster.description.startsWith("the cluster of") ? "given kubeconfig" : cluster.description,
    note: "shared with other engineers' builds and tests: figures are noisy",
  };
}

export async function runOperatorBench(
  cluster: BenchCluster,
  opts: OperatorBenchOptions,
): Promise<OperatorBenchResult> {
  const work = mkdtempSync(join(tmpdir(), "mlmodel-bench-op-"));
  const { admin } = cluster;
  const names = modelNames(opts.models);
  const result: OperatorBenchResult = {
    models: opts.models,
    concurrency: opts.concurrency,
    machine: machine(cluster),
  };
  const kubeconfig = await operatorKubeconfig(admin, cluster.kubeConfig, work);
  const runId = randomBytes(3).toString("hex");

  const needsOperator = ["converge", "steady", "update", "delete"].some((s) =>
    opts.series.has(s as SeriesName),
  );
  if (needsOperator) {
    const ns = `bench-op-${runId}`;
    await createNamespace(admin, ns);
    const operator = await startOperatorProcess({
      kubeconfig,
      namespace: ns,
      concurrency: opts.concurrency,
      logFile: join(work, "operator.log"),
    });
    opts.log(`operator: pid ${operator.pid}, log ${join(work, "operator.log")}`);
    const tracker = new Tracker<MLModel>(admin, mlModelKind, ns);
    await tracker.start();
    try {
      opts.log(`converge: creating ${opts.models} models`);
      result.converge = await converge(cluster, operator, ns, names, opts, tracker);
      opts.log(`converge: ${result.converge.seconds}s`);
      if (opts.series.has("steady")) {
        opts.log(`steady: idle for ${opts.idleSeconds}s`);
        result.steady = await steady(cluster, operator, opts.idleSeconds);
      }
      if (opts.series.has("update")) {
        opts.log("update: new model version for every 10th model");
        result.update = await updateWave(admin, operator, ns, names, opts, tracker);
      }
      if (opts.series.has("delete")) {
        opts.log("delete: all models");
        result.delete = await deleteAll(admin, operator, ns, names, opts);
      }
    } finally {
      tracker.stop();
      await operator.stop();
    }
    await admin.delete(builtinKinds.Namespace, { name: ns }).catch(() => {});
    // Without the delete series, the namespace's 1,000s of objects are still being collected:
    // a floor run now would pay for that garbage collection (it did: 172 s against 124 s).
    if (opts.series.has("floor") && !opts.series.has("delete")) {
      opts.log(`waiting for namespace ${ns} and everything in it to be gone before the floor`);
      await namespaceGone(admin, ns);
    }
  }

  // The floor runs last, on a cluster the operator series left empty (delete all waits for
  // every child to go), so neither run pays for the other's garbage collection.
  if (opts.series.has("floor")) {
    const ns = `bench-floor-${runId}`;
    await createNamespace(admin, ns);
    opts.log(`floor: ${opts.models} models' children by a bare client, concurrency ${opts.concurrency}`);
    result.floor = await floor(admin, ns, names, opts);
    opts.log(`floor: ${result.floor.seconds}s`);
    await admin.delete(builtinKinds.Namespace, { name: ns }).catch(() => {});
  }

  if (opts.series.has("memory") && opts.memoryPoints.length) {
    result.memory = await memory(cluster, kubeconfig, work, opts);
  }

  if (result.converge) {
    result.operatorSeconds = result.converge.seconds;
    result.requestsPerModel = result.converge.requestsPerModel;
    result.peakRssMiB = result.converge.peakRssMiB;
  }
  if (result.floor) result.floorSeconds = result.floor.seconds;
  if (result.operatorSeconds !== undefined && result.floorSeconds)
    result.ratio = round(result.operatorSeconds / result.floorSeconds);
  return result;
}
