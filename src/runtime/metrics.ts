/**
 * Prometheus metrics with controller-runtime's names, so existing dashboards and alerts work.
 * Each Manager has its own Registry (two managers in one process, as in tests, do not clash).
 *
 * prom-client is loaded file by file, not through its index: the index also loads the
 * Summary (tdigest), the Pushgateway, the cluster aggregator and, through the default
 * process CPU metric, all of @opentelemetry/api (51 modules, for exemplars we do not use).
 * That costs an idle operator about 12 MiB of resident memory.
 * The default metrics are prom-client's own collectors, called as its collectDefaultMetrics
 * calls them, except the CPU counters, which are `processCpuMetrics` below (same names, help
 * and values). test/unit/runtime/metrics.test.ts checks the families against prom-client's.
 */
import { createRequire } from "node:module";
import type * as PromClient from "prom-client";
import type { RequestRecord } from "./client.ts";
import type { QueueMetrics } from "./queue.ts";

const promClient = createRequire(import.meta.url);
const Registry = promClient("prom-client/lib/registry.js") as typeof PromClient.Registry;
type Registry = PromClient.Registry;
const Counter = promClient("prom-client/lib/counter.js") as typeof PromClient.Counter;
type Counter<L extends string> = PromClient.Counter<L>;
const Gauge = promClient("prom-client/lib/gauge.js") as typeof PromClient.Gauge;
type Gauge<L extends string> = PromClient.Gauge<L>;
const Histogram = promClient("prom-client/lib/histogram.js") as typeof PromClient.Histogram;
type Histogram<L extends string> = PromClient.Histogram<L>;
const { exponentialBuckets } = promClient("prom-client/lib/bucketGenerators.js") as typeof PromClient;

/** One of prom-client's default-metric collectors (lib/metrics/*.js). */
type DefaultCollector = (registry: Registry, config: { eventLoopMonitoringPrecision: number }) => void;

/**
 * prom-client's default metrics in the order its collectDefaultMetrics registers them (the
 * exposition keeps that order). processResources needs process.getActiveResourcesInfo,
 * which Node 24 has; prom-client skips it where it is missing, and so do we.
 */
const defaultCollectorFiles = [
  "processStartTime",
  "osMemoryHeap",
  "processOpenFileDescriptors",
  "processMaxFileDescriptors",
  "eventLoopLag",
  ...(typeof process.getActiveResourcesInfo === "function" ? ["processResources"] : []),
  "processHandles",
  "processRequests",
  "heapSizeAndUsed",
  "heapSpacesSizeAndUsed",
  "version",
  "gc",
];

/**
 * process_cpu_{user,system,}_seconds_total as prom-client's processCpuTotal makes them (its
 * names, help and values: the CPU used since the last scrape added at each scrape), without
 * the @opentelemetry/api it loads for exemplars.
 */
function processCpuMetrics(registry: Registry): void {
  const registers = [registry];
  let last = process.cpuUsage();
  const user = new Counter({
    name: "process_cpu_user_seconds_total",
    help: "Total user CPU time spent in seconds.",
    registers,
    // One collect sets all three, as prom-client's does.
    collect() {
      const now = process.cpuUsage();
      const userSeconds = (now.user - last.user) / 1e6;
      const systemSeconds = (now.system - last.system) / 1e6;
      last = now;
      user.inc(userSeconds);
      system.inc(systemSeconds);
      total.inc(userSeconds + systemSeconds);
    },
  });
  const system = new Counter({
    name: "process_cpu_system_seconds_total",
    help: "Total system CPU time spent in seconds.",
    registers,
  });
  const total = new Counter({
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds.",
    registers,
  });
}

/** The process and Node.js metrics prom-client's collectDefaultMetrics registers. */
export function registerDefaultMetrics(registry: Registry): void {
  processCpuMetrics(registry);
  const config = { eventLoopMonitoringPrecision: 10 };
  for (const file of defaultCollectorFiles) {
    (promClient(`prom-client/lib/metrics/${file}.js`) as DefaultCollector)(registry, config);
  }
}

export type ReconcileOutcome = "success" | "error" | "requeue" | "requeue_after";
/** Every value of the `result` label, as controller-runtime names them. */
export const reconcileOutcomes: readonly ReconcileOutcome[] = [
  "success",
  "error",
  "requeue",
  "requeue_after",
];

export class RuntimeMetrics {
  readonly registry: Registry;
  readonly reconcileTotal: Counter<"controller" | "result">;
  readonly reconcileErrors: Counter<"controller">;
  readonly terminalErrors: Counter<"controller">;
  readonly reconcileTime: Histogram<"controller">;
  readonly activeWorkers: Gauge<"controller">;
  readonly maxConcurrent: Gauge<"controller">;
  readonly queueDepth: Gauge<"name" | "controller">;
  readonly queueAdds: Counter<"name" | "controller">;
  readonly queueDuration: Histogram<"name" | "controller">;
  readonly workDuration: Histogram<"name" | "controller">;
  readonly queueRetries: Counter<"name" | "controller">;
  readonly leaderStatus: Gauge<"name">;
  readonly restRequests: Counter<"code" | "method" | "verb">;
  /** Events the caches' watches received, by cache and watch event type. */
  readonly watchEvents: Counter<"cache" | "type">;
  /** The heap reclaimer's collections (heap-reclaim.ts) and the bytes they gave back. */
  readonly heapReclaims: Counter<never>;
  readonly heapReclaimedBytes: Counter<never>;

