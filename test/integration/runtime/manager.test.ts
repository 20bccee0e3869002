/**
 * Manager on the real control plane: /readyz fails until caches sync, /metrics carries
 * controller-runtime's names, reconciles happen, graceful shutdown releases the lease.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import {
  builtinKinds,
  KubeClient,
  type KubeObject,
  Manager,
  type ResourceKind,
} from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const log = pino({ level: process.env["LOG_LEVEL"] ?? "silent" });

async function get(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text() };
}

describe("Manager (real control plane)", () => {
  let ns: TestNamespace;
  const client = KubeClient.fromKubeConfig(kubeConfig());
  const group = `rt${randomBytes(3).toString("hex")}.test.mlmodel.dev`;
  const Widget: ResourceKind = { group, version: "v1", kind: "Widget", plural: "widgets", namespaced: true };

  before(async () => {
    ns = await createNamespace("rt-mgr");
  });
  after(async () => {
    await client.delete(builtinKinds.CustomResourceDefinition, { name: `widgets.${group}` }).catch(() => {});
    await ns.delete();
  });

  it("fails /readyz until every cache has synced, serves metrics, reconciles, shuts down and releases its lease", async () => {
    // The heap reclaimer looks every 100 ms and, with no growth asked for, reclaims at every
    // quiet look: each reclaim records whether the caches had synced and what was reconciled.
    const reclaims: { synced: boolean; reconciles: number }[] = [];
    const heap = {
      heldBytes: () => 0,
      reclaim: () =>
        reclaims.push({
          synced: mgr.cachesSynced(),
          reconciles: [...reconciled.values()].reduce((a, b) => a + b, 0),
        }),
    };
    const mgr: Manager = new Manager({
      kubeConfig: kubeConfig(),
      namespaces: [ns.name],
      metricsBindAddress: "127.0.0.1:0",
      healthProbeBindAddress: "127.0.0.1:0",
      leaderElection: { name: "rt-mgr-test", namespace: ns.name },
      logger: log,
      shutdownTimeoutMs: 5000,
      reclaimHeapWhenQuiet: { intervalMs: 100, growthBytes: 0, heap },
    });
    // A cache of a kind whose CRD does not exist yet: its list fails (404) until we install it.
    mgr.cache(Widget);
    const reconciled = new Map<string, number>();
    let failedOnce = false;
    mgr
      .controller("cm")
      .for(builtinKinds.ConfigMap)
      .reconcile(async (ctx) => {
        reconciled.set(ctx.request.name, (reconciled.get(ctx.request.name) ?? 0) + 1);
        if (ctx.request.name === "flaky" && !failedOnce) {
          failedOnce = true;
          throw new Error("first attempt fails on purpose");
        }
        const cm = ctx.cache(builtinKinds.ConfigMap).get(ctx.request);
        if (cm) ctx.recorder.event(cm, "Normal", "Seen", "seen by the test controller");
      });
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    const health = await waitFor("probe server", async () => mgr.addresses.health);
    const metricsAddr = mgr.addresses.metrics!;

    assert.equal((await get(`http://${health}/healthz`)).status, 200);
    const notReady = await waitFor("readyz to name the unsynced Widget cache", async () => {
      const r = await get(`http://${health}/readyz`);
      return r.body.includes("Widget") ? r : undefined;
    });
    assert.equal(notReady.status, 500);
    assert.match(notReady.body, /caches not synced: Widget\.rt[0-9a-f]+\.test\.mlmodel\.dev/);

    await client.create(builtinKinds.CustomResourceDefinition, {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: `widgets.${group}` },
      spec: {
        group,
        scope: "Namespaced",
        names: { kind: "Widget", plural: "widgets" },
        versions: [
          {
            name: "v1",
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
          },
        ],
      },
    } as KubeObject);
    await waitFor(
      "readyz 200 after the CRD exists",
      async () => (await get(`http://${health}/readyz`)).status === 200,
      {
        timeoutMs: 90_000,
      },
    );

    for (const name of ["a", "b", "flaky"]) {
      await client.create(builtinKinds.ConfigMap, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name, namespace: ns.name },
        data: { k: "v" },
      });
    }
    await waitFor(
      "all three reconciled, flaky twice",
      async () => (reconciled.get("flaky") ?? 0) >= 2 && reconciled.has("a") && reconciled.has("b"),
    );
    await waitFor("a heap reclaim once the reconciles are done", async () =>
      reclaims.some((r) => r.reconciles >= 4),
    );
    assert.deepEqual(
      reclaims.filter((r) => !r.synced),
      [],
      "no reclaim while a cache had not synced (the Widget CRD was missing)",
    );
    assert.equal(mgr.isLeader, true);

    const metrics = (await get(`http://${metricsAddr}/metrics`)).body;
    for (const name of [
      'controller_runtime_reconcile_total{controller="cm",result="success"}',
      'controller_runtime_reconcile_total{controller="cm",result="error"}',
      "controller_runtime_reconcile_time_seconds_bucket",
      'controller_runtime_reconcile_errors_total{controller="cm"} 1',
      'workqueue_depth{name="cm",controller="cm"}',
      'workqueue_adds_total{name="cm",controller="cm"}',
      "workqueue_queue_duration_seconds_bucket",
      "workqueue_work_duration_seconds_bucket",
      'workqueue_retries_total{name="cm",controller="cm"} 1',
      'leader_election_master_status{name="rt-mgr-test"} 1',
      "heap_reclaims_total ",
      'rest_client_requests_total{code="200",method="GET",verb="list"}',
      'rest_client_requests_total{code="404",method="GET",verb="list"}',
      'watch_events_total{cache="ConfigMap",type="ADDED"}',
    ]) {
      assert.ok(metrics.includes(name), `/metrics has ${name}`);
    }

    await waitFor("the recorder's events", async () => {
      const events = await client.list(builtinKinds.Event, { namespace: ns.name });
      return events.items.some(
        (e) => e["reason"] === "Seen" && e["reportingController"] === "mlmodel-runtime",
      );
    });

    ac.abort();
    await running;
    const lease = await client.get<KubeObject & { spec?: { holderIdentity?: string } }>(builtinKinds.Lease, {
      namespace: ns.name,
      name: "rt-mgr-test",
    });
    assert.equal(lease?.spec?.holderIdentity, undefined, "the lease was released on shutdown");
    await assert.rejects(fetch(`http://${health}/healthz`), "servers are closed after shutdown");
  });
});
