import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment } from "@kubernetes/client-node";
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  desiredAutoscaler,
  desiredDeployment,
  desiredDisruptionBudget,
} from "../../../src/operator/desired.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { model } from "./fixtures.ts";

const owner = { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", name: "resnet", uid: "uid-1" };
const custom = { ref: "custom" };

function plan(extra: Partial<MLModelSpec>) {
  return planModel(model({ image: "example.com/srv:1", model: { path: "/m" }, ...extra }), custom);
}

describe("scaling children", () => {
  it("no disruption budget for one replica (it would only block node drains)", () => {
    assert.equal(desiredDisruptionBudget(plan({}), owner), undefined);
    assert.equal(desiredDisruptionBudget(plan({ replicas: 1 }), owner), undefined);
  });
  it("a budget of one unavailable pod when more than one replica is promised", () => {
    const pdb = desiredDisruptionBudget(plan({ replicas: 3 }), owner);
    assert.equal(pdb?.spec?.maxUnavailable, 1);
    assert.deepEqual(
      pdb?.spec?.selector?.matchLabels,
      desiredDeployment(plan({}), owner).spec?.selector.matchLabels,
    );
    assert.ok(desiredDisruptionBudget(plan({ autoscaling: { minReplicas: 2, maxReplicas: 4 } }), owner));
    assert.equal(
      desiredDisruptionBudget(plan({ autoscaling: { minReplicas: 1, maxReplicas: 4 } }), owner),
      undefined,
    );
  });
  it("autoscaling leaves replicas to the autoscaler once it has scaled, and never dips before", () => {
    const p = plan({ autoscaling: { minReplicas: 2, maxReplicas: 4 } });
    const at = (replicas: number) => ({ spec: { replicas } }) as V1Deployment;
    // A new Deployment starts at minReplicas, not at the server's default of 1.
    assert.equal(desiredDeployment(p, owner).spec?.replicas, 2);
    // Switching from fixed replicas: the count is kept within the new bounds...
    assert.equal(desiredDeployment(p, owner, { deployment: at(3) }).spec?.replicas, 3);
    assert.equal(desiredDeployment(p, owner, { deployment: at(1) }).spec?.replicas, 2);
    assert.equal(desiredDeployment(p, owner, { deployment: at(9) }).spec?.replicas, 4);
    // ...until the autoscaler has scaled once: from then on the field is its own.
    const scaled = { status: { lastScaleTime: new Date(), currentReplicas: 3, desiredReplicas: 3 } };
    const spec = desiredDeployment(p, owner, { deployment: at(3), autoscaler: scaled }).spec!;
    assert.equal("replicas" in spec, false);
    assert.equal(desiredAutoscaler(p, owner)?.spec?.minReplicas, 2);
  });
  it("minReplicas 0 is scaled to zero: Deployment at 0, no autoscaler, no budget", () => {
    const p = plan({ autoscaling: { minReplicas: 0, maxReplicas: 4 } });
    assert.equal(desiredDeployment(p, owner).spec?.replicas, 0);
    assert.equal(desiredAutoscaler(p, owner), undefined);
    assert.equal(desiredDisruptionBudget(p, owner), undefined);
  });
});
