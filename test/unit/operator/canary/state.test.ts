import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CanaryStatus, MLModelSpec } from "../../../../src/api/mlmodel.ts";
import {
  type CanaryDecision,
  type CanaryInput,
  decideCanary,
} from "../../../../src/operator/canary/state.ts";
import { canaryEvent } from "../../../../src/operator/canary/status.ts";
import { canaryPlan } from "../../../../src/operator/canary/steps.ts";

const t0 = Date.parse("2026-05-01T12:00:00Z");
const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString();
const numbers: Record<string, number> = { old: 3, new: 4, newer: 5 };
const plan = (canary: NonNullable<NonNullable<MLModelSpec["rollout"]>["canary"]>) =>
  canaryPlan({ rollout: { canary } });

/** A reconcile's input: a canary of "new" against stable "old" at 20 %, split not ready yet. */
function input(over: Partial<CanaryInput> = {}): CanaryInput {
  return {
    now: at(0),
    specRevision: "new",
    stableRevision: "old",
    plan: plan({ trafficPercent: 20 }),
    autoRollback: true,
    gatewayServed: false,
    commands: {},
    health: { healthy: true },
    split: (percent) => ({ effectivePercent: percent, exact: true, ready: false }),
    canaryGone: false,
    numberOf: (r) => numbers[r],
    ...over,
  };
}

const ready = (percent: number) => ({ effectivePercent: percent, exact: true, ready: true });

/** Reconciles again with the status the last one wrote (what a real reconcile reads back). */
function next(previous: CanaryDecision, over: Partial<CanaryInput> = {}): CanaryDecision {
  return decideCanary(input({ previous: previous.status, ...over }));
}

describe("canary state machine: when there is no canary", () => {
  it("rolls a new revision out directly without spec.rollout.canary", () => {
    const d = decideCanary(input({ plan: undefined }));
    assert.deepEqual(d, { serve: { kind: "single", revision: "new" } });
  });
  it("rolls the first revision out directly (nothing was ever ready)", () => {
    assert.deepEqual(decideCanary(input({ stableRevision: undefined })).serve, {
      kind: "single",
      revision: "new",
    });
  });
  it("serves the stable revision when the spec is it", () => {
    assert.deepEqual(decideCanary(input({ specRevision: "old" })).serve, { kind: "single", revision: "old" });
  });
});