  constructor(opts: { registry?: Registry; defaultMetrics?: boolean } = {}) {
    this.registry = opts.registry ?? new Registry();
    const registers = [this.registry];
    if (opts.defaultMetrics ?? true) registerDefaultMetrics(this.registry);
    const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Counter<L>({ name, help, labelNames, registers });
    const gauge = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Gauge<L>({ name, help, labelNames, registers });
    const histogram = <L extends string>(name: string, help: string, labelNames: L[], buckets: number[]) =>
      new Histogram<L>({ name, help, labelNames, buckets, registers });
    const queueBuckets = exponentialBuckets(10e-9, 10, 12); // 10ns .. 1000s, like client-go
    const queue: ("name" | "controller")[] = ["name", "controller"];

    this.reconcileTotal = counter(
      "controller_runtime_reconcile_total",
      "Total number of reconciliations per controller",
      ["controller", "result"],
    );
    this.reconcileErrors = counter(
      "controller_runtime_reconcile_errors_total",
      "Total number of reconciliation errors per controller",
      ["controller"],
    );
    this.terminalErrors = counter(
      "controller_runtime_terminal_reconcile_errors_total",
      "Total number of terminal reconciliation errors per controller",
      ["controller"],
    );
    this.reconcileTime = histogram(
      "controller_runtime_reconcile_time_seconds",
      "Length of time per reconciliation per controller",
      ["controller"],
      [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
        1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
      ],
    );
    this.activeWorkers = gauge(
      "controller_runtime_active_workers",
      "Number of currently used workers per controller",
      ["controller"],
    );
    this.maxConcurrent = gauge(
      "controller_runtime_max_concurrent_reconciles",
      "Maximum number of concurrent reconciles per controller",
      ["controller"],
    );
    this.queueDepth = gauge("workqueue_depth", "Current depth of workqueue", queue);
    this.queueAdds = counter("workqueue_adds_total", "Total number of adds handled by workqueue", queue);
    this.queueDuration = histogram(
      "workqueue_queue_duration_seconds",
      "How long in seconds an item stays in workqueue before being requested",
      queue,
      queueBuckets,
    );
    this.workDuration = histogram(
      "workqueue_work_duration_seconds",
      "How long in seconds processing an item from workqueue takes",
      queue,
      queueBuckets,
    );
    this.queueRetries = counter(
      "workqueue_retries_total",
      "Total number of retries handled by workqueue",
      queue,
    );
    this.leaderStatus = gauge(
      "leader_election_master_status",
      "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
      ["name"],
    );
    this.restRequests = counter(
      "rest_client_requests_total",
      "Number of HTTP requests, partitioned by status code, method and verb",
      ["code", "method", "verb"],
    );
    this.watchEvents = counter(
      "watch_events_total",
      "Watch events received, partitioned by cache (its kind) and type (ADDED, MODIFIED, DELETED, BOOKMARK)",
      ["cache", "type"],
    );
    this.heapReclaims = counter("heap_reclaims_total", "Compacting collections run once work was quiet", []);
    this.heapReclaimedBytes = counter(
      "heap_reclaimed_bytes_total",
      "Heap bytes V8 gave back in the compacting collections run once work was quiet",
      [],
    );
  }

  /**
   * Gives a controller its series at once, at 0 (or its concurrency), as controller-runtime
   * does: dashboards and `absent()` alerts work from start-up, not from the first reconcile, and a
   * standby replica reports its zeros too.
   */
  initController(controller: string, concurrency: number): void {
    const labels = { controller };
    for (const result of reconcileOutcomes) this.reconcileTotal.inc({ ...labels, result }, 0);
    this.reconcileErrors.inc(labels, 0);
    this.terminalErrors.inc(labels, 0);
    this.activeWorkers.set(labels, 0);
    this.maxConcurrent.set(labels, concurrency);
  }

  /** Queue hooks for one controller's queue (queue name = controller name, as in controller-runtime). */
  queueHooks(controller: string): QueueMetrics {
    const labels = { name: controller, controller };
    return {
      depth: (n) => this.queueDepth.set(labels, n),
      add: () => this.queueAdds.inc(labels),
      queueDuration: (s) => this.queueDuration.observe(labels, s),
      workDuration: (s) => this.workDuration.observe(labels, s),
      retry: () => this.queueRetries.inc(labels),
    };
  }

  /**
   * A watcher's onEvent hook for one cache. Each type's child series is looked up once: this
   * runs for every event of a busy watch.
   */
  watchEventHook(cache: string): (type: string) => void {
    const byType = new Map<string, { inc(): void }>();
    return (type) => {
      let series = byType.get(type);
      if (!series) {
        series = this.watchEvents.labels({ cache, type });
        byType.set(type, series);
      }
      series.inc();
    };
  }

  /** Hook for KubeClient.onRequest. Code 0 (no answer) is reported as "<error>" like client-go. */
  readonly recordRequest = (r: RequestRecord): void => {
    this.restRequests.inc({
      code: r.code === 0 ? "<error>" : String(r.code),
      method: r.method,
      verb: r.verb,
    });
  };
}
