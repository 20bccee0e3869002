// test-needs: prometheus
/**
 * A real Prometheus scrapes the operator, set up as `mlmodel cluster up --monitoring` sets it
 * up (src/cluster/prometheus.ts: the chart's scrape jobs and alert rules, the host operator as
 * a file target), and the test reads what it scraped through Prometheus's HTTP API: a model's
 * metrics change as it goes Downloading -> Ready on kwok nodes.
 *
 * The model is held in Downloading by its claim: the download pod waits for a volume until the
 * test provides one (the local control plane has no provisioner), then kwok runs the Job to
 * completion and the serving pods to Ready.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import { stopProcess } from "../../../src/cluster/process.ts";
import {
  type RunningPrometheus,
  startPrometheus,
  writeOperatorTargets,
} from "../../../src/cluster/prometheus.ts";
import { install } from "../../../src/install/install.ts";
import { createOperator } from "../../../src/operator/run.ts";
import { builtinKinds, type KubeClient, type Manager } from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { adminClient, applyObjects, provideVolume, readSample, waitForPhase } from "../operator/helpers.ts";
import { query, type Sample } from "./prometheus-api.ts";

interface RangeSeries {
  metric: Record<string, string>;
  values: [number, string][];
}

async function queryRange(prom: RunningPrometheus, promql: string, start: number): Promise<RangeSeries[]> {
  const params = new URLSearchParams({
    query: promql,
    start: String(start),
    end: String(Date.now() / 1000),
    step: "1",
  });
  const res = await fetch(`${prom.url}/api/v1/query_range?${params}`);
  const body = (await res.json()) as { status: string; error?: string; data: { result: RangeSeries[] } };
  if (body.status !== "success") throw new Error(`query_range ${promql}: ${body.error}`);
  return body.data.result;
}

/** Waits until the query gives exactly one sample with this value; returns it. */
function waitForValue(prom: RunningPrometheus, promql: string, value: string): Promise<Sample> {
  let last: Sample[] = [];
  return waitFor(
    `Prometheus to answer ${promql} with ${value}`,
    async () => {
      last = await query(prom, promql);
      return last.length === 1 && last[0]!.value[1] === value ? last[0] : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 1000, describe: async () => JSON.stringify(last) },
  );
}