describe("canary state machine: one percentage (the common case)", () => {
  const started = decideCanary(input());
  it("starts at step 1 with the split and says so", () => {
    assert.deepEqual(started.serve, { kind: "split", stable: "old", canary: "new", percent: 20 });
    const s = started.status!;
    assert.deepEqual(
      [
        s.phase,
        s.reason,
        s.step,
        s.steps,
        s.trafficPercent,
        s.mode,
        s.revisionNumber,
        s.stableRevisionNumber,
      ],
      ["Progressing", "Started", 0, 1, 20, "Replicas", 4, 3],
    );
    assert.equal(s.startedAt, at(0));
    assert.equal(s.summary, "rev 4 to 20% (step 1/1)");
    assert.deepEqual(canaryEvent(undefined, s)?.reason, "CanaryStarted");
  });
  it("says the step is progressing again once a ready split lost a replica", () => {
    const held = next(next(started, { split: ready }), { split: ready });
    const lost = next(held, { now: at(30) });
    assert.deepEqual([lost.status?.phase, lost.status?.reason], ["Progressing", "StepProgressing"]);
    assert.match(lost.status?.message ?? "", /ready again/);
  });
  it("does not count a split as ready in the reconcile that starts the canary", () => {
    const d = decideCanary(input({ split: ready }));
    assert.equal(d.status?.phase, "Progressing");
  });
  it("waits for the canary's replicas, then holds the split until promoted", () => {
    const waiting = next(started, { now: at(5) });
    assert.equal(waiting.status?.phase, "Progressing");
    assert.deepEqual(
      waiting.status,
      started.status,
      "nothing new to say: the record stands (no status write)",
    );
    assert.equal(canaryEvent(started.status, waiting.status), undefined, "no Event while nothing changes");
    const held = next(waiting, { now: at(9), split: ready });
    assert.deepEqual(
      [held.status?.phase, held.status?.reason, held.status?.stepReadyAt, held.requeueAfterMs],
      ["Paused", "WaitingForPromotion", at(9), undefined],
    );
    assert.match(
      held.status?.message ?? "",
      /revision 4 \(new\) serves 20% .* beside revision 3 \(old\) at step 1\/1, held until mlmodel promote/,
    );
    assert.equal(canaryEvent(waiting.status, held.status)?.reason, "CanaryPaused");
    const later = next(held, { now: at(3600), split: ready });
    assert.deepEqual(later.status, held.status, "an indefinite pause holds: a fixed point");
  });
  it("promotes on mlmodel promote naming this revision, and ignores one naming another", () => {
    const held = next(next(started, { split: ready }), { split: ready });
    const other = next(held, { split: ready, commands: { promote: "newer" } });
    assert.equal(other.status?.phase, "Paused");
    const promoted = next(held, { split: ready, commands: { promote: "new" } });
    assert.deepEqual(promoted.serve, { kind: "promoting", stable: "old", canary: "new" });
    assert.deepEqual([promoted.status?.phase, promoted.status?.reason], ["Promoting", "PromotedByUser"]);
    assert.equal(canaryEvent(held.status, promoted.status)?.reason, "CanaryPromoting");
    // The promotion runs to its end, whatever the split says meanwhile.
    const still = next(promoted, { split: (p) => ({ ...ready(p), ready: false }), commands: {} });
    assert.equal(still.status?.phase, "Promoting");
    // Done when the canary's revision is the last ready (stable) one.
    const done = next(still, { stableRevision: "new", canaryGone: true });
    assert.deepEqual(done.serve, { kind: "single", revision: "new" });
    assert.deepEqual(
      [done.status?.phase, done.status?.reason, done.status?.summary],
      ["Promoted", "PromotedByUser", undefined],
    );
    assert.equal(canaryEvent(still.status, done.status)?.reason, "CanaryPromoted");
  });
  it("promotes at once at trafficPercent 100", () => {
    const d = decideCanary(input({ plan: plan({ trafficPercent: 100 }) }));
    assert.deepEqual(
      [d.serve.kind, d.status?.phase, d.status?.reason],
      ["promoting", "Promoting", "Promoted"],
    );
  });
  it("says how coarse the split is when the replicas cannot carry the percentage", () => {
    const coarse = (p: number) => ({
      effectivePercent: 33,
      exact: p === 33,
      note: "3 replica(s) cannot carry 10%",
      ready: true,
    });
    const d = next(
      next(decideCanary(input({ plan: plan({ trafficPercent: 10 }) })), {
        split: coarse,
        plan: plan({ trafficPercent: 10 }),
      }),
      {
        split: coarse,
        plan: plan({ trafficPercent: 10 }),
      },
    );
    assert.deepEqual(
      [d.status?.effectivePercent, d.status?.exact, d.status?.trafficPercent],
      [33, false, 10],
    );
    assert.equal(d.status?.summary, "rev 4 at 33% (10% asked) (step 1/1, paused)");
    assert.match(d.status?.message ?? "", /3 replica\(s\) cannot carry 10%/);
  });
});

