// test-needs: real-node, images
/**
 * A canary with steps and a timed pause under live traffic on real pods, through SIGKILLs of the
 * operator (what canary.test.ts proves on kwok, with MLServer answering). The operator runs as
 * its own process (its least-privilege RBAC) so it can be killed as a node would kill it.
 *
 * v1 serves on 4 replicas; v2 comes with steps [25 % for 40 s, then 50 % until
 * `mlmodel promote --step`], 30 requests a second on a new connection each.
 * 1. While step 1 holds its timed pause the operator is SIGKILLed, and a new one started: the
 *    canary goes on where it was (the same start, the same end of the pause, no step run twice,
 *    never back) to step 2, 2 + 2 replicas, whose share of v2's answers is judged against live
 *    traffic.
 * 2. With no operator running, `mlmodel promote --step` ends step 2's indefinite pause (the
 *    command is an annotation, level-based): the next operator finishes the last step, so the
 *    canary is promoted and every answer is v2's.
 * Zero requests fail throughout. Counts and order only: nothing asserts how long anything took.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import type { SampleModel } from "../../../src/images/sample-model.ts";
import type { OperatorProcess } from "../../chaos/operator-process.ts";
import { scratchDir } from "../../harness/scratch.ts";
import type { Traffic } from "../../harness/traffic.ts";
import { type CanaryUnderTraffic, canaryTraffic, figures, startCanaryTraffic } from "./canary-live.ts";
import {
  applyCaSecret,
  applyModel,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  recordStatuses,
  removeRealNodeBed,
  type StatusRecorder,
  sklearnModel,
  startOperatorProcess,
  waitForModel,
} from "./fixture.ts";
import {
  assertNoFailures,
  burnersForTraffic,
  holdNodeForTraffic,
  liveTrafficHook,
  liveTrafficSuiteTimeoutMs,
} from "./live-traffic.ts";

const { name, replicas, ratePerSecond } = canaryTraffic;
/** Step 1's timed pause: long enough to kill and restart the operator inside it. */
const firstPauseSeconds = 40;

type CanaryStatus = NonNullable<NonNullable<MLModel["status"]>["canary"]>;

describe("canary steps under live traffic through operator SIGKILLs", {
  timeout: liveTrafficSuiteTimeoutMs,
}, () => {
  let bed: RealNodeBed;
  let v1: SampleModel & { uri: string };
  let v2: SampleModel & { uri: string };
  let releaseNode: (() => Promise<void>) | undefined;
  let traffic: Traffic<unknown>;
  let burners: ReturnType<typeof burnersForTraffic>;
  let live: CanaryUnderTraffic;
  let operator: OperatorProcess | undefined;
  let history: StatusRecorder | undefined;
  const operatorDir = scratchDir("canary-steps-operator");

  const spec = (model: SampleModel & { uri: string }): MLModel =>
    sklearnModel(name, model, {
      replicas,
      rollout: {
        canary: {
          steps: [
            { trafficPercent: 25, pause: { durationSeconds: firstPauseSeconds } },
            { trafficPercent: 50, pause: {} },
          ],
        },
      },
    } as Partial<MLModelSpec>);

  const startOperator = () => startOperatorProcess(bed, operatorDir);

  const canaryOf = (m: MLModel): CanaryStatus | undefined => m.status?.canary;

  before(async () => {
    bed = await realNodeBed("rn-steps");
    // The bed's in-process operator gives way to a process that can be SIGKILLed.
    await bed.operator.stop();
    operator = await startOperator();
    releaseNode = await holdNodeForTraffic(bed.cluster, "canary-steps.test.ts");
    [v1, v2] = await Promise.all([
      publishSample(bed, "iris-v1.tgz", { version: 1 }),
      publishSample(bed, "iris-v2.tgz", { version: 2 }),
    ]);
    await applyCaSecret(bed);
    await applyModel(bed, spec(v1));
    ({ traffic, live } = await startCanaryTraffic(bed, v1, v2));
    burners = burnersForTraffic("canary-steps.test.ts", canaryTraffic.maxDurationMs);
    history = recordStatuses(bed, name);
  }, liveTrafficHook);
  after(async () => {
    try {
      await history?.stop();
      await burners?.stop();
      await traffic?.stop();
      await operator?.kill("SIGKILL");
      await removeRealNodeBed(bed);
    } finally {
      await releaseNode?.();
    }
  });

  it("a SIGKILL during step 1's timed pause: the next operator goes on from there to step 2, whose share is v2's", async () => {
    traffic.mark("steps");
    await applyModel(bed, spec(v2));
    const pausing = await waitForModel(bed, name, "step 1 holding its timed pause", (m) => {
      const c = canaryOf(m);
      return m.status?.observedGeneration === m.metadata.generation && c?.step === 0 && !!c.pauseEndsAt;
    });
    const first = canaryOf(pausing)!;
    assert.deepEqual(
      [first.steps, first.trafficPercent, first.phase],
      [2, 25, "Paused"],
      JSON.stringify(first),
    );

    await operator!.kill("SIGKILL");
    assert.equal(operator!.exitStatus?.signal, "SIGKILL");
    // No operator for a few seconds of traffic: the pods serve on their own.
    await live.answers(ratePerSecond * 5, "no operator running");
    operator = await startOperator();

    const paused = await live.measureSplit("step 2, 50 %", 2, 2);
    const second = canaryOf(paused)!;
    assert.deepEqual(
      [second.step, second.trafficPercent, second.effectivePercent, second.revision, second.startedAt],
      [1, 50, 50, first.revision, first.startedAt],
      "the same canary, one step on",
    );

    // Every status the model went through: the canary never went back or started again, and
    // step 1's pause kept the end it had before the SIGKILL.
    const canaries = history!.statuses.map((s) => s.canary).filter((c) => c?.revision === first.revision);
    const steps = canaries.map((c) => c!.step ?? 0);
    assert.deepEqual(
      steps,
      [...steps].sort((a, b) => a - b),
      `steps in the order the API server saw them: ${steps.join(",")}`,
    );
    assert.deepEqual(new Set(canaries.map((c) => c!.startedAt)), new Set([first.startedAt]));
    const firstPauseEnds = new Set(
      canaries.filter((c) => c!.step === 0 && c!.pauseEndsAt).map((c) => c!.pauseEndsAt),
    );
    assert.deepEqual(firstPauseEnds, new Set([first.pauseEndsAt]), "step 1's pause was not restarted");
    assertNoFailures(traffic.report("steps"), "v2's canary through step 1, a SIGKILL, and step 2");
  });

  it("promote --step while no operator runs: the next operator ends the last step and promotes; then only v2 answers", async () => {
    const atStep2 = canaryOf(
      (await waitForModel(bed, name, "step 2 paused", (m) => canaryOf(m)?.step === 1))!,
    )!;
    await operator!.kill("SIGKILL");
    const out = await live.mlmodel(["promote", name, "--step"]);
    assert.match(out, /ending step 2's pause of the canary of revision/);
    await live.answers(ratePerSecond * 3, "the command waits for an operator");
    operator = await startOperator();
    const promoted = await live.canaryEnded("Promoted", atStep2.revision!, "v2");
    assert.equal(promoted.status?.revision?.lastReady, atStep2.revision);
    await live.onlyAnswers("promote after the last step", "v2", atStep2.stableRevision!);
    traffic.mark("steps end");
    const report = traffic.report("steps", "steps end");
    assertNoFailures(report, "two steps, two SIGKILLs, the promotion");
    console.log(`# canary steps through SIGKILLs: ${figures(report)}`);
  });
});
