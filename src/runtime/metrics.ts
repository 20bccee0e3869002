/**
 * Prometheus metrics with controller-runtime's names, so existing dashboards and alerts work.
 * Each Manager has its own Registry (two managers in one process, as in tests, do not clash).
 */
import { Counter, collectDefaultMetrics, exponentialBuckets, Gauge, Histogram, Registry } from "prom-client";
import type { RequestRecord } from "./client.ts";
import type { QueueMetrics } from "./queue.ts";

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

  constructor(opts: { registry?: Registry; defaultMetrics?: boolean } = {}) {
    this.registry = opts.registry ?? new Registry();
    const registers = [this.registry];
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
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

  /** Hook for KubeClient.onRequest. Code 0 (no answer) is reported as "<error>" like client-go. */
  readonly recordRequest = (r: RequestRecord): void => {
    this.restRequests.inc({
      code: r.code === 0 ? "<error>" : String(r.code),
      method: r.method,
      verb: r.verb,
    });
  };
}