describe("canary state machine: steps with pauses", () => {
  const steps = plan({
    steps: [
      { trafficPercent: 10, pause: { durationSeconds: 60 } },
      { trafficPercent: 50, pause: {} },
      { trafficPercent: 80 },
    ],
  });
  const withSteps = (over: Partial<CanaryInput> = {}) => ({ plan: steps, ...over });

  it("runs each step, its pause, and promotes after the last, with one Event per change", () => {
    const trace: [string | undefined, number | undefined, string | undefined][] = [];
    const events: string[] = [];
    let d = decideCanary(input(withSteps()));
    let previous: CanaryStatus | undefined;
    const record = () => {
      trace.push([
        d.status?.phase,
        d.status?.step,
        d.serve.kind === "split" ? String(d.serve.percent) : d.serve.kind,
      ]);
      const e = canaryEvent(previous, d.status);
      if (e) events.push(e.reason);
      previous = d.status;
    };
    record();
    d = next(d, withSteps({ now: at(10), split: ready })); // step 1 ready: its 60 s pause starts
    record();
    assert.equal(d.status?.pauseEndsAt, at(70));
    assert.equal(d.requeueAfterMs, 60_000, "wakes when the pause ends");
    d = next(d, withSteps({ now: at(40), split: ready })); // half way
    assert.equal(d.requeueAfterMs, 30_000);
    record();
    d = next(d, withSteps({ now: at(70), split: ready })); // pause over: step 2
    record();
    d = next(d, withSteps({ now: at(71), split: (p) => ({ ...ready(p), ready: false }) })); // 50 % coming up
    record();
    d = next(d, withSteps({ now: at(80), split: ready })); // step 2 ready: indefinite pause
    record();
    d = next(
      d,
      withSteps({ now: at(500), split: ready, commands: { resume: { revision: "new", step: 0 } } }),
    );
    assert.equal(d.status?.phase, "Paused", "a resume of a past step does not end this pause");
    d = next(
      d,
      withSteps({ now: at(600), split: ready, commands: { resume: { revision: "new", step: 1 } } }),
    );
    record();
    d = next(d, withSteps({ now: at(610), split: ready })); // step 3 (no pause) ready: promote
    record();
    assert.deepEqual(trace, [
      ["Progressing", 0, "10"],
      ["Paused", 0, "10"],
      ["Paused", 0, "10"],
      ["Progressing", 1, "50"],
      ["Progressing", 1, "50"],
      ["Paused", 1, "50"],
      ["Progressing", 2, "80"],
      ["Promoting", 2, "promoting"],
    ]);
    assert.deepEqual(events, [
      "CanaryStarted",
      "CanaryPaused",
      "CanaryStep",
      "CanaryPaused",
      "CanaryStep",
      "CanaryPromoting",
    ]);
    assert.equal(d.status?.reason, "StepsComplete");
  });

  it("keeps counting a timed pause from when the step was first ready, and needs the split ready to move on", () => {
    let d = decideCanary(input(withSteps()));
    d = next(d, withSteps({ now: at(10), split: ready }));
    d = next(d, withSteps({ now: at(30), split: (p) => ({ ...ready(p), ready: false }) })); // a pod restarted
    assert.deepEqual([d.status?.phase, d.status?.stepReadyAt], ["Progressing", at(10)]);
    assert.match(d.status?.message ?? "", /ready again/);
    d = next(d, withSteps({ now: at(80), split: (p) => ({ ...ready(p), ready: false }) }));
    assert.equal(d.status?.step, 0, "the pause is over but the split is not ready: hold");
    d = next(d, withSteps({ now: at(81), split: ready }));
    assert.deepEqual([d.status?.phase, d.status?.step], ["Progressing", 1]);
  });

  it("starts again from step 1 when the steps are edited", () => {
    let d = decideCanary(input(withSteps()));
    d = next(d, withSteps({ now: at(10), split: ready }));
    d = next(d, withSteps({ now: at(70), split: ready }));
    assert.equal(d.status?.step, 1);
    const edited = plan({ steps: [{ trafficPercent: 5 }, { trafficPercent: 50 }] });
    const e = next(d, { plan: edited, now: at(90), split: ready });
    assert.deepEqual(
      [e.status?.step, e.status?.reason, e.status?.phase, e.status?.steps],
      [0, "StepsChanged", "Progressing", 2],
    );
    assert.deepEqual(e.serve, { kind: "split", stable: "old", canary: "new", percent: 5 });
    assert.equal(canaryEvent(d.status, e.status)?.reason, "CanaryRestarted");
    assert.equal(e.status?.startedAt, at(0), "the same canary, restarted");
  });
});

