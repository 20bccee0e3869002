/**
 * The operator benchmark: converge, floor, steady state, update wave, delete all and memory
 * scaling, against a real control plane, with the operator as its own process under its own
 * RBAC. Prints figures; never passes or fails on time (the machine is shared and noisy).
 *
 * Models are custom-image MLModels (1 replica, REST). Two paths (--path):
 *   image:    MLModel -> Deployment + Service -> ReplicaSet -> Pod (kwok, Ready in ~0.5 s) -> Ready
 *   download: the same image with a model URI: MLModel -> PVC (bound to a volume made before
 *             the timed part) -> download Job (+ ServiceAccount, Role, RoleBinding; kwok
 *             completes its pod) -> Deployment + Service -> Pod -> Ready
 *   nodecache: the download path with `storage.mode: NodeCache`, the operator given a node cache
 *             URL that nothing answers: no claim; the download Job (kwok completes its pod) ->
 *             Deployment (cache-copy init container, spread over nodes) + Service -> Pods ->
 *             Ready; then the agents' state ConfigMaps written by hand (series cache-state)
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { defaultOperatorNamespace } from "../../src/install/manifests.ts";
import { cacheKey } from "../../src/nodecache/contract.ts";
import { labels } from "../../src/operator/names.ts";
import { apiVersionOf, builtinKinds, type KubeClient, type KubeObject } from "../../src/runtime/index.ts";
import { type AuditMark, type AuditWrites, auditOffset, writesSince } from "../lib/audit.ts";
import type { BenchCluster } from "../lib/cluster.ts";
import { diff, type Sample, sumBy, total } from "../lib/prometheus.ts";
import { inParallel, median, type Percentiles, percentiles, round } from "../lib/stats.ts";
import { type BenchPath, type FloorResult, floor } from "./floor.ts";
import { measureStoreCost, type StoreCost } from "./memory.ts";
import {
  agentStateConfigMap,
  benchNodeCacheUrl,
  type PlacedPod,
  type Placement,
  placementOf,
  servingPod,
  splitStatusWrites,
} from "./nodecache.ts";
import {
  imageNodeOptions,
  type OperatorProcess,
  operatorKubeconfig,
  operatorUser,
  startOperatorProcess,
} from "./process.ts";
import { Tracker } from "./tracker.ts";
import { leavingVolumes, provideVolumes, removeVolumes, volumesGone } from "./volumes.ts";

export type { BenchPath } from "./floor.ts";
/** The paths `--path both` runs. */
export const allPaths: BenchPath[] = ["image", "download"];
export const knownPaths: BenchPath[] = ["image", "download", "nodecache"];
/** The paths whose models are downloaded (a Job, then the serving pods). */
export const downloads = (path: BenchPath) => path !== "image";

export type SeriesName = "converge" | "floor" | "steady" | "cache-state" | "update" | "delete" | "memory";
export const allSeries: SeriesName[] = [
  "converge",
  "floor",
  "steady",
  "cache-state",
  "update",
  "delete",
  "memory",
];

export interface OperatorBenchOptions {
  models: number;
  path: BenchPath;
  /** Operator --concurrency, and the floor client's. */
  concurrency: number;
  idleSeconds: number;
  /** Cached-model counts for the memory series. */
  memoryPoints: number[];
  series: Set<SeriesName>;
  /** Creates and deletes in flight at once from the benchmark's client. */
  clientParallelism: number;
  /** Extra Node flags for the operator process (e.g. --cpu-prof --cpu-prof-dir=DIR). */
  nodeFlags?: string[];
  /** spec.replicas of every model (default 1). */
  replicas?: number;
  /** The floor before the operator's series (pairs alternate the order: see scripts/bench.ts). */
  floorFirst?: boolean;
  log: (line: string) => void;
}

export interface ConvergeResult {
  seconds: number;
  latency: Percentiles;
  requestsPerModel: number;
  requestsPerModelByVerb: Record<string, number>;
  reconcilesPerModel: number;
  /**
   * Watch events the operator's caches received per model, by cache (its watch_events_total,
   * bookmarks left out): with requests and reconciles, the work the CPU per model pays for.
   */
  watchEventsPerModel: Record<string, number>;
  watchEventsPerModelTotal: number;
  /** Audit-logged writes from the first create until the last model was Ready. */
  auditWritesPerModel?: Record<string, number>;
  auditWritesPerModelTotal?: number;
  cpuSeconds: number;
  /**
   * Operator user+system CPU per model, in ms. Steadier than seconds, but not a constant of the
   * code: on this 2-core machine it moved from 5.5 to 9.5 ms for the same code, events and
   * requests as the machine slowed (bench/README.md, phase I). Compare alternated runs.
   */
  cpuMsPerModel: number;
  peakRssMiB: number;
  /** When the last model turned Ready (epoch ms): the start of the settle and steady windows. */
  lastReadyAt: number;
  /** Load average (1 min) at the end of the series. */
  loadAverage: number;
  /** create -> Ready latencies in seconds, for the plot. */
  latencies: number[];
}

