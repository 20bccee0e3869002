// test-needs: real-node, images, prometheus
/**
 * A real Prometheus scrapes a model's real MLServer pod with the chart's own scrape jobs
 * (prometheusConfig in src/cluster/prometheus.ts: monitoring/scrape-configs.yaml, pointed at
 * the run's real-node cluster through its admin kubeconfig). Prometheus runs on the host and
 * reaches the pod at its pod IP on MLServer's metrics port, as a Prometheus in the cluster would.
 *
 * What must hold: the chart's MLServer job finds the model's serving pod by the operator's labels
 * and the runtime's image (no annotation on the pod) and labels the target with the model's
 * namespace, name, revision and pod; MLServer's prediction counter, read through Prometheus's
 * HTTP API, rises by exactly the predictions sent through the model's Service.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { V1Pod } from "@kubernetes/client-node";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { stopProcess } from "../../../src/cluster/process.ts";
import { type RunningPrometheus, startPrometheus } from "../../../src/cluster/prometheus.ts";
import { inferV2, type SampleModel, type ServiceEndpoint } from "../../../src/images/sample-model.ts";
import { waitFor } from "../../harness/cluster.ts";
import { podsOf, waitForPhase } from "../operator/helpers.ts";
import {
  applyCaSecret,
  applyModel,
  endpointOf,
  firstAnswer,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
} from "../realnode/fixture.ts";
import { query, type Sample } from "./prometheus-api.ts";

/** The chart's job for MLServer serving pods (deploy/helm/mlmodel-operator/monitoring/scrape-configs.yaml). */
const mlserverJob = "mlmodel-serving-mlserver";
/** MLServer's count of successful inference requests (a prometheus_client Counter: `_total`). */
const successCounter = "model_infer_request_success_total";
/** MLSERVER_METRICS_PORT of the built-in mlserver runtime. */
const metricsPort = 8082;
const predictions = 30;

/** The sum of `metric`'s samples for MLServer model `model` in a /metrics text. */
function counterIn(text: string, metric: string, model: string): number {
  return text
    .split("\n")
    .filter((line) => line.startsWith(`${metric}{`) && line.includes(`model="${model}"`))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
}

describe("Prometheus scrapes a model's real MLServer pod with the chart's scrape jobs", () => {
  let bed: RealNodeBed;
  let sample: SampleModel & { uri: string };
  let endpoint: ServiceEndpoint;
  let prom: RunningPrometheus;
  let pods: V1Pod[];
  const work = mkdtempSync(join(tmpdir(), "mlmodel-serving-metrics-"));

  before(async () => {
    bed = await realNodeBed("rn-metrics");
    sample = await publishSample(bed, "iris.tgz");
    await applyCaSecret(bed);
    const model = sklearnModel("iris", sample);
    await applyModel(bed, model);
    const ready = await waitForPhase(bed.admin, bed.ns.name, "iris", "Ready", undefined, 600_000);
    endpoint = await endpointOf(bed, ready as MLModel);
    assert.deepEqual((await firstAnswer(endpoint, sample)).data, sample.predictions);
    pods = (await podsOf(bed.admin, bed.ns.name, "iris")) as unknown as V1Pod[];
    assert.ok(pods.length >= 1 && pods.every((p) => p.status?.podIP), "the model's pods and their IPs");
    prom = await startPrometheus(work, bed.cluster.kubeconfig);
  });

  after(async () => {
    if (prom) await stopProcess(prom.record);
    await removeRealNodeBed(bed ?? {});
    rmSync(work, { recursive: true, force: true });
  });

  /** What the model's pods count now, read from each pod's own /metrics. */
  async function countedByPods(): Promise<number> {
    let total = 0;
    for (const pod of pods) {
      const res = await fetch(`http://${pod.status!.podIP}:${metricsPort}/metrics`, {
        signal: AbortSignal.timeout(5000),
      });
      assert.equal(res.status, 200, `${pod.metadata?.name}'s metrics`);
      total += counterIn(await res.text(), successCounter, "iris");
    }
    return total;
  }

  it("finds the serving pod by the chart's MLServer job and scrapes it, labelled with the model's namespace, name, revision and pod", async () => {
    const selector = `job="${mlserverJob}",namespace="${bed.ns.name}",mlmodel="iris"`;
    let last: Sample[] = [];
    const up = await waitFor(
      "Prometheus to scrape every serving pod of the model",
      async () => {
        last = await query(prom, `up{${selector}}`);
        return last.length === pods.length && last.every((s) => s.value[1] === "1") ? last : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1000, describe: async () => JSON.stringify(last) },
    );
    assert.deepEqual(
      up.map((s) => s.metric.pod).sort(),
      pods.map((p) => p.metadata?.name).sort(),
      "one target per serving pod, named by the pod",
    );
    for (const s of up) {
      assert.equal(
        s.metric.instance,
        `${pods.find((p) => p.metadata?.name === s.metric.pod)!.status!.podIP}:${metricsPort}`,
      );
      assert.equal(
        s.metric.revision,
        pods.find((p) => p.metadata?.name === s.metric.pod)!.metadata!.labels![
          "serving.mlmodel.dev/revision"
        ],
      );
      assert.ok(s.metric.revision, "the target names the model's revision");
    }
    // The pod carries no prometheus.io annotation: the annotation job does not scrape it twice.
    assert.deepEqual(await query(prom, `up{job="mlmodel-serving-annotated",namespace="${bed.ns.name}"}`), []);
  });

  it("shows MLServer's prediction counter rising by exactly the predictions sent through the Service", async () => {
    const counterBefore = await countedByPods();
    for (let i = 0; i < predictions; i++) {
      const answer = await inferV2(endpoint, "iris", sample.inputs);
      assert.equal(answer.status, 200, `prediction ${i}`);
      assert.deepEqual(answer.data, sample.predictions);
    }
    const counted = await countedByPods();
    assert.equal(counted, counterBefore + predictions, "the pods counted every prediction, and only them");

    const promql = `sum by (namespace, mlmodel) (${successCounter}{job="${mlserverJob}",namespace="${bed.ns.name}",mlmodel="iris",model="iris"})`;
    let last: Sample[] = [];
    const summed = await waitFor(
      `Prometheus to scrape the counter at ${counted}`,
      async () => {
        last = await query(prom, promql);
        return last.length === 1 && Number(last[0]!.value[1]) === counted ? last[0] : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1000, describe: async () => JSON.stringify(last) },
    );
    assert.deepEqual(summed.metric, { namespace: bed.ns.name, mlmodel: "iris" });

    // Each series says where it came from without a lookup: the model, its namespace, its pod.
    const series = await query(prom, `${successCounter}{namespace="${bed.ns.name}",mlmodel="iris"}`);
    assert.ok(series.length >= 1, "the counter's series");
    for (const s of series) {
      assert.equal(s.metric.job, mlserverJob);
      assert.equal(s.metric.model, "iris", "MLServer's own label: the model it served");
      assert.ok(
        pods.some((p) => p.metadata?.name === s.metric.pod),
        `${s.metric.pod} is a pod of the model`,
      );
    }
    console.log(
      `# ${successCounter} of ${bed.ns.name}/iris: ${counterBefore} before, ${counted} after ${predictions} predictions, as the pods and Prometheus count it (${pods.length} pod(s))`,
    );
  });
});