describe("canary state machine: aborts", () => {
  const crash = {
    healthy: false as const,
    reason: "CrashLoopBackOff",
    message: "container server keeps crashing",
  };
  it("aborts an unhealthy canary with autoRollback, recording the failure like an automatic rollback", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { health: crash, now: at(30) });
    assert.deepEqual(d.serve, { kind: "aborting", stable: "old", canary: "new" });
    assert.deepEqual(d.failed, {
      revision: "new",
      number: 4,
      reason: "CrashLoopBackOff",
      message: "container server keeps crashing",
      at: at(30),
    });
    assert.deepEqual([d.status?.phase, d.status?.reason], ["Aborting", "CrashLoopBackOff"]);
    assert.equal(canaryEvent(running.status, d.status)?.type, "Warning");
    // Next reconcile: the failure is recorded (status.revision.failed), the canary winds down.
    const failed = d.failed;
    const winding = next(d, { failed, health: crash });
    assert.equal(winding.status?.phase, "Aborting");
    const gone = next(winding, { failed, canaryGone: true });
    assert.deepEqual(gone.serve, { kind: "single", revision: "old" });
    assert.deepEqual([gone.status?.phase, gone.status?.finishedAt], ["Aborted", at(0)]);
    assert.match(
      gone.status?.message ?? "",
      /revision 4 \(new\) was aborted \(CrashLoopBackOff\).*fix it and a new canary starts/,
    );
    assert.equal(canaryEvent(winding.status, gone.status)?.reason, "CanaryAborted");
    // It stays aborted while the spec still names the failed revision.
    assert.deepEqual(next(gone, { failed, canaryGone: true }).status, gone.status);
  });
  it("holds an unhealthy canary at its step when autoRollback is off, and says what to do", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { health: crash, autoRollback: false });
    assert.equal(d.failed, undefined);
    assert.deepEqual(d.serve, { kind: "split", stable: "old", canary: "new", percent: 20 });
    assert.deepEqual([d.status?.phase, d.status?.reason], ["Paused", "CrashLoopBackOff"]);
    assert.match(
      d.status?.message ?? "",
      /autoRollback is off, so promote \(mlmodel promote\), roll back \(mlmodel rollback\) or fix the spec/,
    );
    assert.equal(canaryEvent(running.status, d.status)?.reason, "CanaryUnhealthy");
  });
  it("aborts when the spec is back at the stable revision (mlmodel rollback)", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { specRevision: "old" });
    assert.deepEqual(d.serve, { kind: "aborting", stable: "old", canary: "new" });
    assert.deepEqual([d.status?.phase, d.status?.reason], ["Aborting", "RolledBack"]);
    const gone = next(d, { specRevision: "old", canaryGone: true });
    assert.deepEqual([gone.serve.kind, gone.status?.phase], ["single", "Aborted"]);
    assert.equal(gone.failed, undefined, "a user's abort records no failure");
  });
  it("starts a new canary when a revision aborted by rollback is applied again", () => {
    const running = next(decideCanary(input()), { split: ready });
    const aborted = next(next(running, { specRevision: "old" }), { specRevision: "old", canaryGone: true });
    const again = next(aborted, { now: at(900) });
    assert.deepEqual(
      [again.status?.phase, again.status?.startedAt, again.status?.step],
      ["Progressing", at(900), 0],
    );
  });
});

