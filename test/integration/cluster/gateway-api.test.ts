/**
 * The Gateway API CRDs on a real control plane, and how the operator will know they are there.
 * A private cluster, because the test needs the CRDs absent first (and deletes one at the end),
 * which the run's shared cluster cannot promise.
 *
 * 1. Without the CRDs, discovery says HTTPRoute is not served, and a Manager with an optional
 *    HTTPRoute source still starts its controller (its cache is "synced": empty).
 * 2. installGatewayApiCrds: every CRD Established; discovery says served; the optional cache
 *    starts within a poll and the controller reconciles every object again, now told served.
 * 3. The HTTPRoute the canary code builds (desiredHttpRoute, weighted backendRefs) is accepted,
 *    reaches the cache, and invalid ones are rejected by the CRD's own validation.
 * 4. Installing again changes nothing; deleting the HTTPRoute CRD empties the cache and the
 *    controller hears that too.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { gatewayApiVersion, installGatewayApiCrds } from "../../../src/cluster/gateway-api.ts";
import { builtinRuntimes } from "../../../src/install/builtin-runtimes.ts";
import { desiredHttpRoute, httpRouteKind } from "../../../src/operator/canary/desired.ts";
import { canaryPlan } from "../../../src/operator/canary/steps.ts";
import { planModel } from "../../../src/operator/plan.ts";
import {
  ApiError,
  builtinKinds,
  isServed,
  KubeClient,
  type KubeObject,
  Manager,
} from "../../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";

const ns = "routes";
const tf = builtinRuntimes.find((r) => r.metadata.name === "tensorflow-serving")!;

describe("Gateway API CRDs in the local control plane", () => {
  let cluster: PrivateCluster;
  let client: KubeClient;
  let mgr: Manager;
  const stop = new AbortController();
  let managerRun: Promise<void> | undefined;
  const reconciles: { name: string; served: boolean }[] = [];

  before(async () => {
    cluster = await startPrivateCluster("gateway");
    client = KubeClient.fromKubeConfig(cluster.kubeConfig());
    await client.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns },
    });
    await client.create(builtinKinds.ConfigMap, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "primary", namespace: ns },
    });
    mgr = new Manager({
      client,
      namespaces: [ns],
      logger: pino({ level: "silent" }),
      servedPollIntervalMs: 500,
    });
    const routes = mgr.cache(httpRouteKind, { optional: true });
    mgr
      .controller("routes")
      .for(builtinKinds.ConfigMap)
      .owns(httpRouteKind, { optional: true })
      .reconcile(async (ctx) => {
        reconciles.push({ name: ctx.request.name, served: ctx.served(httpRouteKind) });
        void routes;
      });
  });

  after(async () => {
    stop.abort();
    await managerRun?.catch(() => {});
    await cluster?.stop();
  });

  it("serves no HTTPRoute before the install, and a controller watching it optionally still starts", async () => {
    assert.equal(await isServed(client, httpRouteKind), false);
    managerRun = mgr.start(stop.signal);
    await waitFor("the controller's first reconcile", async () =>
      reconciles.some((r) => r.name === "primary" && !r.served),
    );
    assert.equal(mgr.served(httpRouteKind), false);
  });

  it(`installs ${gatewayApiVersion}'s standard channel: every CRD Established, HTTPRoute served`, async () => {
    const { crds } = await installGatewayApiCrds(cluster.kubeconfigPath);
    assert.ok(crds.includes("httproutes.gateway.networking.k8s.io"), `CRDs: ${crds.join(", ")}`);
    assert.ok(crds.includes("gateways.gateway.networking.k8s.io"));
    for (const name of crds) {
      const crd = (await client.get(builtinKinds.CustomResourceDefinition, { name })) as KubeObject & {
        status?: { conditions?: { type: string; status: string }[] };
        metadata: { annotations?: Record<string, string> };
      };
      assert.ok(
        crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True"),
        `${name} Established`,
      );
      assert.equal(crd.metadata.annotations?.["gateway.networking.k8s.io/channel"], "standard");
      assert.equal(crd.metadata.annotations?.["gateway.networking.k8s.io/bundle-version"], gatewayApiVersion);
    }
    assert.equal(
      await isServed(client, httpRouteKind),
      true,
      "discovery lists httproutes in gateway.networking.k8s.io/v1",
    );
  });

  it("starts the optional cache within a poll and reconciles every object again, told it is served", async () => {
    await waitFor("the optional HTTPRoute cache to serve", async () => mgr.served(httpRouteKind));
    await waitFor("a reconcile that sees HTTPRoute served", async () =>
      reconciles.some((r) => r.name === "primary" && r.served),
    );
  });

  it("accepts the canary's weighted HTTPRoute and the cache sees it", async () => {
    const model: MLModel = {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name: "resnet", namespace: ns, uid: "uid-1", generation: 1 },
      spec: { model: { uri: "s3://b/resnet", format: "tensorflow" } },
    };
    const plan = planModel(model, { ref: "ClusterServingRuntime/tensorflow-serving", spec: tf.spec });
    const gateway = canaryPlan({
      rollout: {
        canary: {
          trafficPercent: 10,
          trafficRouting: {
            gatewayAPI: {
              parentRefs: [{ name: "public", namespace: "infra" }],
              hostnames: ["resnet.example.com"],
            },
          },
        },
      },
    })!.gateway!;
    // A ConfigMap stands in for the owner (the MLModel CRD is not installed on this cluster).
    const owner = await client.get(builtinKinds.ConfigMap, { namespace: ns, name: "primary" });
    const route = desiredHttpRoute(
      plan,
      { apiVersion: "v1", kind: "ConfigMap", name: "primary", uid: owner!.metadata.uid!, controller: true },
      gateway,
      [
        { service: "resnet-stable", weight: 90, port: plan.restPort },
        { service: "resnet-canary", weight: 10, port: plan.restPort },
      ],
    )!;
    const applied = (await client.apply(httpRouteKind, route, {
      fieldManager: "test",
      force: true,
    })) as KubeObject & {
      spec: { rules: { backendRefs: { name: string; weight: number; port: number }[] }[] };
    };
    assert.deepEqual(
      applied.spec.rules[0]?.backendRefs.map((b) => [b.name, b.weight, b.port]),
      [
        ["resnet-stable", 90, 8501],
        ["resnet-canary", 10, 8501],
      ],
    );
    await waitFor("the HTTPRoute in the optional cache", async () =>
      mgr.cache(httpRouteKind, { optional: true }).get({ namespace: ns, name: "resnet" }),
    );
  });

  // [what, a wrong backendRef, words of the API server's answer]
  const invalid: [string, Record<string, unknown>, RegExp][] = [
    [
      "a Service backend without a port",
      { name: "resnet-stable", weight: 90 },
      /Must have port for Service reference/,
    ],
    [
      "a negative weight",
      { name: "resnet-stable", port: 8501, weight: -1 },
      /weight .*greater than or equal to 0/,
    ],
    [
      "a weight above 1,000,000",
      { name: "resnet-stable", port: 8501, weight: 1_000_001 },
      /less than or equal to 1000000/,
    ],
  ];
  for (const [what, backendRef, words] of invalid) {
    it(`rejects an HTTPRoute with ${what}`, async () => {
      const err = await client
        .create(httpRouteKind, {
          apiVersion: "gateway.networking.k8s.io/v1",
          kind: "HTTPRoute",
          metadata: { name: "bad", namespace: ns },
          spec: { parentRefs: [{ name: "public" }], rules: [{ backendRefs: [backendRef] }] },
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(err instanceof ApiError, `expected a rejection, got ${String(err)}`);
      assert.equal(err.code, 422);
      assert.match(err.message, words);
    });
  }

  it("installs again without a change, and a deleted HTTPRoute CRD empties the cache", async () => {
    const again = await installGatewayApiCrds(cluster.kubeconfigPath);
    assert.ok(again.crds.length > 0);
    const before = reconciles.length;
    await client.delete(builtinKinds.CustomResourceDefinition, {
      name: "httproutes.gateway.networking.k8s.io",
    });
    await waitFor("HTTPRoute no longer served", async () => !(await isServed(client, httpRouteKind)));
    await waitFor("the optional cache to stop serving", async () => !mgr.served(httpRouteKind));
    assert.equal(mgr.cache(httpRouteKind, { optional: true }).list().length, 0);
    await waitFor("a reconcile told HTTPRoute is gone", async () =>
      reconciles.slice(before).some((r) => r.name === "primary" && !r.served),
    );
    const ready = mgr.caches.every((c) => c.informers.every((i) => i.health().healthy));
    assert.ok(ready, "no cache reports an unhealthy watch after the CRD went");
  });
});
