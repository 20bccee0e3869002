/**
 * Serving pods are not watched (serving-pods.ts): read while a Deployment has not settled,
 * looked at again meanwhile, and status counts from the Deployment once it has.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment } from "@kubernetes/client-node";
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import { lookAgainBoundsMs } from "../../../src/operator/mlmodel/download-pods.ts";
import {
  deploymentSettled,
  lookAgainMs,
  needsServingPods,
} from "../../../src/operator/mlmodel/serving-pods.ts";
import { labels } from "../../../src/operator/names.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { deployment, pod } from "./fixtures.ts";
import { modelWorld, revisionOf, type World } from "./reconcile-harness.ts";

const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });
const servingSelector = `${labels.model}=resnet,${labels.component}=server`;

describe("deploymentSettled: the Deployment's counts say all about its pods", () => {
  it("once it saw its generation and every desired replica is updated, ready and available", () => {
    assert.equal(deploymentSettled(deployment(2, 2)), true);
    assert.equal(deploymentSettled(deployment(0, 0)), true, "scaled to zero, no pod left");
  });

  it("not before: a replica not ready, an old one left, a generation not seen, a pod unavailable", () => {
    assert.equal(deploymentSettled(deployment(2, 1)), false);
    assert.equal(deploymentSettled(deployment(2, 2, { replicas: 3 })), false, "an old replica left");
    assert.equal(deploymentSettled(deployment(2, 2, { updatedReplicas: 1 })), false);
    assert.equal(deploymentSettled(deployment(2, 2, { observedGeneration: 1 })), false);
    assert.equal(deploymentSettled(deployment(2, 2, { unavailableReplicas: 1 })), false);
    assert.equal(deploymentSettled(deployment(2, 2, { availableReplicas: 1 })), false);
  });

  it("its pods are read only for one seen by the Deployment controller and not settled", () => {
    assert.equal(needsServingPods(undefined), false, "no Deployment: nothing to read");
    const created: V1Deployment = { ...deployment(1, 0), status: {} };
    assert.equal(needsServingPods(created), false, "never seen: no ReplicaSet, no pod yet");
    assert.equal(needsServingPods(deployment(1, 0)), true);
    assert.equal(needsServingPods(deployment(1, 1)), false);
  });
});

describe("lookAgainMs: an unsettled rollout's pods are looked at again", () => {
  const failing = (since: string) => ({
    status: {
      conditions: [
        {
          type: "ServingReady",
          status: "False" as const,
          reason: "ReplicasNotReady",
          message: "",
          lastTransitionTime: since,
        },
      ],
    },
  });

  it("after a quarter of the time the model has not served, between 5 s and 60 s", () => {
    const now = "2026-01-01T00:10:00Z";
    assert.equal(lookAgainMs(deployment(1, 0), {}, now), lookAgainBoundsMs.min, "no status yet");
    assert.equal(lookAgainMs(deployment(1, 0), failing("2026-01-01T00:09:50Z"), now), 5_000);
    assert.equal(lookAgainMs(deployment(1, 0), failing("2026-01-01T00:09:00Z"), now), 15_000);
    assert.equal(lookAgainMs(deployment(1, 0), failing("2026-01-01T00:00:00Z"), now), 60_000);
  });

  it("not for a settled Deployment, nor one never seen, nor none", () => {
    const now = "2026-01-01T00:10:00Z";
    assert.equal(lookAgainMs(deployment(1, 1), {}, now), undefined);
    assert.equal(lookAgainMs({ ...deployment(1, 0), status: {} }, {}, now), undefined);
    assert.equal(lookAgainMs(undefined, {}, now), undefined);
  });
});

/** The Deployment controller's report on `resnet`: `replicas` pods of its template, `ready` of them ready. */
function counted(w: World, replicas: number, ready: number): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.status = {
      observedGeneration: d.metadata.generation ?? 1,
      replicas,
      updatedReplicas: replicas,
      readyReplicas: ready,
      availableReplicas: ready,
      ...(replicas > ready ? { unavailableReplicas: replicas - ready } : {}),
    };
  });
}

describe("a model's reconciles read its serving pods only while its Deployment has not settled", () => {
  it("a new model: no list (its Deployment was just created); its rollout: listed and looked at again; settled: no list", async () => {
    const w = modelWorld(image("1"));
    const rev = revisionOf(image("1"));
    await w.reconcile();
    w.settle();
    assert.deepEqual(w.client.lists, [], "a Deployment never seen has no pod");

    counted(w, 1, 0);
    w.put(builtinKinds.Pod, pod(`resnet-${rev}-0`, rev, { waiting: "ImagePullBackOff" }) as KubeObject);
    w.followHeldCounts = false;
    const rolling = await w.reconcile();
    assert.deepEqual(w.client.lists, [`Pod ${servingSelector}`]);
    assert.equal(w.lastStatus()?.reason, "ImagePullBackOff", "what only the pod says");
    assert.equal(rolling.result?.requeueAfterMs, lookAgainBoundsMs.min, "looked at again");
    w.settle();

    w.client.lists.length = 0;
    w.update<KubeObject>(builtinKinds.Pod, `resnet-${rev}-0`, (p) => {
      Object.assign(p, pod(`resnet-${rev}-0`, rev, { ready: true }));
    });
    counted(w, 1, 1);
    const ready = await w.reconcile();
    assert.deepEqual(w.client.lists, [], "settled: the Deployment's counts are the model's");
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.deepEqual([w.lastStatus()?.replicas, w.lastStatus()?.readyReplicas], [1, 1]);
    assert.equal(ready.result?.replacesRequeue, true, "the look asked for meanwhile is withdrawn");
    assert.equal(ready.result?.requeueAfterMs, undefined);
  });

  it("a model that uses a canary lists its pods at every reconcile, settled or not", async () => {
    const w = modelWorld({ ...image("1"), rollout: { canary: { trafficPercent: 20 } } });
    w.followHeldCounts = false;
    await w.reconcile();
    assert.deepEqual(w.client.lists, [`Pod ${servingSelector}`]);
  });
});