describe("canary state machine: edits and the Gateway API", () => {
  it("replaces the canary when the spec moves to a third revision", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { specRevision: "newer", now: at(50) });
    assert.deepEqual(d.serve, { kind: "split", stable: "old", canary: "newer", percent: 20 });
    assert.deepEqual(
      [d.status?.revision, d.status?.reason, d.status?.step, d.status?.startedAt],
      ["newer", "Replaced", 0, at(50)],
    );
    assert.equal(canaryEvent(running.status, d.status)?.reason, "CanaryReplaced");
  });
  it("promotes the canary when spec.rollout.canary is removed", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { plan: undefined });
    assert.deepEqual(
      [d.serve.kind, d.status?.phase, d.status?.reason],
      ["promoting", "Promoting", "CanaryRemoved"],
    );
  });
  it("ends the canary as replaced when it is removed and the spec moves on at once", () => {
    const running = next(decideCanary(input()), { split: ready });
    const d = next(running, { plan: undefined, specRevision: "newer" });
    assert.deepEqual(d.serve, { kind: "single", revision: "newer" });
    assert.deepEqual([d.status?.phase, d.status?.reason], ["Aborted", "Replaced"]);
  });
  it("waits (stable alone) while the cluster has no HTTPRoute kind, then starts", () => {
    const gw = plan({
      trafficPercent: 10,
      trafficRouting: { gatewayAPI: { parentRefs: [{ name: "public" }] } },
    });
    const waiting = decideCanary(input({ plan: gw }));
    assert.deepEqual(waiting.serve, { kind: "single", revision: "old" });
    assert.deepEqual(
      [waiting.status?.phase, waiting.status?.reason, waiting.status?.mode],
      ["Waiting", "GatewayAPIUnavailable", "GatewayAPI"],
    );
    assert.match(
      waiting.status?.message ?? "",
      /install the Gateway API CRDs, or remove trafficRouting to split by replicas/,
    );
    assert.equal(canaryEvent(undefined, waiting.status)?.type, "Warning");
    const started = next(waiting, { plan: gw, gatewayServed: true, now: at(120), split: ready });
    assert.deepEqual(started.serve, { kind: "split", stable: "old", canary: "new", percent: 10 });
    assert.deepEqual(
      [started.status?.phase, started.status?.reason, started.status?.stepStartedAt],
      ["Progressing", "Started", at(120)],
    );
    assert.match(
      started.status?.message ?? "",
      /started beside revision 3 \(old\) \(it waited: GatewayAPIUnavailable\)/,
    );
    assert.equal(
      canaryEvent(waiting.status, started.status)?.reason,
      "CanaryStarted",
      "said once it really starts",
    );
  });
  it("lets mlmodel promote through while waiting for the Gateway API", () => {
    const gw = plan({
      trafficPercent: 10,
      trafficRouting: { gatewayAPI: { parentRefs: [{ name: "public" }] } },
    });
    const waiting = decideCanary(input({ plan: gw }));
    assert.equal(next(waiting, { plan: gw, commands: { promote: "new" } }).status?.phase, "Promoting");
  });
});

describe("canary state machine: an operator restart resumes from status alone", () => {
  it("gives the same decision for the same status and observation (no hidden memory)", () => {
    const steps = plan({
      steps: [{ trafficPercent: 10, pause: { durationSeconds: 60 } }, { trafficPercent: 50 }],
    });
    let d = decideCanary(input({ plan: steps }));
    d = next(d, { plan: steps, now: at(10), split: ready });
    const observed = { plan: steps, now: at(40), split: ready, previous: d.status };
    assert.deepEqual(
      decideCanary(input(observed)),
      decideCanary(input({ ...observed, previous: structuredClone(observed.previous) })),
    );
    // A restart between "pause over" and "next step applied": the status still says step 0,
    // so the next reconcile moves to step 1 exactly once.
    const moved = decideCanary(input({ ...observed, now: at(75) }));
    assert.equal(moved.status?.step, 1);
    const again = decideCanary(input({ plan: steps, now: at(76), previous: moved.status, split: ready }));
    assert.equal(again.status?.step, 1, "no second step from a replayed reconcile");
  });
});