/** One line of a converge's figures (everything but the per-model latencies). */
export function convergeFigures(c: ConvergeResult): string {
  const { latencies: _, ...figures } = c;
  return JSON.stringify(figures);
}

export interface SteadyResult {
  /** The idle window starts this long after the last model was Ready. */
  settleSeconds: number;
  idleSeconds: number;
  writesPerMinute: number;
  reconcilesPerMinute: number;
  requestsPerMinuteByVerb: Record<string, number>;
  /** Operator CPU during the idle window. */
  cpuSeconds: number;
  /** Audit-logged writes in the idle window (goal: none). */
  auditWrites?: number;
  auditWritesByVerbResource?: Record<string, number>;
  /** Audit-logged writes between the last Ready and the idle window (the settle window). */
  settleWrites?: number;
  settleWritesByVerbResource?: Record<string, number>;
  /** Seconds after the last Ready of the operator's last write seen up to the window's end. */
  lastWriteAfterReadySeconds?: number;
}

/** The operator's Events in the run's namespace by reason: objects, and occurrences (series counts). */
export type EventTally = Record<string, { events: number; occurrences: number }>;

export interface UpdateResult {
  models: number;
  seconds: number;
  latency: Percentiles;
  requestsPerModelByVerb: Record<string, number>;
  auditWritesPerModel?: Record<string, number>;
  cpuMsPerModel: number;
}

export interface DeleteResult {
  seconds: number;
  requestsByVerb: Record<string, number>;
}

export interface MemoryPoint {
  cachedModels: number;
  /** The operator's CPU time so far (the difference between points is what the burst cost). */
  cpuSeconds?: number;
  rssMiB: number;
  /** RSS split: file-backed pages (the Node binary's code, mapped files) and anonymous ones (heaps). */
  rssFileMiB?: number;
  rssAnonMiB?: number;
  heapUsedMiB: number;
  /**
   * What V8 holds for its heap (used or not) and outside it (Buffers, ArrayBuffers): with
   * file-backed pages, what RSS is made of beyond the heap in use.
   */
  heapTotalMiB?: number;
  externalMiB?: number;
  /**
   * The same, `settleSeconds` later with nothing happening: right after a burst of creates the
   * heap still holds its garbage and V8 has not given pages back (its memory reducer runs once
   * allocation stops), so the first figure moves with the burst's timing.
   */
  settled?: {
    seconds: number;
    rssMiB: number;
    heapUsedMiB: number;
    heapTotalMiB: number;
    externalMiB: number;
    /** V8's heap by space (old, new, code, large_object...): what it holds and what is in use. */
    spaces?: Record<string, { usedMiB: number; totalMiB: number }>;
    /** Garbage collections by kind (minor, major, incremental, weakcb) since the operator started. */
    gcs?: Record<string, number>;
    /** The runtime's compacting collections once work was quiet (heap_reclaims_total) so far. */
    heapReclaims?: number;
  };
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
  path: BenchPath;
  /** The floor ran before the operator's series. */
  floorFirst?: boolean;
  operatorSeconds?: number;
  floorSeconds?: number;
  ratio?: number;
  requestsPerModel?: number;
  peakRssMiB?: number;
  concurrency: number;
  machine: {
    cores: number;
    memoryGiB: number;
    cluster: string;
    note: string;
    loadAverage: number[];
    /** The operator's Node options: the image's NODE_OPTIONS and --node-flags. */
    operatorNodeOptions: string;
  };
  converge?: ConvergeResult;
  floor?: FloorResult;
  /** With --pairs N > 1: each converge + floor pair; `ratio` is then their median ratio. */
  pairs?: PairFigures[];
  steady?: SteadyResult;
  /** Read after converge (and the steady window): which Events were written and repeated. */
  events?: EventTally;
  update?: UpdateResult;
  delete?: DeleteResult;
  memory?: MemoryResult;
  /** spec.replicas of every model. */
  replicas?: number;
  /** Where the serving pods were when the last model was Ready. */
  placement?: Placement;
  cacheState?: CacheStateResult;
}

/**
 * What the agents' reports cost: one state ConfigMap per node written by hand, each listing
 * every model's key, then the time until every model's status.cache lists every node, and the
 * operator's reconciles and writes meanwhile (children's writes: the goal is none).
 */
