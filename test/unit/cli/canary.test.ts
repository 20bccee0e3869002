/**
 * The CLI around a canary, pure parts: what `mlmodel promote` writes (and its refusals), what
 * `mlmodel rollback` writes with a canary, and how status, describe and history show the split.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { CanaryStatus, MLModel } from "../../../src/api/mlmodel.ts";
import { promoteRequest } from "../../../src/cli/commands/promote.ts";
import { rollbackPatch } from "../../../src/cli/commands/rollback.ts";
import { renderDescribe } from "../../../src/cli/views/describe.ts";
import { canaryCell, renderStatusTable } from "../../../src/cli/views/status.ts";
import { plainStyle } from "../../../src/cli/views/style.ts";
import { commandAnnotations } from "../../../src/operator/canary/commands.ts";
import { historyEntries, revisionSpec } from "../../../src/operator/revisions.ts";
import { now, readyModel } from "./fixtures.ts";

const [S, X] = ["7c1e000001", "9f2a000002"];

const paused: CanaryStatus = {
  revision: X,
  revisionNumber: 4,
  stableRevision: S,
  stableRevisionNumber: 3,
  phase: "Paused",
  reason: "WaitingForPromotion",
  message:
    "revision 4 (9f2a000002) serves 20% of the traffic beside revision 3 (7c1e000001) at step 1/1, held until mlmodel promote",
  step: 0,
  steps: 1,
  trafficPercent: 20,
  effectivePercent: 20,
  exact: true,
  mode: "Replicas",
  startedAt: "2026-11-21T11:58:00Z",
  stableURL: "http://resnet-stable.models.svc:8501",
  canaryURL: "http://resnet-canary.models.svc:8501",
  summary: "rev 4 at 20% (step 1/1, paused)",
};

function withCanary(canary: CanaryStatus | undefined, spec: Partial<MLModel["spec"]> = {}): MLModel {
  const m = structuredClone(readyModel);
  m.spec = { ...m.spec, replicas: 5, rollout: { canary: { trafficPercent: 20 } }, ...spec };
  m.metadata.resourceVersion = "42";
  m.status = {
    ...m.status,
    ...(canary ? { canary } : {}),
    revision: {
      current: X,
      lastReady: S,
      serving: [
        { revision: S, number: 3, role: "Stable", replicas: 4, readyReplicas: 4, trafficPercent: 80 },
        { revision: X, number: 4, role: "Canary", replicas: 1, readyReplicas: 1, trafficPercent: 20 },
      ],
    },
  };
  return m;
}

describe("mlmodel promote", () => {
  it("names the canary's revision, or its revision and step with --step", () => {
    assert.deepEqual(promoteRequest(withCanary(paused)), {
      key: commandAnnotations.promote,
      value: `${X}@${Date.parse(paused.startedAt!)}`,
      describe: `promoting the canary of revision 4 (${X}) of resnet`,
    });
    const stepped = promoteRequest(withCanary({ ...paused, steps: 3, step: 1, reason: "StepPaused" }), {
      step: true,
    });
    assert.deepEqual(stepped, {
      key: commandAnnotations.resume,
      value: `${X}@${Date.parse(paused.startedAt!)}:1`,
      describe: `ending step 2's pause of the canary of revision 4 (${X}) of resnet`,
    });
  });

  it("refuses with a reason a person can act on", () => {
    const refusal = (m: MLModel, step = false) => {
      const r = promoteRequest(m, { step });
      assert.ok("error" in r, JSON.stringify(r));
      return r.error;
    };
    const plain = structuredClone(readyModel);
    assert.match(refusal(plain), /has no canary: spec.rollout.canary is not set/);
    assert.match(refusal(withCanary({ ...paused, phase: "Promoting" })), /already being promoted/);
    assert.match(refusal(withCanary({ ...paused, phase: "Promoted" })), /already promoted/);
    assert.match(
      refusal(withCanary({ ...paused, phase: "Aborted", reason: "CrashLoopBackOff" })),
      /no canary is running \(the last canary, of revision 9f2a000002, is Aborted\)/,
    );
    assert.match(
      refusal(withCanary({ ...paused, phase: "Progressing" }), true),
      /not paused: --step ends a pause/,
    );
    const behind = withCanary(paused);
    behind.metadata.generation = 2;
    assert.match(refusal(behind), /describes generation 1, the spec is at 2/);
  });
});

describe("mlmodel rollback with a canary", () => {
  const revision = (hash: string, number: number, spec: MLModel["spec"]): V1ControllerRevision => ({
    metadata: { name: `resnet-${hash}`, labels: { "serving.mlmodel.dev/revision": hash } },
    revision: number,
    data: { spec },
  });
  const oldSpec: MLModel["spec"] = {
    model: { uri: "https://models.example.com/resnet.tar.gz", version: "1" },
    rollout: { maxSurge: 3 },
  };

  it("to the stable revision: its serving spec with today's scaling and rollout block, no command", () => {
    const m = withCanary(paused);
    const target = revision(S, 3, oldSpec);
    const patch = rollbackPatch(m, target, revisionSpec(target)!);
    assert.deepEqual(patch, [
      { op: "test", path: "/metadata/resourceVersion", value: "42" },
      {
        op: "replace",
        path: "/spec",
        value: { model: oldSpec.model, replicas: 5, rollout: { canary: { trafficPercent: 20 } } },
      },
    ]);
  });

  it("to another revision: promoted at once, named by the generation the spec gets (a rollback never waits on canary steps)", () => {
    const m = withCanary(paused);
    const target = revision("0ld0000001", 1, oldSpec);
    const patch = rollbackPatch(m, target, revisionSpec(target)!);
    assert.deepEqual(patch[2], {
      op: "add",
      path: "/metadata/annotations",
      value: { [commandAnnotations.promote]: "0ld0000001@g2" },
    });
    m.metadata.annotations = { note: "x" };
    assert.deepEqual(rollbackPatch(m, target, revisionSpec(target)!)[2], {
      op: "add",
      path: "/metadata/annotations/serving.mlmodel.dev~1canary-promote",
      value: "0ld0000001@g2",
    });
  });
});

describe("the split at a glance", () => {
  it("status: a CANARY column only when a model runs a canary", () => {
    const table = renderStatusTable([withCanary(paused)], { now, style: plainStyle() });
    const [header, row] = table.split("\n");
    assert.match(header!, /URL\s+CANARY\s+AGE/);
    assert.match(row!, /r3 4\/4 80% · r4 1\/1 20% · step 1\/1 Paused/);
    assert.doesNotMatch(renderStatusTable([readyModel], { now, style: plainStyle() }), /CANARY/);
    assert.equal(canaryCell(withCanary({ ...paused, phase: "Promoted" })), "-");
  });

  it("describe: the canary's phase, step, split, URLs and each serving revision", () => {
    const text = renderDescribe({
      model: withCanary(paused),
      children: [],
      events: [],
      now,
      style: plainStyle(),
    });
    const canary = text.slice(text.indexOf("Canary:"));
    for (const line of [
      /Phase:\s+Paused \(WaitingForPromotion\)/,
      /Canary:\s+revision 4 \(9f2a000002\)/,
      /Stable:\s+revision 3 \(7c1e000001\)/,
      /Step:\s+1 of 1/,
      /Traffic:\s+20% asked, 20% given, split by Replicas/,
      /Canary URL:\s+http:\/\/resnet-canary\.models\.svc:8501/,
      /3\s+7c1e000001\s+Stable\s+4\/4\s+80%/,
      /4\s+9f2a000002\s+Canary\s+1\/1\s+20%/,
    ])
      assert.match(canary, line);
    const coarse = renderDescribe({
      model: withCanary({ ...paused, trafficPercent: 10, effectivePercent: 33, exact: false }),
      children: [],
      events: [],
      now,
      style: plainStyle(),
    });
    assert.match(coarse, /10% asked, 33% given \(coarse/);
    assert.doesNotMatch(
      renderDescribe({ model: readyModel, children: [], events: [], now, style: plainStyle() }),
      /\nCanary:/,
    );
  });

  it("history: stable and canary shares while one runs; aborted on the loser after", () => {
    const revs = [
      { metadata: { labels: { "serving.mlmodel.dev/revision": S } }, revision: 3 },
      { metadata: { labels: { "serving.mlmodel.dev/revision": X } }, revision: 4 },
    ] as V1ControllerRevision[];
    const marks = (m: MLModel) => historyEntries(revs, m.status).map((e) => [e.number, e.marks]);
    assert.deepEqual(marks(withCanary(paused)), [
      [4, ["canary 20%"]],
      [3, ["stable 80%"]],
    ]);
    const aborted = withCanary({ ...paused, phase: "Aborted" });
    aborted.status!.revision!.serving = [aborted.status!.revision!.serving![0]!];
    assert.deepEqual(marks(aborted), [
      [4, ["aborted"]],
      [3, ["serving"]],
    ]);
    const waiting = withCanary({ ...paused, phase: "Waiting" });
    waiting.status!.revision!.serving = [waiting.status!.revision!.serving![0]!];
    assert.deepEqual(marks(waiting), [
      [4, ["canary waiting"]],
      [3, ["stable 80%"]],
    ]);
  });
});
