import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MLModelSpec } from "../../../../src/api/mlmodel.ts";
import { canaryPlan, stepLabel } from "../../../../src/operator/canary/steps.ts";

const rollout = (canary: NonNullable<MLModelSpec["rollout"]>["canary"]): Pick<MLModelSpec, "rollout"> => ({
  rollout: { canary },
});

describe("canaryPlan: spec.rollout.canary normalised", () => {
  it("is undefined without a canary (new revisions roll out directly)", () => {
    assert.equal(canaryPlan({}), undefined);
    assert.equal(canaryPlan({ rollout: { maxSurge: 1 } }), undefined);
  });
  it("makes one percentage one step held until promoted, with the default limits", () => {
    const plan = canaryPlan(rollout({ trafficPercent: 20 }))!;
    assert.deepEqual(plan.steps, [{ trafficPercent: 20, pause: { kind: "indefinite" } }]);
    assert.deepEqual([plan.maxRestarts, plan.maxUnreadySeconds, plan.gateway], [2, 60, undefined]);
  });
  it("makes 100% a promotion at once (no steps), so a Git edit to 100 promotes", () => {
    assert.deepEqual(canaryPlan(rollout({ trafficPercent: 100 }))!.steps, []);
  });
  it("maps each step's pause: absent none, empty indefinite, durationSeconds timed", () => {
    const plan = canaryPlan(
      rollout({
        steps: [
          { trafficPercent: 10, pause: { durationSeconds: 300 } },
          { trafficPercent: 50, pause: {} },
          { trafficPercent: 80 },
        ],
        maxRestarts: 0,
        maxUnreadySeconds: 30,
      }),
    )!;
    assert.deepEqual(plan.steps, [
      { trafficPercent: 10, pause: { kind: "timed", seconds: 300 } },
      { trafficPercent: 50, pause: { kind: "indefinite" } },
      { trafficPercent: 80, pause: { kind: "none" } },
    ]);
    assert.deepEqual([plan.maxRestarts, plan.maxUnreadySeconds], [0, 30]);
    assert.equal(stepLabel(1, plan), "step 2/3");
  });
  it("hashes the steps: equal steps, equal hash; other steps or limits only, as stated", () => {
    const a = canaryPlan(rollout({ trafficPercent: 20 }))!;
    const b = canaryPlan(rollout({ steps: [{ trafficPercent: 20, pause: {} }] }))!;
    const c = canaryPlan(rollout({ trafficPercent: 30 }))!;
    const d = canaryPlan(rollout({ trafficPercent: 20, maxRestarts: 5 }))!;
    assert.equal(a.stepsHash, b.stepsHash, "the two spellings of one held step are the same canary");
    assert.notEqual(a.stepsHash, c.stepsHash);
    assert.equal(a.stepsHash, d.stepsHash, "health limits are not steps: editing them does not restart");
  });
  it("carries the Gateway API parents and host names", () => {
    const parentRefs = [{ name: "public", namespace: "infra", sectionName: "https" }];
    assert.deepEqual(
      canaryPlan(rollout({ trafficPercent: 10, trafficRouting: { gatewayAPI: { parentRefs } } }))!.gateway,
      { parentRefs, hostnames: [] },
    );
    assert.deepEqual(
      canaryPlan(
        rollout({
          trafficPercent: 10,
          trafficRouting: { gatewayAPI: { parentRefs, hostnames: ["m.example.com"] } },
        }),
      )!.gateway?.hostnames,
      ["m.example.com"],
    );
  });
});
