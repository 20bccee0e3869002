import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CanaryStatus, Condition } from "../../../../src/api/mlmodel.ts";
import {
  canaryCondition,
  canaryEvent,
  canaryUrls,
  servingRevisions,
} from "../../../../src/operator/canary/status.ts";

const now = "2026-05-01T12:00:00Z";
const paused: CanaryStatus = {
  revision: "new",
  phase: "Paused",
  reason: "StepPaused",
  step: 0,
  message: "held",
  startedAt: now,
};

describe("the Canary condition", () => {
  it("is absent before the first canary", () =>
    assert.equal(canaryCondition(undefined, [], 1, now), undefined));
  // [phase, status]
  const cases: [NonNullable<CanaryStatus["phase"]>, "True" | "False"][] = [
    ["Waiting", "True"],
    ["Progressing", "True"],
    ["Paused", "True"],
    ["Promoting", "True"],
    ["Aborting", "True"],
    ["Promoted", "False"],
    ["Aborted", "False"],
  ];
  for (const [phase, status] of cases) {
    it(`${phase}: ${status}, reason ${phase}`, () => {
      const c = canaryCondition({ ...paused, phase }, [], 7, now)!;
      assert.deepEqual(
        [c.type, c.status, c.reason, c.message, c.observedGeneration],
        ["Canary", status, phase, "held", 7],
      );
    });
  }
  it("keeps lastTransitionTime while its status stays", () => {
    const before: Condition[] = [
      {
        type: "Canary",
        status: "True",
        reason: "Progressing",
        message: "",
        lastTransitionTime: "2026-01-01T00:00:00Z",
      },
    ];
    assert.equal(canaryCondition(paused, before, 1, now)?.lastTransitionTime, "2026-01-01T00:00:00Z");
    assert.equal(canaryCondition({ ...paused, phase: "Promoted" }, before, 1, now)?.lastTransitionTime, now);
  });
});

describe("canary Events", () => {
  // [what, before, after, event reason or undefined]
  const cases: [string, CanaryStatus | undefined, CanaryStatus | undefined, string | undefined][] = [
    ["nothing changed", paused, { ...paused }, undefined],
    ["no canary", undefined, undefined, undefined],
    ["a new canary", undefined, { ...paused, phase: "Progressing", reason: "Started" }, "CanaryStarted"],
    [
      "a replaced canary",
      paused,
      { ...paused, revision: "newer", phase: "Progressing", reason: "Replaced" },
      "CanaryReplaced",
    ],
    [
      "the next step",
      paused,
      { ...paused, phase: "Progressing", reason: "StepProgressing", step: 1 },
      "CanaryStep",
    ],
    ["a step's split ready", { ...paused, phase: "Progressing" }, paused, "CanaryPaused"],
    ["an unhealthy canary held", paused, { ...paused, reason: "CrashLoopBackOff" }, "CanaryUnhealthy"],
    ["promoting", paused, { ...paused, phase: "Promoting" }, "CanaryPromoting"],
    ["promoted", { ...paused, phase: "Promoting" }, { ...paused, phase: "Promoted" }, "CanaryPromoted"],
    ["aborting", paused, { ...paused, phase: "Aborting", reason: "CrashLoopBackOff" }, "CanaryAborting"],
    ["aborted", { ...paused, phase: "Aborting" }, { ...paused, phase: "Aborted" }, "CanaryAborted"],
    ["still waiting", { ...paused, phase: "Waiting" }, { ...paused, phase: "Waiting" }, undefined],
  ];
  for (const [what, before, after, reason] of cases) {
    it(`${what}: ${reason ?? "none"}`, () => assert.equal(canaryEvent(before, after)?.reason, reason));
  }
  it("warns on waiting, unhealthy and aborts", () => {
    assert.equal(canaryEvent(paused, { ...paused, phase: "Aborting" })?.type, "Warning");
    assert.equal(canaryEvent(undefined, { ...paused, phase: "Waiting" })?.type, "Warning");
    assert.equal(canaryEvent(paused, { ...paused, phase: "Promoting" })?.type, "Normal");
  });
});

describe("status.revision.serving and the per-revision URLs", () => {
  it("lists the stable and the canary with their replicas and shares", () => {
    assert.deepEqual(
      servingRevisions(
        { revision: "old", number: 3, replicas: 4, readyReplicas: 4 },
        { revision: "new", number: 4, replicas: 1, readyReplicas: 1 },
        { stable: 80, canary: 20 },
      ),
      [
        { revision: "old", number: 3, role: "Stable", replicas: 4, readyReplicas: 4, trafficPercent: 80 },
        { revision: "new", number: 4, role: "Canary", replicas: 1, readyReplicas: 1, trafficPercent: 20 },
      ],
    );
  });
  it("gives one revision outside a canary all the traffic only when it has a ready replica", () => {
    assert.equal(
      servingRevisions({ revision: "old", replicas: 2, readyReplicas: 2 }, undefined, {
        stable: 0,
        canary: 0,
      })[0]?.trafficPercent,
      100,
    );
    assert.equal(
      servingRevisions({ revision: "old", replicas: 2, readyReplicas: 0 }, undefined, {
        stable: 0,
        canary: 0,
      })[0]?.trafficPercent,
      0,
    );
  });
  it("builds REST URLs, or gRPC addresses for a gRPC-only model", () => {
    assert.deepEqual(canaryUrls("resnet", "ml", { restPort: 8501, grpcPort: 8500 }), {
      stableURL: "http://resnet-stable.ml.svc:8501",
      canaryURL: "http://resnet-canary.ml.svc:8501",
    });
    assert.deepEqual(canaryUrls("resnet", "ml", { grpcPort: 8500 }), {
      stableURL: "resnet-stable.ml.svc:8500",
      canaryURL: "resnet-canary.ml.svc:8500",
    });
  });
});