describe("Prometheus scrapes the operator with the chart's configuration", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let mgr: Manager;
  let prom: RunningPrometheus;
  const stopOperator = new AbortController();
  let operatorRun: Promise<void> | undefined;
  let volume: string | undefined;
  const work = mkdtempSync(join(tmpdir(), "mlmodel-monitoring-e2e-"));
  const startedAt = Date.now() / 1000;

  before(async () => {
    ns = await createNamespace("e2e-monitoring", { podSecurity: "restricted" });
    admin = await adminClient();
    await install(admin);
    mgr = await createOperator({
      kubeConfig: kubeConfig(),
      namespaces: [ns.name],
      metricsBindAddress: "127.0.0.1:0",
      // Its own lease in the test's namespace: leader_election_master_status turns 1.
      leaderElectionNamespace: ns.name,
      logger: pino({ level: "warn" }),
    });
    operatorRun = mgr.start(stopOperator.signal);
    const metrics = await waitFor("the operator's metrics address", async () => mgr.addresses.metrics);
    prom = await startPrometheus(work, process.env.KUBECONFIG!);
    writeOperatorTargets(work, [metrics]);
  });

  after(async () => {
    stopOperator.abort();
    await operatorRun?.catch(() => {});
    if (prom) await stopProcess(prom.record);
    await ns?.delete();
    if (volume) await admin.delete(builtinKinds.PersistentVolume, { name: volume }).catch(() => {});
    rmSync(work, { recursive: true, force: true });
  });

  it("scrapes the operator, which leads, with the chart's alert rules loaded and the no-leader alert quiet", async () => {
    await waitForValue(prom, 'up{job="mlmodel-operator"}', "1");
    await waitForValue(
      prom,
      'leader_election_master_status{job="mlmodel-operator",name="mlmodel-operator"}',
      "1",
    );
    // The rule may have gone pending on an evaluation before the first scrape that saw the
    // lease held; only an evaluation after that scrape says whether a leading operator alerts.
    const ledAt = Date.now();
    const res = await fetch(`${prom.url}/api/v1/rules`);
    const rules = (await res.json()) as {
      data: {
        groups: {
          name: string;
          rules: { name: string; health: string; state?: string; lastEvaluation?: string }[];
        }[];
      };
    };
    const group = rules.data.groups.find((g) => g.name === "mlmodel-operator");
    assert.deepEqual(group?.rules.map((r) => r.name).sort(), [
      "MLModelDownloadFailed",
      "MLModelNotReady",
      "MLModelOperatorNoLeader",
      "MLModelReconcileErrors",
      "MLModelRolledBack",
    ]);
    // Each rule evaluated without error against what was scraped.
    await waitFor("every rule to be evaluated", async () => {
      const r = (await (await fetch(`${prom.url}/api/v1/rules`)).json()) as typeof rules;
      const all = r.data.groups.flatMap((g) => g.rules);
      return all.length === 5 && all.every((x) => x.health === "ok");
    });
    const current = await waitFor(
      "the no-leader rule to be evaluated after the lease was seen held",
      async () => {
        const r = (await (await fetch(`${prom.url}/api/v1/rules`)).json()) as typeof rules;
        const rule = r.data.groups.flatMap((g) => g.rules).find((x) => x.name === "MLModelOperatorNoLeader");
        return rule?.lastEvaluation && Date.parse(rule.lastEvaluation) > ledAt ? rule : undefined;
      },
    );
    assert.equal(current.state, "inactive", "a leading operator raises no no-leader alert");
  });

  it("sees a model's metrics change as it goes Downloading -> Ready", async () => {
    const id = `namespace="${ns.name}",name="resnet"`;
    await applyObjects(admin, ns.name, readSample("mlmodel-download-then-serve.yaml"));
    await waitForPhase(admin, ns.name, "resnet", "Downloading");
    const downloading = await waitForValue(prom, `mlmodel_phase{${id},phase="Downloading"}`, "1");
    assert.equal(downloading.metric.job, "mlmodel-operator");
    assert.equal((await query(prom, `mlmodel_phase{${id},phase="Ready"}`))[0]?.value[1], "0");
    assert.equal((await query(prom, `mlmodel_replicas_ready{${id}}`))[0]?.value[1], "0");
    assert.equal((await query(prom, `mlmodel_replicas_desired{${id}}`))[0]?.value[1], "2");
    assert.equal((await query(prom, `mlmodel_download_failed{${id}}`))[0]?.value[1], "0");

    volume = await provideVolume(admin, ns.name, "resnet-model");
    await waitForPhase(admin, ns.name, "resnet", "Ready");
    await waitForValue(prom, `mlmodel_phase{${id},phase="Ready"}`, "1");
    await waitForValue(prom, `mlmodel_replicas_ready{${id}}`, "2");
    assert.equal((await query(prom, `mlmodel_phase{${id},phase="Downloading"}`))[0]?.value[1], "0");
    assert.equal((await query(prom, `sum(mlmodel_phase{${id}})`))[0]?.value[1], "1", "one phase at a time");
    assert.equal((await query(prom, `mlmodel_revision_number{${id}}`))[0]?.value[1], "1");

    // What Prometheus stored: Downloading was 1 strictly before Ready was.
    const series = await queryRange(prom, `mlmodel_phase{${id},phase=~"Downloading|Ready"} == 1`, startedAt);
    const firstAt = (phase: string) =>
      series.find((s) => s.metric.phase === phase)?.values[0]?.[0] ?? Number.POSITIVE_INFINITY;
    const lastDownloading = series.find((s) => s.metric.phase === "Downloading")?.values.at(-1)?.[0];
    assert.ok(lastDownloading !== undefined, "Downloading was stored");
    assert.ok(firstAt("Downloading") < firstAt("Ready"), JSON.stringify(series));
    assert.ok(lastDownloading < firstAt("Ready"), "never Downloading and Ready at once");
  });
});
