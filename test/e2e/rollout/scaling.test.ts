/**
 * Scaling end to end, the operator under its own RBAC: `kubectl scale` through the MLModel's
 * scale subresource, a PodDisruptionBudget once more than one replica is promised, the
 * HorizontalPodAutoscaler created, updated and removed as spec.autoscaling changes, and
 * minReplicas 0 as scaled to zero (Deployment at 0, URL kept).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { V1Deployment, V1PodDisruptionBudget, V2HorizontalPodAutoscaler } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { ApiError, builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  applyObjects,
  isReady,
  operatorTestBed,
  podsOf,
  type RunningOperator,
  removeTestBed,
  waitForPhase,
} from "../operator/helpers.ts";

const name = "scaled";

describe("scaling", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;

  const key = () => ({ namespace: ns.name, name });
  const deployment = () => admin.get<KubeObject & V1Deployment>(builtinKinds.Deployment, key());
  const budget = () => admin.get<KubeObject & V1PodDisruptionBudget>(builtinKinds.PodDisruptionBudget, key());
  const autoscaler = () =>
    admin.get<KubeObject & V2HorizontalPodAutoscaler>(builtinKinds.HorizontalPodAutoscaler, key());

  async function readyPods(count: number): Promise<void> {
    await waitFor(`${count} ready serving pods`, async () => {
      const pods = await podsOf(admin, ns.name, name);
      return pods.length === count && pods.every(isReady);
    });
  }

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-scaling"));
    await applyObjects(admin, ns.name, [
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name },
        spec: {
          image: "registry.example.com/team/server:1",
          model: { path: "/models/m" },
          endpoint: { restPort: 8080 },
        },
      },
    ]);
  });

  after(() => removeTestBed({ ns, admin, operator }));

  it("one replica: Ready, no disruption budget", async () => {
    await waitForPhase(admin, ns.name, name, "Ready");
    assert.equal(await budget(), undefined);
  });

  it("the scale subresource (what kubectl scale patches) scales the Deployment and adds a budget", async () => {
    await admin.patch(mlModelKind, key(), { spec: { replicas: 3 } }, "merge", { subresource: "scale" });
    const m = await waitForPhase(admin, ns.name, name, "Ready");
    assert.equal(m.spec.replicas, 3);
    assert.equal((await deployment())?.spec?.replicas, 3);
    await readyPods(3);
    const pdb = await waitFor("a PodDisruptionBudget", budget);
    assert.equal(pdb.spec?.maxUnavailable, 1);
    assert.deepEqual(pdb.spec?.selector?.matchLabels, {
      "serving.mlmodel.dev/model": name,
      "app.kubernetes.io/component": "server",
    });
    const scale = await waitFor("the scale subresource to report 3 replicas", async () => {
      const s = await admin.get<
        KubeObject & {
          spec: { replicas: number };
          status: { replicas: number; selector: string };
        }
      >(mlModelKind, key(), { subresource: "scale" });
      return s?.status.replicas === 3 ? s : undefined;
    });
    assert.equal(scale.spec.replicas, 3);
    assert.equal(
      scale.status.selector,
      "serving.mlmodel.dev/model=scaled,app.kubernetes.io/component=server",
    );
  });

  /**
   * Every spec.replicas the Deployment takes until `stop` is aborted, from a watch (a dip that
   * the autoscaler repairs within a second would slip between polls).
   */
  async function replicasSeen(stop: AbortSignal): Promise<number[]> {
    const current = await deployment();
    const seen: number[] = [];
    try {
      for await (const event of admin.watch<KubeObject & V1Deployment>(
        builtinKinds.Deployment,
        {
          namespace: ns.name,
          fieldSelector: `metadata.name=${name}`,
          resourceVersion: current?.metadata.resourceVersion,
        },
        stop,
      )) {
        if (event.object.spec?.replicas !== undefined) seen.push(event.object.spec.replicas);
      }
    } catch (err) {
      if (!stop.aborted) throw err;
    }
    return seen;
  }

  it("spec.autoscaling creates the HorizontalPodAutoscaler, a change updates it, and scale is then refused", async () => {
    // From 3 fixed replicas to autoscaling between 2 and 5: the Deployment must keep its 3 (an
    // apply that simply dropped replicas would reset it to 1 until the autoscaler raised it).
    const stopWatching = new AbortController();
    const seen = replicasSeen(stopWatching.signal);
    await admin.patch(
      mlModelKind,
      key(),
      { spec: { replicas: null, autoscaling: { minReplicas: 2, maxReplicas: 5 } } },
      "merge",
    );
    let hpa = await waitFor("a HorizontalPodAutoscaler", autoscaler);
    // The autoscaler's first sync (it enforces minReplicas at once) and the operator's
    // follow-up reconciles happen within a few seconds of its creation.
    await waitFor("the autoscaler's first sync", async () => (await autoscaler())?.status?.conditions);
    await new Promise((r) => setTimeout(r, 3000));
    stopWatching.abort();
    const replicas = await seen;
    assert.ok(
      replicas.every((r) => r === 3),
      `the Deployment's replicas went ${[3, ...replicas].join(" -> ")}`,
    );
    assert.equal((await deployment())?.spec?.replicas, 3);
    assert.equal(hpa.spec?.minReplicas, 2);
    assert.equal(hpa.spec?.maxReplicas, 5);
    assert.equal(hpa.spec?.scaleTargetRef.name, name);
    assert.equal(hpa.spec?.metrics?.[0]?.resource?.target.averageUtilization, 80);
    assert.ok(await budget(), "minReplicas 2 keeps the disruption budget");

    await admin.patch(
      mlModelKind,
      key(),
      { spec: { autoscaling: { maxReplicas: 7, targetCPUUtilizationPercentage: 60 } } },
      "merge",
    );
    hpa = await waitFor("the autoscaler to be updated", async () => {
      const h = await autoscaler();
      return h?.spec?.maxReplicas === 7 ? h : undefined;
    });
    assert.equal(hpa.spec?.metrics?.[0]?.resource?.target.averageUtilization, 60);

    // The schema allows replicas or autoscaling, not both: the scale subresource cannot fight the HPA.
    await assert.rejects(
      admin.patch(mlModelKind, key(), { spec: { replicas: 4 } }, "merge", { subresource: "scale" }),
      (err: unknown) => err instanceof ApiError && err.code === 422,
    );
  });

  it("minReplicas 0 scales to zero: no autoscaler, Deployment at 0, ScaledToZero, URL kept", async () => {
    await admin.patch(mlModelKind, key(), { spec: { autoscaling: { minReplicas: 0 } } }, "merge");
    const m = await waitForPhase(admin, ns.name, name, "Pending", "ScaledToZero");
    assert.equal(m.status?.url, `http://${name}.${ns.name}.svc:8080`);
    assert.equal(m.status?.conditions?.find((c) => c.type === "ServingReady")?.reason, "ScaledToZero");
    assert.equal((await deployment())?.spec?.replicas, 0);
    await waitFor(
      "the autoscaler and the budget to be removed",
      async () => !(await autoscaler()) && !(await budget()),
    );
    await readyPods(0);
  });

  it("back to fixed replicas: serving again, no autoscaler", async () => {
    await admin.patch(mlModelKind, key(), { spec: { autoscaling: null, replicas: 2 } }, "merge");
    await waitForPhase(admin, ns.name, name, "Ready");
    await readyPods(2);
    assert.equal(await autoscaler(), undefined);
    assert.ok(await budget());
  });
});
