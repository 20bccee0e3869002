/**
 * Per-model metrics, read from the operator's MLModel cache when Prometheus scrapes: no API
 * call and no write of their own. `modelSamples` turns one model's status into samples (pure,
 * unit-tested); `registerModelMetrics` puts them in the Manager's registry.
 *
 * Every replica of the operator reports them (a standby's cache is as current as the leader's),
 * so queries aggregate with `max by (namespace, name)`. Reconcile errors are the runtime's
 * controller_runtime_reconcile_errors_total{controller="mlmodel"}.
 */
import { createRequire } from "node:module";
import type * as PromClient from "prom-client";
import type { MLModel, Phase } from "../api/mlmodel.ts";
import type { Store } from "../runtime/index.ts";

const promClient = createRequire(import.meta.url);
const Gauge = promClient("prom-client/lib/gauge.js") as typeof PromClient.Gauge;
const Counter = promClient("prom-client/lib/counter.js") as typeof PromClient.Counter;
type Registry = PromClient.Registry;

/** Every value status.phase takes, and Unknown for a model the operator has not written yet. */
export const phases: readonly (Phase | "Unknown")[] = [
  "Pending",
  "Downloading",
  "Deploying",
  "Ready",
  "Failed",
  "Terminating",
  "Unknown",
];

/** The families, their help and type; each sample carries namespace and name (and phase for mlmodel_phase). */
export const modelMetricFamilies = {
  mlmodel_phase: {
    type: "gauge",
    help: "1 for the model's status.phase, 0 for the others (Unknown: no status yet)",
  },
  mlmodel_replicas_desired: {
    type: "gauge",
    help: "Serving replicas the spec asks for (absent while an autoscaler decides)",
  },
  mlmodel_replicas: { type: "gauge", help: "Serving pods that exist, all revisions (status.replicas)" },
  mlmodel_replicas_ready: { type: "gauge", help: "Serving pods that are ready (status.readyReplicas)" },
  mlmodel_download_bytes_done: { type: "gauge", help: "Bytes of the current download on disk" },
  mlmodel_download_bytes_total: {
    type: "gauge",
    help: "Bytes the current download expects (absent when the source does not say)",
  },
  mlmodel_download_seconds: {
    type: "gauge",
    help: "Seconds the current download took, or has taken so far while it runs",
  },
  mlmodel_download_failed: { type: "gauge", help: "1 while the current download has failed" },
  mlmodel_revision_number: { type: "gauge", help: "Number of the current revision (mlmodel history)" },
  mlmodel_rollouts_total: {
    type: "counter",
    help: "Revisions rolled out after the first (status.revision.currentNumber - 1; serving an old revision again counts)",
  },
  mlmodel_rolling_out: { type: "gauge", help: "1 while a new revision is rolling out and not yet ready" },
  mlmodel_rolled_back: {
    type: "gauge",
    help: "1 while the operator serves the last ready revision because the spec's revision failed (RolledBack condition)",
  },
  mlmodel_canary_traffic_percent: {
    type: "gauge",
    help: "Percent of the traffic the canary revision serves now (0 without a canary)",
  },
} as const;

export type ModelMetric = keyof typeof modelMetricFamilies;

export interface Sample {
  metric: ModelMetric;
  labels: Record<string, string>;
  value: number;
}

function seconds(from: string | undefined, to: string): number | undefined {
  if (!from) return undefined;
  const start = Date.parse(from);
  const end = Date.parse(to);
  if (Number.isNaN(start) || Number.isNaN(end)) return undefined;
  return Math.max(0, (end - start) / 1000);
}

function desiredReplicas(model: Readonly<MLModel>): number | undefined {
  const spec = model.spec;
  if (!spec.autoscaling) return spec.replicas ?? 1;
  return spec.autoscaling.minReplicas === 0 ? 0 : undefined;
}

/** One model's samples at `now` (download seconds run on while a download runs). */
export function modelSamples(model: Readonly<MLModel>, now: Date): Sample[] {
  const id = { namespace: model.metadata.namespace ?? "", name: model.metadata.name ?? "" };
  const status = model.status ?? {};
  const samples: Sample[] = [];
  const add = (metric: ModelMetric, value: number | undefined) => {
    if (value !== undefined) samples.push({ metric, labels: id, value });
  };
  const current = status.phase ?? "Unknown";
  for (const phase of phases)
    samples.push({ metric: "mlmodel_phase", labels: { ...id, phase }, value: phase === current ? 1 : 0 });

  add("mlmodel_replicas_desired", desiredReplicas(model));
  add("mlmodel_replicas", status.replicas ?? 0);
  add("mlmodel_replicas_ready", status.readyReplicas ?? 0);

  const download = status.download;
  if (download) {
    add("mlmodel_download_bytes_done", download.bytesDone ?? 0);
    add("mlmodel_download_bytes_total", download.bytesTotal);
    // A download that ended runs to its end (or its last report); one still running, to now.
    const ended = download.phase === "Complete" || download.phase === "Failed" || download.finishedAt;
    const end = ended ? (download.finishedAt ?? download.updatedAt) : now.toISOString();
    if (end) add("mlmodel_download_seconds", seconds(download.startedAt, end));
    add("mlmodel_download_failed", download.phase === "Failed" || download.jobState === "Failed" ? 1 : 0);
  }

  const revision = status.revision;
  if (revision?.currentNumber !== undefined) {
    add("mlmodel_revision_number", revision.currentNumber);
    add("mlmodel_rollouts_total", Math.max(0, revision.currentNumber - 1));
  }
  add("mlmodel_rolling_out", revision?.rollingOut ? 1 : 0);
  const rolledBack = status.conditions?.some((c) => c.type === "RolledBack" && c.status === "True");
  add("mlmodel_rolled_back", rolledBack ? 1 : 0);
  const canary = revision?.serving?.find((s) => s.role === "Canary");
  add("mlmodel_canary_traffic_percent", canary?.trafficPercent ?? 0);
  return samples;
}

/**
 * Registers the per-model families in `registry`, read from `models` at each scrape. The first
 * family's collect fills them all (a registry collects its metrics in the order they were
 * registered), so one scrape reads the cache once.
 */
export function registerModelMetrics(
  registry: Registry,
  models: Store<MLModel>,
  now: () => Date = () => new Date(),
): void {
  const registers = [registry];
  const families = new Map<ModelMetric, PromClient.Gauge<string> | PromClient.Counter<string>>();
  const names = Object.keys(modelMetricFamilies) as ModelMetric[];
  const collectAll = () => {
    for (const family of families.values()) family.reset();
    const at = now();
    for (const model of models.list()) {
      for (const sample of modelSamples(model, at)) {
        const family = families.get(sample.metric)!;
        if (family instanceof Gauge) family.set(sample.labels, sample.value);
        else (family as PromClient.Counter<string>).inc(sample.labels, sample.value);
      }
    }
  };
  for (const [index, name] of names.entries()) {
    const { type, help } = modelMetricFamilies[name];
    const labelNames = name === "mlmodel_phase" ? ["namespace", "name", "phase"] : ["namespace", "name"];
    const collect = index === 0 ? collectAll : undefined;
    families.set(
      name,
      type === "gauge"
        ? new Gauge({ name, help, labelNames, registers, ...(collect ? { collect } : {}) })
        : new Counter({ name, help, labelNames, registers }),
    );
  }
}
