import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { describe, it } from "node:test";
import type * as PromClient from "prom-client";
import type { MLModel, MLModelSpec, MLModelStatus } from "../../../src/api/mlmodel.ts";
import {
  type ModelMetric,
  modelSamples,
  phases,
  registerModelMetrics,
} from "../../../src/operator/metrics.ts";
import { MemoryStore } from "../../../src/runtime/index.ts";
import { model } from "./fixtures.ts";

const Registry = createRequire(import.meta.url)("prom-client/lib/registry.js") as typeof PromClient.Registry;
const now = new Date("2026-11-27T12:00:00Z");
const spec: MLModelSpec = { model: { uri: "s3://b/m", format: "tensorflow" } };

function withStatus(status: MLModelStatus | undefined, specPatch: Partial<MLModelSpec> = {}): MLModel {
  return { ...model({ ...spec, ...specPatch }), ...(status ? { status } : {}) };
}

/** The value of one unlabelled-by-phase family, or undefined when the model has no sample. */
function value(m: MLModel, metric: ModelMetric): number | undefined {
  return modelSamples(m, now).find((s) => s.metric === metric)?.value;
}

describe("modelSamples", () => {
  const table: { name: string; model: MLModel; expect: Partial<Record<ModelMetric, number | undefined>> }[] =
    [
      {
        name: "a new model without status: phase Unknown, 1 desired, nothing downloaded yet",
        model: withStatus(undefined),
        expect: {
          mlmodel_replicas_desired: 1,
          mlmodel_replicas: 0,
          mlmodel_replicas_ready: 0,
          mlmodel_download_bytes_done: undefined,
          mlmodel_revision_number: undefined,
          mlmodel_rolled_back: 0,
          mlmodel_canary_traffic_percent: 0,
        },
      },
      {
        name: "downloading: bytes so far, the size, seconds running on to now",
        model: withStatus({
          phase: "Downloading",
          download: {
            phase: "Downloading",
            bytesDone: 400,
            bytesTotal: 1000,
            startedAt: "2026-11-27T11:59:30Z",
            updatedAt: "2026-11-27T11:59:50Z",
          },
        }),
        expect: {
          mlmodel_download_bytes_done: 400,
          mlmodel_download_bytes_total: 1000,
          mlmodel_download_seconds: 30,
          mlmodel_download_failed: 0,
        },
      },
      {
        name: "a download of unknown size has no total",
        model: withStatus({
          phase: "Downloading",
          download: { bytesDone: 5, startedAt: "2026-11-27T11:59:59Z" },
        }),
        expect: { mlmodel_download_bytes_total: undefined, mlmodel_download_seconds: 1 },
      },
      {
        name: "a finished download: its duration, frozen",
        model: withStatus({
          phase: "Ready",
          readyReplicas: 3,
          replicas: 3,
          download: {
            phase: "Complete",
            bytesDone: 1000,
            bytesTotal: 1000,
            startedAt: "2026-11-27T11:00:00Z",
            finishedAt: "2026-11-27T11:02:05Z",
          },
          revision: { current: "abc", currentNumber: 4 },
        }),
        expect: {
          mlmodel_download_seconds: 125,
          mlmodel_replicas_ready: 3,
          mlmodel_revision_number: 4,
          mlmodel_rollouts_total: 3,
          mlmodel_rolling_out: 0,
        },
      },
      {
        name: "a download that ended without a time of its end has no duration (it does not run on)",
        model: withStatus({
          phase: "Deploying",
          download: { phase: "Complete", startedAt: "2026-11-27T11:00:00Z" },
        }),
        expect: { mlmodel_download_seconds: undefined, mlmodel_download_bytes_done: 0 },
      },
      {
        name: "a failed download (the Job failed)",
        model: withStatus({
          phase: "Failed",
          download: { jobState: "Failed", startedAt: "2026-11-27T11:59:00Z" },
        }),
        expect: { mlmodel_download_failed: 1 },
      },
      {
        name: "rolled back: the RolledBack condition, a rollout no longer running",
        model: withStatus({
          phase: "Ready",
          conditions: [
            {
              type: "RolledBack",
              status: "True",
              reason: "DownloadFailed",
              message: "m",
              lastTransitionTime: "2026-11-27T11:00:00Z",
            },
          ],
          revision: { current: "old", currentNumber: 1, failed: { revision: "new", number: 2 } },
        }),
        expect: { mlmodel_rolled_back: 1, mlmodel_rollouts_total: 0 },
      },
      {
        name: "a canary serving 20% during a rollout",
        model: withStatus({
          phase: "Deploying",
          revision: {
            currentNumber: 2,
            rollingOut: "new",
            serving: [
              { revision: "old", role: "Stable", trafficPercent: 80 },
              { revision: "new", role: "Canary", trafficPercent: 20 },
            ],
          },
        }),
        expect: { mlmodel_canary_traffic_percent: 20, mlmodel_rolling_out: 1 },
      },
      {
        name: "autoscaled: no desired count (the autoscaler decides)",
        model: withStatus({ phase: "Ready" }, { autoscaling: { maxReplicas: 4 } }),
        expect: { mlmodel_replicas_desired: undefined },
      },
      {
        name: "autoscaled to zero: 0 desired",
        model: withStatus({ phase: "Ready" }, { autoscaling: { minReplicas: 0, maxReplicas: 4 } }),
        expect: { mlmodel_replicas_desired: 0 },
      },
      {
        name: "fixed replicas",
        model: withStatus({ phase: "Ready" }, { replicas: 5 }),
        expect: { mlmodel_replicas_desired: 5 },
      },
    ];
  for (const row of table) {
    it(row.name, () => {
      for (const [metric, expected] of Object.entries(row.expect))
        assert.equal(value(row.model, metric as ModelMetric), expected, metric);
    });
  }

  it("sets exactly one phase to 1, labelled with the model", () => {
    for (const phase of ["Downloading", "Ready", undefined] as const) {
      const samples = modelSamples(withStatus(phase ? { phase } : undefined), now).filter(
        (s) => s.metric === "mlmodel_phase",
      );
      assert.deepEqual(
        samples.map((s) => s.labels.phase),
        [...phases],
      );
      assert.deepEqual(
        samples.filter((s) => s.value === 1).map((s) => s.labels),
        [{ namespace: "ml", name: "resnet", phase: phase ?? "Unknown" }],
      );
    }
  });
});

