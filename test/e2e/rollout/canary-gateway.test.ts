/**
 * A canary split by Gateway API HTTPRoute weights, end to end, on a PRIVATE control plane (the
 * test needs the Gateway API CRDs absent first, which the run's shared cluster cannot promise):
 * the operator under its own generated RBAC, a model at 10 % through a Gateway.
 *
 * 1. Without the CRDs the canary waits (GatewayAPIUnavailable, a Warning Event), the stable
 *    revision serves every replica and no canary child exists.
 * 2. The CRDs installed: within a discovery poll the canary starts; the route first sends
 *    everything to the stable Service, and 90/10 only once the canary's replica is ready; the
 *    stable Deployment keeps its 5 replicas; status says GatewayAPI and the route's shares.
 * 3. Promoted: the route sends to the model's Service, the per-revision Services and the canary
 *    Deployment go; the route stays (it is the model's entry through the Gateway).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { V1Deployment } from "@kubernetes/client-node";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { installGatewayApiCrds } from "../../../src/cluster/gateway-api.ts";
import { httpRouteKind } from "../../../src/operator/canary/desired.ts";
import { labels } from "../../../src/operator/names.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";
import { adminClient, type RunningOperator, startOperator } from "../operator/helpers.ts";
import {
  applyModel,
  expectCanaryEvents,
  labelled,
  mlmodel,
  patchSpec,
  servingLines,
  waitModel,
} from "./canary-helpers.ts";

const ns = "gw";
const name = "routed";
const spec = (tag: string): MLModelSpec => ({
  image: `registry.example.com/team/server:${tag}`,
  model: { path: "/models/m" },
  replicas: 5,
  rollout: {
    canary: {
      trafficPercent: 10,
      trafficRouting: {
        gatewayAPI: { parentRefs: [{ name: "public", namespace: "infra" }], hostnames: ["m.example.com"] },
      },
    },
  },
});

type Route = KubeObject & {
  spec: { rules: { backendRefs: { name: string; port: number; weight: number }[] }[] };
};

describe("a canary split by HTTPRoute weights (private cluster)", () => {
  let cluster: PrivateCluster;
  let admin: KubeClient;
  let operator: RunningOperator | undefined;
  let S = "";
  let X = "";

  before(async () => {
    cluster = await startPrivateCluster("canary-gw");
    admin = await adminClient(cluster.kubeConfig());
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels: { "pod-security.kubernetes.io/enforce": "restricted" } },
    });
    await waitFor("the namespace's default ServiceAccount", async () =>
      admin.get(builtinKinds.ServiceAccount, { namespace: ns, name: "default" }),
    );
    operator = await startOperator(ns, { adminKc: cluster.kubeConfig(), servedPollIntervalMs: 2000 });
  });

  after(async () => {
    await operator?.stop();
    await cluster?.stop();
  });

  const route = () => admin.get<Route>(httpRouteKind, { namespace: ns, name });
  const backends = (r: Route | undefined) =>
    r?.spec.rules[0]?.backendRefs.map((b) => `${b.name}:${b.port}=${b.weight}`) ?? [];
  const deployment = (n: string) =>
    admin.get<KubeObject & V1Deployment>(builtinKinds.Deployment, { namespace: ns, name: n });

  it("without the Gateway API CRDs the canary waits and the stable revision serves alone", async () => {
    await applyModel(admin, ns, name, spec("1"));
    S = (await waitModel(admin, ns, name, "Ready", (m) => m.status?.phase === "Ready")).status!.revision!
      .current!;
    await patchSpec(admin, ns, name, { image: "registry.example.com/team/server:2" });
    const waiting = await waitModel(
      admin,
      ns,
      name,
      "canary waiting",
      (m) => m.status?.canary?.phase === "Waiting",
    );
    X = waiting.status!.canary!.revision!;
    assert.equal(waiting.status?.canary?.reason, "GatewayAPIUnavailable");
    assert.match(waiting.status?.canary?.message ?? "", /install the Gateway API CRDs/);
    assert.deepEqual([waiting.status?.phase, waiting.status?.revision?.lastReady], ["Ready", S]);
    assert.deepEqual(servingLines(waiting), [`Stable ${S} 5/5 100%`]);
    assert.deepEqual((await labelled(admin, ns, name)).Deployment, [name], "no canary Deployment");
    await expectCanaryEvents(admin, ns, name, ["CanaryWaiting"]);
    const status = mlmodel(["status", name, "-n", ns], cluster.kubeconfigPath);
    assert.match(status.stdout, /r1 5\/5 100% · step 1\/1 Waiting/);
  });

  it("with the CRDs installed the canary starts: 100/0 until its replica is ready, then exactly 90/10", async () => {
    // Every version of the route, from a watch: a poll can miss the 100/0 that lasts only until
    // the canary's kwok pod is ready (half a second). Until the CRDs exist the watch is refused
    // and tried again; it starts long before the operator's discovery poll finds them.
    const weightsSeen: string[] = [];
    const watching = new AbortController();
    const poller = (async () => {
      let resourceVersion: string | undefined;
      while (!watching.signal.aborted) {
        try {
          const opts = { namespace: ns, fieldSelector: `metadata.name=${name}`, allowWatchBookmarks: true };
          for await (const event of admin.watch<Route>(
            httpRouteKind,
            { ...opts, ...(resourceVersion ? { resourceVersion } : {}) },
            watching.signal,
          )) {
            resourceVersion = event.object.metadata.resourceVersion;
            if (event.type === "BOOKMARK") continue;
            const b = backends(event.object).join(" ");
            if (b && weightsSeen.at(-1) !== b) weightsSeen.push(b);
          }
        } catch {
          if (!watching.signal.aborted) await new Promise((r) => setTimeout(r, 100));
        }
      }
    })();
    try {
      await installGatewayApiCrds(cluster.kubeconfigPath);
      const split = await waitModel(admin, ns, name, "canary paused at 10 %", (m) => {
        const [s, c] = m.status?.revision?.serving ?? [];
        return m.status?.canary?.phase === "Paused" && c?.trafficPercent === 10 && s?.readyReplicas === 5;
      });
      const c = split.status!.canary!;
      assert.deepEqual([c.mode, c.trafficPercent, c.effectivePercent, c.exact], ["GatewayAPI", 10, 10, true]);
      assert.deepEqual(servingLines(split), [`Stable ${S} 5/5 90%`, `Canary ${X} 1/1 10%`]);
      assert.deepEqual(backends(await route()), [`${name}-stable:8080=90`, `${name}-canary:8080=10`]);
      assert.deepEqual(
        [(await deployment(name))?.spec?.replicas, (await deployment(`${name}-canary`))?.spec?.replicas],
        [5, 1],
        "the stable keeps every replica; the canary carries ceil(10 % of 5)",
      );
      const r = await route();
      const parents = (r?.spec as { parentRefs?: { name: string; namespace?: string }[] } | undefined)
        ?.parentRefs;
      assert.deepEqual(
        parents?.map((p) => `${p.namespace}/${p.name}`),
        ["infra/public"],
      );
      assert.equal(r?.metadata.ownerReferences?.[0]?.name, name);
    } finally {
      watching.abort();
      await poller;
    }
    assert.equal(
      weightsSeen[0],
      `${name}-stable:8080=100`,
      `the canary's weight waits for its replicas: ${weightsSeen}`,
    );
    assert.ok(!weightsSeen.some((w) => w.includes("canary:8080=") && !w.endsWith("=10")), `${weightsSeen}`);
    await expectCanaryEvents(admin, ns, name, ["CanaryWaiting", "CanaryStarted", "CanaryPaused"]);
  });

  it("promoted: the route sends to the model's Service, the canary's children go, the route stays", async () => {
    assert.equal(mlmodel(["promote", name, "-n", ns], cluster.kubeconfigPath).status, 0);
    const done: MLModel = await waitModel(admin, ns, name, "promoted", (m) => {
      const serving = m.status?.revision?.serving ?? [];
      return (
        m.status?.canary?.phase === "Promoted" && serving.length === 1 && serving[0]?.readyReplicas === 5
      );
    });
    assert.equal(done.status?.revision?.lastReady, X);
    assert.deepEqual(backends(await route()), [`${name}:8080=100`]);
    await waitFor("only the model's own children left", async () => {
      const now = await labelled(admin, ns, name);
      return now.Deployment?.join() === name && now.Service?.join() === name ? now : undefined;
    });
    assert.deepEqual((await labelled(admin, ns, name)).HTTPRoute, [name]);
    assert.equal((await deployment(name))?.spec?.template.metadata?.labels?.[labels.revision], X);
    await expectCanaryEvents(admin, ns, name, [
      "CanaryWaiting",
      "CanaryStarted",
      "CanaryPaused",
      "CanaryPromoting",
      "CanaryPromoted",
    ]);
  });
});