export interface CacheStateResult {
  configMaps: number;
  keysPerConfigMap: number;
  /** Until every model's status.cache listed every node (then a quiet window, below). */
  seconds: number;
  quietSeconds: number;
  modelsShowingEveryNode: number;
  reconciles: number;
  reconcilesPerModel: number;
  requestsByVerb: Record<string, number>;
  cpuSeconds: number;
  auditStatusWrites?: number;
  /** Audit-logged writes other than the models' status (children, Events): the goal is none but Events. */
  auditOtherWrites?: Record<string, number>;
  /**
   * Then the same ConfigMaps again with only the times of use and of the report moved (an
   * agent's routine report): reconciles and audit-logged writes until quiet (the goal: none).
   */
  routineReport?: { reconciles: number; auditWrites?: number };
}

/** One converge + floor pair of a --pairs run: both on the same cluster, back to back. */
export interface PairFigures {
  order: "operator-first" | "floor-first";
  operatorSeconds: number;
  floorSeconds: number;
  ratio: number;
  cpuMsPerModel: number;
  reconcilesPerModel: number;
  /** Load average (1 min) at the start and at the end of the pair. */
  loadAverage: [number, number];
}

/** A run's converge and floor as a pair, or undefined when it lacks either. */
export function pairFigures(r: OperatorBenchResult, loadAtStart: number): PairFigures | undefined {
  if (!r.converge || !r.floor || r.ratio === undefined) return undefined;
  return {
    order: r.floorFirst ? "floor-first" : "operator-first",
    operatorSeconds: r.converge.seconds,
    floorSeconds: r.floor.seconds,
    ratio: r.ratio,
    cpuMsPerModel: r.converge.cpuMsPerModel,
    reconcilesPerModel: r.converge.reconcilesPerModel,
    loadAverage: [loadAtStart, round(loadavg()[0], 1)!],
  };
}

/**
 * The first run's result with every pair's figures, and as its ratio the pairs' median: each
 * pair's operator and floor ran minutes apart at much the same load, while the floor alone
 * moved from 63 to 102 s between single runs of one version (bench/README.md, phase E).
 */
export function withPairs(first: OperatorBenchResult, pairs: PairFigures[]): OperatorBenchResult {
  const ratios = pairs.map((p) => p.ratio);
  return { ...first, pairs, ratio: round(median(ratios)) };
}

const modelLabel = "bench.mlmodel.dev/run";
/** The operator's events.k8s.io reportingController (src/operator/run.ts). */
const reportingController = "serving.mlmodel.dev/operator";
const writeVerbs = new Set(["create", "update", "patch", "apply", "delete"]);
const seconds = (ms: number) => ms / 1000;
/** The steady window starts this long after the last model is Ready (the goal: no write after). */
export const settleMs = 5000;

/**
 * A custom-image model, one replica, a REST endpoint. On the download path it also has a model
 * URI (nothing fetches it: kwok completes the download pod) and asks for 1Gi of storage.
 */