describe("registerModelMetrics", () => {
  it("reads the store at each scrape: a model's change and removal show at the next", async () => {
    const registry = new Registry();
    const store = new MemoryStore<MLModel>();
    registerModelMetrics(registry, store, () => now);
    store.apply(withStatus({ phase: "Downloading", download: { bytesDone: 10, bytesTotal: 100 } }));
    let text = await registry.metrics();
    assert.match(text, /mlmodel_phase\{namespace="ml",name="resnet",phase="Downloading"\} 1/);
    assert.match(text, /mlmodel_download_bytes_done\{namespace="ml",name="resnet"\} 10/);
    assert.match(text, /# TYPE mlmodel_rollouts_total counter/);

    store.apply(
      withStatus({ phase: "Ready", readyReplicas: 1, download: { bytesDone: 100, bytesTotal: 100 } }),
    );
    text = await registry.metrics();
    assert.match(text, /mlmodel_phase\{namespace="ml",name="resnet",phase="Ready"\} 1/);
    assert.match(text, /mlmodel_phase\{namespace="ml",name="resnet",phase="Downloading"\} 0/);
    assert.match(text, /mlmodel_replicas_ready\{namespace="ml",name="resnet"\} 1/);

    store.delete(withStatus(undefined));
    text = await registry.metrics();
    assert.doesNotMatch(text, /name="resnet"/);
  });
});