export function benchModel(
  name: string,
  namespace: string,
  run: string,
  extra: Partial<MLModel["spec"]> = {},
  path: BenchPath = "image",
  replicas = 1,
): MLModel {
  // A URI per model: on the nodecache path each model is its own cache entry (key).
  const model = downloads(path)
    ? { uri: `https://models.example.com/bench/${name}.tar.gz`, version: "1" }
    : { path: "/models/bench", version: "1" };
  const storage =
    path === "download"
      ? { storage: { size: "1Gi" } }
      : path === "nodecache"
        ? { storage: { size: "1Gi", mode: "NodeCache" } }
        : {};
  return {
    apiVersion: apiVersionOf(mlModelKind),
    kind: "MLModel",
    metadata: { name, namespace, labels: { [modelLabel]: run } },
    spec: {
      image: "registry.example.com/bench/model:1",
      model,
      replicas,
      endpoint: { protocol: "REST", restPort: 8080 },
      ...storage,
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

/** Creates a series' namespace, once the earlier series' namespaces are gone (earlierSeriesGone). */
async function createNamespace(admin: KubeClient, name: string, log: (line: string) => void): Promise<void> {
  await earlierSeriesGone(admin, log);
  await admin.create(builtinKinds.Namespace, {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name, labels: { "mlmodel.dev/bench": "true" } },
  });
}

/**
 * Waits for the bench namespaces on this cluster (bench-*) still being deleted, and for the
 * download path's volumes still being deleted: called before every series creates its
 * namespace. A series deletes its namespace without waiting (the last one of a run too), so
 * whatever comes next, the next series of this run or the next run, waits here: 5,000 models'
 * objects took over 14 minutes to go while the next run's converge crawled beside them, and a
 * floor run after the operator's series paid for their garbage collection (172 s against
 * 124 s). A bench namespace not being deleted (a run going on beside this one) is left alone.
 */
async function earlierSeriesGone(admin: KubeClient, log: (line: string) => void): Promise<void> {
  const leaving = leavingBenchNamespaces((await admin.list(builtinKinds.Namespace)).items);
  if (leaving.length > 0) {
    log(`waiting for earlier namespaces and everything in them to be gone first: ${leaving.join(", ")}`);
    for (const name of leaving) await namespaceGone(admin, name);
  }
  const volumes = await leavingVolumes(admin);
  if (volumes.length > 0) {
    log(`waiting for ${volumes.length} earlier volumes to be gone first`);
    await volumesGone(admin, volumes);
  }
}

/** The bench namespaces (bench-*) among `namespaces` that are being deleted. */
export function leavingBenchNamespaces(namespaces: readonly Pick<KubeObject, "metadata">[]): string[] {
  return namespaces
    .filter((n) => n.metadata.name?.startsWith("bench-") && n.metadata.deletionTimestamp)
    .map((n) => n.metadata.name!);
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

/** All of `counts` together, per model. */
function totalPerModel(counts: Record<string, number>, n: number): number {
  return round(Object.values(counts).reduce((a, b) => a + b, 0) / n)!;
}

function requestsByVerb(samples: Sample[]): Record<string, number> {
  return sumBy(samples, "rest_client_requests_total", "verb");
}

/** Watch events by cache, bookmarks (the server's keep-alives, not work) left out. */
function watchEventsByCache(samples: Sample[]): Record<string, number> {
  return sumBy(
    samples.filter((s) => s.labels["type"] !== "BOOKMARK"),
    "watch_events_total",
    "cache",
  );
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
  const audit = cluster.auditLog ? auditOffset(cluster.auditLog) : undefined;
  const t0 = performance.now();
  const ready = tracker.until(names, (m) => servesCurrentSpec(m), liveness(n));
  const started = await createModels(
    cluster.admin,
    names.map((name) => benchModel(name, namespace, namespace, {}, opts.path, opts.replicas)),
    opts.clientParallelism,
  );
  const reached = await ready;
  const lastReady = Math.max(...reached.values());
  const lastReadyAt = performance.timeOrigin + lastReady;
  const elapsed = seconds(lastReady - t0);
  const after = await operator.metrics();
  const stats = operator.stats();
  const byVerb = diff(requestsByVerb(after), requestsByVerb(before));
  const events = diff(watchEventsByCache(after), watchEventsByCache(before));
  const reconciles =
    total(after, "controller_runtime_reconcile_total") - total(before, "controller_runtime_reconcile_total");
  const writes: AuditWrites | undefined =
    cluster.auditLog && audit
      ? writesSince(cluster.auditLog, audit, operatorUser, { toMs: lastReadyAt })
      : undefined;
  const latencies = latenciesOf(started, reached);
  const cpuSeconds = stats.cpuSeconds - cpuBefore;
  return {
    seconds: round(elapsed)!,
    latency: percentiles(latencies),
    requestsPerModel: totalPerModel(byVerb, n),
    requestsPerModelByVerb: perModel(byVerb, n),
    reconcilesPerModel: round(reconciles / n)!,
    watchEventsPerModel: perModel(events, n),
    watchEventsPerModelTotal: totalPerModel(events, n),
    ...(writes
      ? {
          auditWritesPerModel: perModel(writes.byVerbResource, n),
          auditWritesPerModelTotal: round(writes.total / n)!,
        }
      : {}),
    cpuSeconds: round(cpuSeconds)!,
    cpuMsPerModel: round((cpuSeconds * 1000) / n, 1)!,
    peakRssMiB: round(stats.peakRssMiB, 1)!,
    lastReadyAt,
    loadAverage: round(loadavg()[0], 1)!,
    latencies,
  };
}

/**
 * Steady state: an idle window that starts `settleMs` after the last model was Ready. Writes
 * must be zero in it (operator counters and audit log); the settle window before it is
 * reported too, and when the operator's last write came.
 */
async function steady(
  cluster: BenchCluster,
  operator: OperatorProcess,
  idleSeconds: number,
  converged: { auditOffset: AuditMark; lastReadyAt: number },
): Promise<SteadyResult> {
  const windowStart = converged.lastReadyAt + settleMs;
  await sleep(Math.max(0, windowStart - Date.now()));
  const before = await operator.metrics();
  const cpuBefore = operator.stats().cpuSeconds;
  await sleep(idleSeconds * 1000);
  const windowEnd = Date.now();
  const after = await operator.metrics();
  const cpuSeconds = operator.stats().cpuSeconds - cpuBefore;
  const byVerb = diff(requestsByVerb(after), requestsByVerb(before));
  const perMinute = (v: number) => round((v * 60) / idleSeconds)!;
  const writes = Object.entries(byVerb)
    .filter(([verb]) => writeVerbs.has(verb))
    .reduce((a, [, v]) => a + v, 0);
  const reconciles =
    total(after, "controller_runtime_reconcile_total") - total(before, "controller_runtime_reconcile_total");
  const result: SteadyResult = {
    settleSeconds: seconds(settleMs),
    idleSeconds,
    writesPerMinute: perMinute(writes),
    reconcilesPerMinute: perMinute(reconciles),
    requestsPerMinuteByVerb: Object.fromEntries(Object.entries(byVerb).map(([k, v]) => [k, perMinute(v)])),
    cpuSeconds: round(cpuSeconds)!,
  };
  if (cluster.auditLog) {
    const log = cluster.auditLog;
    const idle = writesSince(log, converged.auditOffset, operatorUser, {
      fromMs: windowStart,
      toMs: windowEnd,
    });
    const settle = writesSince(log, converged.auditOffset, operatorUser, {
      fromMs: converged.lastReadyAt,
      toMs: windowStart,
    });
    const lastAt = Math.max(idle.lastAt ?? 0, settle.lastAt ?? 0);
    Object.assign(result, {
      auditWrites: idle.total,
      auditWritesByVerbResource: idle.byVerbResource,
      settleWrites: settle.total,
      settleWritesByVerbResource: settle.byVerbResource,
      ...(lastAt ? { lastWriteAfterReadySeconds: round(seconds(lastAt - converged.lastReadyAt), 1) } : {}),
    });
  }
  return result;
}

/** Every serving pod in `namespace` (paged): the model it serves and its node. */
async function servingPods(admin: KubeClient, namespace: string): Promise<PlacedPod[]> {
  const pods: PlacedPod[] = [];
  let page: string | undefined;
  do {
    const res = await admin.list(builtinKinds.Pod, {
      namespace,
      labelSelector: labels.model,
      limit: 500,
      ...(page ? { continue: page } : {}),
    });
    for (const pod of res.items) {
      const placed = servingPod(pod, labels.model);
      if (placed) pods.push(placed);
    }
    page = res.continue;
  } while (page);
  return pods;
}

async function placement(admin: KubeClient, namespace: string): Promise<Placement> {
  return placementOf(await servingPods(admin, namespace));
}

/** The fake (kwok) nodes, by name. */
async function fakeNodes(admin: KubeClient): Promise<string[]> {
  const { items } = await admin.list(builtinKinds.Node);
  return items
    .filter((n) => n.metadata.annotations?.["kwok.x-k8s.io/node"] === "fake")
    .map((n) => n.metadata.name!)
    .sort();
}

/** Seconds without a reconcile that end the cache-state series once every model shows every node. */
const cacheStateQuietSeconds = 5;

/**
 * The agents' reports: one state ConfigMap per node in the node cache's namespace, each listing
 * every model's key (in use where a pod of the model runs on that node), written at once as
 * agents starting together would; then until every model's status.cache lists every node and
 * the operator is quiet. Counts reconciles, requests and audit-logged writes meanwhile.
 */
async function cacheState(
  cluster: BenchCluster,
  operator: OperatorProcess,
  namespace: string,
  names: string[],
  tracker: Tracker<MLModel>,
): Promise<CacheStateResult> {
  const { admin } = cluster;
  const nodes = await fakeNodes(admin);
  const keyOf = new Map(
    names.map((name) => [
      name,
      cacheKey(benchModel(name, namespace, namespace, {}, "nodecache").spec.model.uri!),
    ]),
  );
  const keys = [...keyOf.values()];
  const used = new Set((await servingPods(admin, namespace)).map((p) => `${p.node}/${keyOf.get(p.model)}`));
  const completedAt = new Date().toISOString();
  const states = (now: string) =>
    nodes.map((node) =>
      agentStateConfigMap({
        node,
        namespace: defaultOperatorNamespace,
        keys,
        originNode: nodes[0]!,
        inUse: (key) => used.has(`${node}/${key}`),
        size: 100 * 2 ** 20,
        completedAt,
        now,
      }),
    );
  const configMaps = states(completedAt);
  // Applied, not created: a state a stopped run left behind is replaced, as an agent replaces its own.
  const report = (cms: typeof configMaps) =>
    Promise.all(
      cms.map((cm) => admin.apply(builtinKinds.ConfigMap, cm, { fieldManager: "bench-agent", force: true })),
    );
  const before = await operator.metrics();
  const cpuBefore = operator.stats().cpuSeconds;
  const audit = cluster.auditLog ? auditOffset(cluster.auditLog) : undefined;
  const t0 = performance.now();
  const shown = tracker.until(
    names,
    (m) => m.status?.cache?.nodesCached === nodes.length,
    liveness(names.length),
  );
  await report(configMaps);
  const reached = await shown;
  const seconds_ = seconds(Math.max(...reached.values()) - t0);
  await reconcilesQuiet(operator);
  const after = await operator.metrics();
  const cpuSeconds = operator.stats().cpuSeconds - cpuBefore;
  const reconciles =
    total(after, "controller_runtime_reconcile_total") - total(before, "controller_runtime_reconcile_total");
  const writes = cluster.auditLog && audit ? writesSince(cluster.auditLog, audit, operatorUser) : undefined;
  const split = writes ? splitStatusWrites(writes.byVerbResource) : undefined;
  // The agents' routine report: the same entries, only the times of use and of the report moved.
  const routineAudit = cluster.auditLog ? auditOffset(cluster.auditLog) : undefined;
  await report(states(new Date(Date.now() + 60_000).toISOString()));
  await reconcilesQuiet(operator);
  const afterRoutine = await operator.metrics();
  const routineWrites =
    cluster.auditLog && routineAudit ? writesSince(cluster.auditLog, routineAudit, operatorUser) : undefined;
  await Promise.all(
    configMaps.map((cm) =>
      admin.delete(builtinKinds.ConfigMap, { namespace: defaultOperatorNamespace, name: cm.metadata.name! }),
    ),
  );
  return {
    configMaps: configMaps.length,
    keysPerConfigMap: keys.length,
    seconds: round(seconds_)!,
    quietSeconds: cacheStateQuietSeconds,
    modelsShowingEveryNode: reached.size,
    reconciles,
    reconcilesPerModel: round(reconciles / names.length)!,
    requestsByVerb: diff(requestsByVerb(after), requestsByVerb(before)),
    cpuSeconds: round(cpuSeconds)!,
    ...(split ? { auditStatusWrites: split.status, auditOtherWrites: split.other } : {}),
    routineReport: {
      reconciles:
        total(afterRoutine, "controller_runtime_reconcile_total") -
        total(after, "controller_runtime_reconcile_total"),
      ...(routineWrites ? { auditWrites: routineWrites.total } : {}),
    },
  };
}

/** Waits until the operator's reconcile count stays the same for cacheStateQuietSeconds. */
async function reconcilesQuiet(operator: OperatorProcess): Promise<void> {
  const reconcileTotal = async () => total(await operator.metrics(), "controller_runtime_reconcile_total");
  let last = await reconcileTotal();
  for (let quiet = 0; quiet < cacheStateQuietSeconds; ) {
    await sleep(1000);
    const now = await reconcileTotal();
    quiet = now === last ? quiet + 1 : 0;
    last = now;
  }
}

/** The operator's Events in `namespace`, by reason, with their series counts. */
async function eventTally(admin: KubeClient, namespace: string): Promise<EventTally> {
  const tally: EventTally = {};
  let page: string | undefined;
  do {
    const res = await admin.list<
      KubeObject & { reason?: string; reportingController?: string; series?: { count?: number } }
    >(builtinKinds.Event, { namespace, limit: 500, ...(page ? { continue: page } : {}) });
    for (const e of res.items) {
      if (e.reportingController !== reportingController) continue;
      const reason = e.reason ?? "?";
      const t = tally[reason] ?? { events: 0, occurrences: 0 };
      tally[reason] = { events: t.events + 1, occurrences: t.occurrences + (e.series?.count ?? 1) };
    }
    page = res.continue;
  } while (page);
  return tally;
}

/** Update wave: every 10th model gets model version "2"; time until all of them serve it. */
async function updateWave(
  admin: KubeClient,
  auditLog: string | undefined,
  operator: OperatorProcess,
  namespace: string,
  names: string[],
  opts: OperatorBenchOptions,
  tracker: Tracker<MLModel>,
): Promise<UpdateResult> {
  const wave = names.filter((_, i) => i % 10 === 0);
  const before = await operator.metrics();
  const cpuBefore = operator.stats().cpuSeconds;
  const audit = auditLog ? auditOffset(auditLog) : undefined;
  const t0 = performance.now();
  const ready = tracker.until(wave, (m) => servesCurrentSpec(m, "2"), liveness(wave.length));
  const started = new Map<string, number>();
  await inParallel(wave, opts.clientParallelism, async (name) => {
    started.set(name, performance.now());
    await admin.patch(mlModelKind, { namespace, name }, { spec: { model: { version: "2" } } }, "merge");
  });
  const reached = await ready;
  const after = await operator.metrics();
  const cpuSeconds = operator.stats().cpuSeconds - cpuBefore;
  const writes = auditLog && audit ? writesSince(auditLog, audit, operatorUser) : undefined;
  return {
    models: wave.length,
    seconds: round(seconds(Math.max(...reached.values()) - t0))!,
    latency: percentiles(latenciesOf(started, reached)),
    requestsPerModelByVerb: perModel(diff(requestsByVerb(after), requestsByVerb(before)), wave.length),
    ...(writes ? { auditWritesPerModel: perModel(writes.byVerbResource, wave.length) } : {}),
    cpuMsPerModel: round((cpuSeconds * 1000) / wave.length, 1)!,
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

/** Every kind of child (and grandchild) a model has on either path; all carry the model label. */
const childKinds = [
  builtinKinds.Deployment,
  builtinKinds.ReplicaSet,
  builtinKinds.Pod,
  builtinKinds.Service,
  builtinKinds.Job,
  builtinKinds.PersistentVolumeClaim,
  builtinKinds.ServiceAccount,
  builtinKinds.Role,
  builtinKinds.RoleBinding,
];

/** Polls (one-item lists, cheap at any N) until no model and no child is left in the namespace. */
async function waitGone(admin: KubeClient, namespace: string): Promise<void> {
  const deadline = Date.now() + 1_800_000;
  for (;;) {
    let left = (await admin.list(mlModelKind, { namespace, limit: 1 })).items.length;
    for (const kind of childKinds)
      left += (await admin.list(kind, { namespace, limit: 1, labelSelector: labels.model })).items.length;
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
  await createNamespace(cluster.admin, namespace, opts.log);
  const operator = await startOperatorProcess({
    kubeconfig,
    namespace,
    concurrency: opts.concurrency,
    logFile: join(work, "operator-memory.log"),
    nodeFlags: opts.nodeFlags,
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

/** Seconds of quiet between a memory point's first reading and its settled one. */
const memorySettleSeconds = 30;

/**
 * RSS and heap after a few seconds of quiet (the heap figure still includes uncollected
 * garbage), and again `memorySettleSeconds` later.
 */
async function memoryPoint(operator: OperatorProcess, cachedModels: number): Promise<MemoryPoint> {
  const heap = (samples: Sample[]) => {
    const mib = (name: string) => round(total(samples, name) / 2 ** 20, 1)!;
    return {
      heapUsedMiB: mib("nodejs_heap_size_used_bytes"),
      heapTotalMiB: mib("nodejs_heap_size_total_bytes"),
      externalMiB: mib("nodejs_external_memory_bytes"),
    };
  };
  await new Promise((r) => setTimeout(r, 5000));
  const first = heap(await operator.metrics());
  const stats = operator.stats();
  await new Promise((r) => setTimeout(r, memorySettleSeconds * 1000));
  // One scrape for the settled reading and its detail.
  const later = await operator.metrics();
  const settled = { ...heap(later), ...heapDetail(later) };
  return {
    cachedModels,
    cpuSeconds: round(stats.cpuSeconds, 2)!,
    rssMiB: round(stats.rssMiB, 1)!,
    rssFileMiB: round(stats.rssFileMiB, 1)!,
    rssAnonMiB: round(stats.rssAnonMiB, 1)!,
    ...first,
    settled: { seconds: memorySettleSeconds, rssMiB: round(operator.stats().rssMiB, 1)!, ...settled },
  };
}

/** Where the heap V8 keeps is, by space, and how many collections of each kind ran. */
function heapDetail(
  samples: readonly Sample[],
): Pick<Required<MemoryPoint>["settled"], "spaces" | "gcs" | "heapReclaims"> {
  const mib = (bytes: number | undefined) => round((bytes ?? 0) / 2 ** 20, 1)!;
  const used = sumBy(samples, "nodejs_heap_space_size_used_bytes", "space");
  const held = sumBy(samples, "nodejs_heap_space_size_total_bytes", "space");
  const spaces = Object.fromEntries(
    Object.keys(held).map((space) => [space, { usedMiB: mib(used[space]), totalMiB: mib(held[space]) }]),
  );
  return {
    spaces,
    gcs: sumBy(samples, "nodejs_gc_duration_seconds_count", "kind"),
    heapReclaims: total(samples, "heap_reclaims_total"),
  };
}

export function machine(cluster: BenchCluster, nodeFlags?: string[]): OperatorBenchResult["machine"] {
  return {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    cluster: cluster.description.startsWith("the cluster of") ? "given kubeconfig" : cluster.description,
    note: "shared with other engineers' builds and tests: figures are noisy",
    loadAverage: loadavg().map((l) => round(l, 1)!),
    operatorNodeOptions: [imageNodeOptions(), ...(nodeFlags ?? [])].filter(Boolean).join(" "),
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
    path: opts.path,
    concurrency: opts.concurrency,
    machine: machine(cluster, opts.nodeFlags),
    ...(opts.replicas && opts.replicas > 1 ? { replicas: opts.replicas } : {}),
    ...(opts.floorFirst ? { floorFirst: true } : {}),
  };
  const kubeconfig = await operatorKubeconfig(admin, cluster.kubeConfig, work);
  const runId = randomBytes(3).toString("hex");
  /** Only the download path's claims need volumes: the nodecache path makes no claim. */
  const download = opts.path === "download";
  const nodeCache = opts.path === "nodecache";
  /**
   * A namespace of the run: created once the earlier ones are gone, given volumes on the
   * download path before anything is timed.
   */
  const prepare = async (ns: string) => {
    await createNamespace(admin, ns, opts.log);
    if (!download) return;
    opts.log(
      `volumes: ${names.length} hostPath PersistentVolumes bound to the claims to come (no provisioner)`,
    );
    await provideVolumes(admin, ns, names, opts.clientParallelism);
  };
  /**
   * Deletes a namespace of the run without waiting (the next series waits, earlierSeriesGone),
   * and on the download path its volumes: each goes once its claim is gone (PV protection).
   */
  const discard = async (ns: string) => {
    await admin.delete(builtinKinds.Namespace, { name: ns }).catch(() => {});
    if (download) await removeVolumes(admin, ns, opts.clientParallelism);
  };

  const needsOperator = ["converge", "steady", "update", "delete"].some((s) =>
    opts.series.has(s as SeriesName),
  );
  const runFloor = opts.series.has("floor") && !nodeCache;
  if (opts.series.has("floor") && nodeCache)
    opts.log(
      "floor: not built for the nodecache path; compare it with --path download, operator to operator",
    );
  /** The operator's series, on a namespace of their own. */
  const operatorSeries = async () => {
    const ns = `bench-op-${runId}`;
    await prepare(ns);
    const operator = await startOperatorProcess({
      kubeconfig,
      namespace: ns,
      concurrency: opts.concurrency,
      logFile: join(work, "operator.log"),
      nodeFlags: opts.nodeFlags,
      ...(nodeCache ? { nodeCache: { url: benchNodeCacheUrl, namespace: defaultOperatorNamespace } } : {}),
    });
    opts.log(`operator: pid ${operator.pid}, log ${join(work, "operator.log")}`);
    const tracker = new Tracker<MLModel>(admin, mlModelKind, ns);
    await tracker.start();
    try {
      const auditStart = auditOffset(cluster.auditLog ?? "");
      opts.log(`converge: creating ${opts.models} ${opts.path}-path models`);
      result.converge = await converge(cluster, operator, ns, names, opts, tracker);
      opts.log(`converge: ${result.converge.seconds}s`);
      // Said now, not only in the summary at the end: a long run (N = 10,000 took 93 minutes)
      // stopped before its floor would otherwise lose them.
      opts.log(`converge figures: ${convergeFigures(result.converge)}`);
      result.placement = await placement(admin, ns);
      opts.log(`placement: ${JSON.stringify(result.placement)}`);
      if (opts.series.has("steady")) {
        opts.log(`steady: idle for ${opts.idleSeconds}s from ${settleMs / 1000}s after the last Ready`);
        result.steady = await steady(cluster, operator, opts.idleSeconds, {
          auditOffset: auditStart,
          lastReadyAt: result.converge.lastReadyAt,
        });
      }
      result.events = await eventTally(admin, ns);
      if (nodeCache && opts.series.has("cache-state")) {
        opts.log("cache-state: one agent state ConfigMap per node, each listing every model's key");
        result.cacheState = await cacheState(cluster, operator, ns, names, tracker);
        opts.log(`cache-state: ${JSON.stringify(result.cacheState)}`);
      }
      if (opts.series.has("update")) {
        opts.log("update: new model version for every 10th model");
        result.update = await updateWave(admin, cluster.auditLog, operator, ns, names, opts, tracker);
      }
      if (opts.series.has("delete")) {
        opts.log("delete: all models");
        result.delete = await deleteAll(admin, operator, ns, names, opts);
      }
    } finally {
      tracker.stop();
      await operator.stop();
    }
    await discard(ns);
  };
  /** The bare client's floor, on a namespace of its own. */
  const floorSeries = async () => {
    const ns = `bench-floor-${runId}`;
    await prepare(ns);
    opts.log(`floor: ${opts.models} models' children by a bare client, concurrency ${opts.concurrency}`);
    result.floor = await floor(
      admin,
      ns,
      names.map((name) => benchModel(name, ns, ns, {}, opts.path, opts.replicas)),
      {
        concurrency: opts.concurrency,
        clientParallelism: opts.clientParallelism,
        path: opts.path,
        timeoutMs: liveness(names.length),
      },
    );
    opts.log(`floor: ${result.floor.seconds}s`);
    await discard(ns);
  };

  // Whichever runs second runs on a cluster the first left empty (its namespace waited for in
  // prepare), so neither pays for the other's garbage collection. The floor runs last unless
  // floorFirst.
  if (runFloor && opts.floorFirst) await floorSeries();
  if (needsOperator) await operatorSeries();
  if (runFloor && !opts.floorFirst) await floorSeries();

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
