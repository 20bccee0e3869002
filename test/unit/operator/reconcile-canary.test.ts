/**
 * The MLModel reconcile with a canary (spec.rollout.canary), without a cluster: each row walks
 * a model through a canary and asserts the exact writes of the next reconcile, in order, the
 * status it writes and the Events it records. The state machine and the desired children have
 * tests of their own (test/unit/operator/canary/); these prove the stages wire them.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job, V1Service } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { commandAnnotations, promoteAnnotation } from "../../../src/operator/canary/commands.ts";
import { httpRouteKind, trackLabel } from "../../../src/operator/canary/desired.ts";
import { canaryRecheckMs } from "../../../src/operator/mlmodel/canary.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import { pruneJobName } from "../../../src/operator/prune.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { pod } from "./fixtures.ts";
import { disallowedWrites, everyWrite, modelWorld, revisionOf, type World } from "./reconcile-harness.ts";

type Canary = NonNullable<NonNullable<MLModelSpec["rollout"]>["canary"]>;

const image = (tag: string, canary: Canary = { trafficPercent: 20 }): MLModelSpec => ({
  model: {},
  image: `registry.local/server:${tag}`,
  replicas: 5,
  rollout: { canary },
});
const downloaded = (version: string, canary: Canary = { trafficPercent: 20 }): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version },
  replicas: 5,
  rollout: { canary },
});

const world = modelWorld;

async function step(w: World): Promise<string[]> {
  const { writes } = await w.reconcile();
  w.settle();
  return writes;
}

function respec(w: World, spec: MLModelSpec): void {
  w.update<MLModel>(mlModelKind, "resnet", (m) => {
    m.spec = spec;
    m.metadata.generation = (m.metadata.generation ?? 1) + 1;
  });
}

/** What `mlmodel promote [--step]` writes for the canary the status shows. */
function promote(w: World, options: { step?: boolean } = {}): void {
  const command = promoteAnnotation(w.get<MLModel>(mlModelKind, "resnet")?.status?.canary, options);
  assert.ok(!("error" in command), JSON.stringify(command));
  w.update<MLModel>(mlModelKind, "resnet", (m) => {
    m.metadata.annotations = { ...m.metadata.annotations, [command.key]: command.value };
  });
}

/**
 * The Deployment `name` reports its rollout of its template done, and `replicas` ready pods of
 * its revision exist (with the canary's track label for the canary Deployment); pods of other
 * revisions on the same track are gone, as a finished rolling update leaves them.
 */
function rolledOut(w: World, name: string, replicas?: number): void {
  let revision = "";
  let count = 0;
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, name, (d) => {
    revision = d.spec?.template.metadata?.labels?.[labels.revision] ?? "";
    count = replicas ?? d.spec?.replicas ?? 1;
    d.metadata.generation = 1;
    d.status = {
      observedGeneration: 1,
      replicas: count,
      updatedReplicas: count,
      readyReplicas: count,
      availableReplicas: count,
    };
  });
  const canary = name.endsWith("-canary");
  const track = (p: KubeObject) => p.metadata.labels?.[trackLabel] === "canary";
  for (const p of w.list(builtinKinds.Pod))
    if (track(p as KubeObject) === canary) w.remove(builtinKinds.Pod, p.metadata.name!);
  for (let i = 0; i < count; i++) {
    const p = pod(`${name}-${revision}-${i}`, revision, { ready: true }) as KubeObject;
    if (canary) p.metadata.labels = { ...p.metadata.labels, [trackLabel]: "canary" };
    w.put(builtinKinds.Pod, p);
  }
}

/** A model Ready on `spec` with every replica of the stable Deployment ready. */
async function readyOn(spec: MLModelSpec): Promise<World> {
  const w = world(spec);
  await step(w);
  const dl = spec.model.uri ? childNames.download("resnet", contentHash(spec)) : undefined;
  if (dl) {
    setJob(w, dl, complete);
    await step(w);
  }
  rolledOut(w, "resnet");
  await step(w);
  assert.equal(w.lastStatus()?.phase, "Ready");
  w.newWrites();
  w.events.length = 0;
  return w;
}

/** A model whose canary of image 2 is paused at 20 %, the stable at 4 replicas. */
async function paused(canary: Canary = { trafficPercent: 20 }): Promise<World> {
  const w = await readyOn(image("1", canary));
  respec(w, image("2", canary));
  await step(w);
  rolledOut(w, "resnet-canary");
  await step(w);
  rolledOut(w, "resnet", 4);
  await step(w);
  assert.equal(w.lastStatus()?.canary?.phase, "Paused");
  w.newWrites();
  w.events.length = 0;
  return w;
}

function setJob(w: World, name: string, status: V1Job["status"]): void {
  w.update<KubeObject & V1Job>(builtinKinds.Job, name, (j) => {
    j.status = status;
  });
}
const complete = { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] };

const applied = <T>(w: World, kind: string, name: string): T =>
  w.client.writes.findLast((x) => x.verb === "apply" && x.kind.kind === kind && x.name === name)?.body as T;
const replicasOf = (w: World, deployment: string) =>
  applied<V1Deployment>(w, "Deployment", deployment).spec?.replicas;
const revisionApplied = (w: World, deployment: string) =>
  applied<V1Deployment>(w, "Deployment", deployment).spec?.template.metadata?.labels?.[labels.revision];
const events = (w: World) => w.events.map((e) => `${e.type} ${e.reason}`);

describe("reconcileMLModel with a canary: 20 % by replicas, promoted", () => {
  const v1 = image("1");
  const v2 = image("2");
  const [S, X] = [revisionOf(v1), revisionOf(v2)];

  it("walks start -> paused -> promote -> promoted with the exact writes of each reconcile", async () => {
    const w = await readyOn(v1);

    respec(w, v2);
    const start = await w.reconcile();
    w.settle();
    assert.deepEqual(start.writes, [
      `apply ControllerRevision/resnet-${X}`,
      "apply Deployment/resnet-canary",
      "apply Service/resnet-stable",
      "apply Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(start.result, { requeueAfterMs: canaryRecheckMs }, "a new canary is judged again");
    const canaryDeployment = applied<V1Deployment>(w, "Deployment", "resnet-canary");
    assert.equal(canaryDeployment.spec?.replicas, 1, "20 % of 5 replicas");
    assert.equal(canaryDeployment.spec?.template.metadata?.labels?.[labels.revision], X);
    assert.equal(canaryDeployment.spec?.template.metadata?.labels?.[trackLabel], "canary");
    const stableService = applied<V1Service>(w, "Service", "resnet-stable");
    assert.equal(stableService.spec?.selector?.[labels.revision], S);
    let s = w.lastStatus()!;
    assert.deepEqual([s.phase, s.canary?.phase, s.canary?.reason], ["Ready", "Progressing", "Started"]);
    assert.deepEqual([s.revision?.current, s.revision?.lastReady], [X, S], "current is the spec's");
    assert.deepEqual(
      s.revision?.serving?.map((r) => [r.role, r.revision, r.readyReplicas, r.trafficPercent]),
      [
        ["Stable", S, 5, 100],
        ["Canary", X, 0, 0],
      ],
    );
    assert.equal(s.canary?.canaryURL, "http://resnet-canary.ml.svc:8080");
    assert.equal(s.conditions?.find((c) => c.type === "Canary")?.reason, "Progressing");
    assert.deepEqual(events(w), ["Normal CanaryStarted"]);

    const again = await step(w);
    assert.deepEqual(again, [], "judged again: nothing moved, nothing written");

    // The canary's pod is ready: the stable gives up one replica, the step holds (indefinite pause).
    rolledOut(w, "resnet-canary");
    w.events.length = 0;
    assert.deepEqual(await step(w), ["apply Deployment/resnet", "applyStatus MLModel/resnet"]);
    assert.equal(replicasOf(w, "resnet"), 4);
    s = w.lastStatus()!;
    assert.deepEqual([s.canary?.phase, s.canary?.reason], ["Paused", "WaitingForPromotion"]);
    assert.equal(s.canary?.summary, "rev 2 at 20% (step 1/1, paused)");
    assert.deepEqual(events(w), ["Normal CanaryPaused"]);

    rolledOut(w, "resnet", 4);
    await step(w);
    s = w.lastStatus()!;
    assert.deepEqual(
      s.revision?.serving?.map((r) => [r.role, r.replicas, r.readyReplicas, r.trafficPercent]),
      [
        ["Stable", 4, 4, 80],
        ["Canary", 1, 1, 20],
      ],
    );
    assert.equal(s.phase, "Ready", "the model serves throughout");

    // mlmodel promote: the annotation names the canary (its revision and start).
    promote(w);
    w.events.length = 0;
    assert.deepEqual(await step(w), [
      "apply Deployment/resnet",
      "apply Service/resnet-stable",
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(
      applied<V1Service>(w, "Service", "resnet-stable").spec?.selector?.[labels.revision],
      undefined,
      "while the stable Deployment rolls, the stable URL reaches every serving pod",
    );
    const promoting = applied<V1Deployment>(w, "Deployment", "resnet");
    assert.equal(promoting.spec?.template.metadata?.labels?.[labels.revision], X, "the stable rolls to X");
    assert.equal(promoting.spec?.replicas, 5);
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Promoting", "PromotedByUser"],
    );
    assert.deepEqual(
      events(w),
      ["Normal CanaryPromoting"],
      "the canary's step; the rollout itself is said by status, as any",
    );

    // The stable Deployment serves X on every replica: X is the last ready revision...
    rolledOut(w, "resnet", 5);
    const done = await w.reconcile();
    w.settle();
    assert.deepEqual(done.writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.revision?.lastReady, X);
    assert.deepEqual(
      done.result,
      // The look at the stable's rolling pods (serving-pods.ts) is withdrawn: it has settled.
      { requeueAfterMs: canaryRecheckMs, replacesRequeue: true },
      "the promotion's end is judged next",
    );

    // ... and the next reconcile ends the canary: its Deployment and Services go.
    w.events.length = 0;
    assert.deepEqual(await step(w), [
      "delete Deployment/resnet-canary",
      "delete Service/resnet-canary",
      "delete Service/resnet-stable",
      "applyStatus MLModel/resnet",
    ]);
    s = w.lastStatus()!;
    assert.deepEqual([s.canary?.phase, s.canary?.reason], ["Promoted", "PromotedByUser"]);
    assert.equal(s.canary?.summary, undefined, "no Canary column once it ended");
    assert.equal(s.canary?.canaryURL, undefined);
    assert.equal(s.conditions?.find((c) => c.type === "Canary")?.status, "False");
    assert.deepEqual(events(w), ["Normal CanaryPromoted"]);
    assert.match(
      w.get(mlModelKind, "resnet")?.metadata.annotations?.[commandAnnotations.promote] ?? "",
      new RegExp(`^${X}@\\d+$`),
      "the spent command stays, inert: the operator writes only the status",
    );

    // The garbage collector removes the canary's pods: the status counts the stable's alone.
    for (const p of w.list(builtinKinds.Pod))
      if (p.metadata.labels?.[trackLabel]) w.remove(builtinKinds.Pod, p.metadata.name!);
    assert.deepEqual(await step(w), ["applyStatus MLModel/resnet"]);
    assert.deepEqual(
      [w.lastStatus()?.replicas, w.lastStatus()?.revision?.serving?.map((r) => [r.role, r.trafficPercent])],
      [5, [["Stable", 100]]],
    );
    assert.deepEqual(await step(w), [], "settled");
  });
});

describe("reconcileMLModel with a canary: commands", () => {
  it("a promote left behind never promotes a later canary of the same revision", async () => {
    const w = await paused();
    const X = revisionOf(image("2"));
    promote(w);
    await step(w);
    rolledOut(w, "resnet", 5);
    await step(w);
    await step(w);
    assert.equal(w.lastStatus()?.canary?.phase, "Promoted");
    // Revision 3 rolls out at once (trafficPercent 100), then the spec is back at X's: a new
    // canary of X, beside revision 3, with X's old promote command still on the model.
    respec(w, image("3", { trafficPercent: 100 }));
    await step(w);
    rolledOut(w, "resnet", 5);
    await step(w);
    await step(w);
    assert.equal(w.lastStatus()?.revision?.lastReady, revisionOf(image("3")));
    w.now = new Date("2026-01-01T01:00:00Z");
    respec(w, image("2"));
    await step(w);
    rolledOut(w, "resnet-canary");
    await step(w);
    const c = w.lastStatus()?.canary;
    assert.deepEqual([c?.revision, c?.phase, c?.reason], [X, "Paused", "WaitingForPromotion"]);
    assert.match(w.get(mlModelKind, "resnet")?.metadata.annotations?.[commandAnnotations.promote] ?? "", /@/);
  });

  it("a rollback's promote (by generation) promotes the canary of that spec at once", async () => {
    const w = await paused();
    const generation = (w.get<MLModel>(mlModelKind, "resnet")?.metadata.generation ?? 0) + 1;
    respec(w, image("0"));
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.metadata.annotations = { [commandAnnotations.promote]: `${revisionOf(image("0"))}@g${generation}` };
    });
    await step(w);
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Promoting", "PromotedByUser"],
    );
  });
});

describe("reconcileMLModel with a canary: steps, pauses and aborts", () => {
  /** A canary of 20 % held 5 minutes, then 60 %: started, its replica ready (not yet judged). */
  async function timedCanaryReady(): Promise<World> {
    const steps: Canary = {
      steps: [{ trafficPercent: 20, pause: { durationSeconds: 300 } }, { trafficPercent: 60 }],
    };
    const w = await readyOn(image("1", steps));
    respec(w, image("2", steps));
    await step(w);
    rolledOut(w, "resnet-canary");
    return w;
  }

  it("a timed pause holds the step and asks to be woken at its end, then moves on", async () => {
    const w = await timedCanaryReady();
    const pauseEnds = new Date(w.now.getTime() + 300_000);
    const paused = await w.reconcile();
    w.settle();
    assert.equal(w.lastStatus()?.canary?.phase, "Paused");
    assert.equal(w.lastStatus()?.canary?.pauseEndsAt, pauseEnds.toISOString());
    assert.deepEqual(paused.result, { requeueAfterMs: canaryRecheckMs }, "a transition: judged again soon");
    rolledOut(w, "resnet", 4);
    await step(w);
    const again = await w.reconcile();
    assert.deepEqual(again.writes, []);
    assert.deepEqual(
      again.result,
      { requeueAfterMs: pauseEnds.getTime() - w.now.getTime() + w.tickMs },
      "woken at the pause's end",
    );

    w.now = pauseEnds;
    w.events.length = 0;
    assert.deepEqual(await step(w), ["apply Deployment/resnet-canary", "applyStatus MLModel/resnet"]);
    assert.equal(replicasOf(w, "resnet-canary"), 3, "60 % of 5");
    assert.deepEqual([w.lastStatus()?.canary?.step, w.lastStatus()?.canary?.phase], [1, "Progressing"]);
    assert.deepEqual(events(w), ["Normal CanaryStep"]);
  });

  it("a cache that lags by two status writes never takes the canary a step back", async () => {
    const w = await timedCanaryReady();
    // Write A (paused at step 1) and, once the pause is over, write B (step 2, the canary
    // Deployment to 60 %) go out before the cache has seen either; then it sees all but B's
    // status: the canary Deployment at 60 % beside a status that still says step 1.
    const pauseEnds = new Date(w.now.getTime() + 300_000);
    assert.deepEqual((await w.reconcile()).writes, ["apply Deployment/resnet", "applyStatus MLModel/resnet"]);
    w.now = pauseEnds;
    const b = await w.reconcile();
    assert.deepEqual(b.writes, [
      "apply Deployment/resnet",
      "apply Deployment/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(w.lastStatus()?.canary?.step, 1);
    w.settle(4);
    assert.equal(w.get<MLModel>(mlModelKind, "resnet")?.status?.canary?.phase, "Paused", "the cache holds A");
    await w.reconcile();
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.step, w.lastStatus()?.canary?.effectivePercent],
      ["Progressing", 1, 60],
      "still on its way to step 2",
    );
    assert.equal(replicasOf(w, "resnet-canary"), 3, "60 %, not 20 % again");
    w.settle();
    assert.equal(w.get<MLModel>(mlModelKind, "resnet")?.status?.canary?.step, 1);
  });

  it("an indefinite pause ends with the resume command for that step", async () => {
    const steps: Canary = { steps: [{ trafficPercent: 20, pause: {} }, { trafficPercent: 40 }] };
    const w = await readyOn(image("1", steps));
    respec(w, image("2", steps));
    await step(w);
    rolledOut(w, "resnet-canary");
    await step(w);
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Paused", "StepPaused"],
    );
    promote(w, { step: true });
    assert.deepEqual(await step(w), ["apply Deployment/resnet-canary", "applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.canary?.step, 1);
    assert.equal(replicasOf(w, "resnet-canary"), 2, "40 % of 5");
  });

  it("a crash-looping canary is aborted: recorded, rolled back, its Deployment deleted, Warnings said", async () => {
    const w = await readyOn(image("1"));
    const X = revisionOf(image("2"));
    respec(w, image("2"));
    await step(w);
    w.put(builtinKinds.Pod, {
      ...(pod("resnet-canary-0", X, { waiting: "CrashLoopBackOff" }) as KubeObject),
      metadata: {
        name: "resnet-canary-0",
        labels: {
          [labels.model]: "resnet",
          [labels.component]: "server",
          [labels.revision]: X,
          [trackLabel]: "canary",
        },
      },
    });
    w.events.length = 0;
    const recorded = await w.reconcile();
    w.settle();
    // Nothing serves on the canary (no ready pod): it goes at once.
    assert.deepEqual(recorded.writes, [
      "delete Deployment/resnet-canary",
      "delete Service/resnet-stable",
      "delete Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(recorded.result, { requeueAfterMs: 100 });
    let s = w.lastStatus()!;
    assert.deepEqual([s.canary?.phase, s.canary?.reason], ["Aborting", "CrashLoopBackOff"]);
    assert.deepEqual([s.revision?.failed?.revision, s.revision?.failed?.reason], [X, "CrashLoopBackOff"]);
    assert.deepEqual(events(w), ["Warning CanaryAborting"]);

    w.events.length = 0;
    assert.deepEqual(await step(w), ["applyStatus MLModel/resnet"]);
    s = w.lastStatus()!;
    assert.deepEqual([s.phase, s.reason, s.canary?.phase], ["Ready", "RolledBack", "Aborted"]);
    assert.equal(s.conditions?.find((c) => c.type === "RolledBack")?.status, "True");
    assert.deepEqual(s.revision?.current, revisionOf(image("1")), "the stable revision serves");
    assert.deepEqual(events(w), ["Warning RolledBack", "Warning CanaryAborted"]);
    assert.equal(
      w.get<MLModel>(mlModelKind, "resnet")?.spec.image,
      "registry.local/server:2",
      "the spec as written",
    );
    assert.deepEqual(await step(w), [], "settled");
  });

  it("mlmodel rollback (the spec back at the stable revision) aborts a serving canary after the stable is whole again", async () => {
    const w = await paused();
    respec(w, image("1"));
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
      "apply Deployment/resnet",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(replicasOf(w, "resnet"), 5, "the stable scales back");
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Aborting", "RolledBack"],
    );
    assert.deepEqual(events(w), ["Warning CanaryAborting"]);
    rolledOut(w, "resnet", 5);
    assert.deepEqual(await step(w), [
      "delete Deployment/resnet-canary",
      "delete Service/resnet-stable",
      "delete Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(await step(w), ["applyStatus MLModel/resnet"]);
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Aborted", "RolledBack"],
    );
  });

  it("another owner's object named like a canary child: the canary waits, nothing is applied over it", async () => {
    const w = await readyOn(image("1"));
    w.put(builtinKinds.Service, {
      apiVersion: "v1",
      kind: "Service",
      metadata: {
        name: "resnet-canary",
        ownerReferences: [
          { apiVersion: "v1", kind: "MLModel", name: "resnet-canary", uid: "other", controller: true },
        ],
      },
    });
    respec(w, image("2"));
    w.events.length = 0;
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(image("2"))}`,
      "applyStatus MLModel/resnet",
    ]);
    const c = w.lastStatus()?.canary;
    assert.deepEqual([c?.phase, c?.reason], ["Waiting", "NameConflict"]);
    assert.match(c?.message ?? "", /Service resnet-canary belongs to MLModel resnet-canary/);
    assert.deepEqual(events(w), ["Warning CanaryWaiting"]);
  });
});

describe("reconcileMLModel with a canary: edits while it runs", () => {
  it("a third revision replaces the canary: one canary Deployment rolls to it, step 1 again", async () => {
    const w = await paused();
    const Y = revisionOf(image("3"));
    respec(w, image("3"));
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${Y}`,
      "apply Deployment/resnet",
      "apply Deployment/resnet-canary",
      "apply Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(
      replicasOf(w, "resnet"),
      5,
      "the stable takes its replica back until the new canary's is ready",
    );
    assert.equal(revisionApplied(w, "resnet-canary"), Y);
    const c = w.lastStatus()?.canary;
    assert.deepEqual([c?.phase, c?.reason, c?.step, c?.revision], ["Progressing", "Replaced", 0, Y]);
    assert.deepEqual(events(w), ["Normal CanaryReplaced"]);
  });

  it("editing the steps restarts the same canary at step 1; removing rollout.canary promotes it", async () => {
    const w = await paused();
    respec(w, image("2", { steps: [{ trafficPercent: 40, pause: {} }] }));
    assert.deepEqual(await step(w), ["apply Deployment/resnet-canary", "applyStatus MLModel/resnet"]);
    assert.equal(replicasOf(w, "resnet-canary"), 2, "40 % of 5");
    assert.deepEqual([w.lastStatus()?.canary?.reason, w.lastStatus()?.canary?.step], ["StepsChanged", 0]);
    assert.deepEqual(events(w), ["Normal CanaryRestarted"]);

    w.events.length = 0;
    const { rollout: _r, ...withoutCanary } = image("2");
    respec(w, withoutCanary);
    const writes = await step(w);
    assert.ok(writes.includes("apply Deployment/resnet"), `${writes}`);
    assert.equal(revisionApplied(w, "resnet"), revisionOf(image("2")));
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Promoting", "CanaryRemoved"],
    );
  });

  it("autoscaling: the autoscaler keeps the stable Deployment, the canary runs on top, the budget spans both", async () => {
    const scaled = (tag: string): MLModelSpec => {
      const { replicas: _r, ...spec } = image(tag);
      return { ...spec, autoscaling: { minReplicas: 4, maxReplicas: 10 } };
    };
    const w = await readyOn(scaled("1"));
    respec(w, scaled("2"));
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(scaled("2"))}`,
      "apply Deployment/resnet-canary",
      "apply Service/resnet-stable",
      "apply Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(replicasOf(w, "resnet-canary"), 1, "round(4 x 20 / 80)");
    const hpa = w.get<KubeObject & { spec: { scaleTargetRef: { name: string } } }>(
      builtinKinds.HorizontalPodAutoscaler,
      "resnet",
    );
    assert.equal(hpa?.spec.scaleTargetRef.name, "resnet", "the autoscaler scales the stable Deployment");
    const budget = w.get<KubeObject & { spec: { selector: { matchLabels: Record<string, string> } } }>(
      builtinKinds.PodDisruptionBudget,
      "resnet",
    );
    const canaryPods =
      applied<V1Deployment>(w, "Deployment", "resnet-canary").spec?.template.metadata?.labels ?? {};
    for (const [k, v] of Object.entries(budget?.spec.selector.matchLabels ?? {}))
      assert.equal(canaryPods[k], v, `the budget's ${k} selects the canary's pods too`);
    rolledOut(w, "resnet-canary");
    assert.deepEqual(
      await step(w),
      ["applyStatus MLModel/resnet"],
      "the stable's count stays the autoscaler's",
    );
    assert.equal(w.lastStatus()?.canary?.phase, "Paused");
  });
});

describe("reconcileMLModel with a canary: the Gateway API", () => {
  const gateway: Canary = {
    trafficPercent: 10,
    trafficRouting: { gatewayAPI: { parentRefs: [{ name: "public" }] } },
  };

  it("without HTTPRoutes in the cluster the canary waits and the stable serves alone", async () => {
    const w = await readyOn(image("1", gateway));
    respec(w, image("2", gateway));
    w.events.length = 0;
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(image("2", gateway))}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(
      [w.lastStatus()?.canary?.phase, w.lastStatus()?.canary?.reason],
      ["Waiting", "GatewayAPIUnavailable"],
    );
    assert.deepEqual(events(w), ["Warning CanaryWaiting"]);

    // The CRDs are installed: the route appears, pointing at the stable until the canary is ready.
    w.gatewayServed = true;
    const started = w.client.writes.length;
    assert.deepEqual(await step(w), [
      "apply Deployment/resnet-canary",
      "apply Service/resnet-stable",
      "apply Service/resnet-canary",
      "apply HTTPRoute/resnet",
      "applyStatus MLModel/resnet",
    ]);
    const weights = () =>
      (
        applied<KubeObject>(w, "HTTPRoute", "resnet").spec as {
          rules: { backendRefs: { name: string; weight: number }[] }[];
        }
      ).rules[0]!.backendRefs.map((b) => `${b.name}=${b.weight}`);
    assert.deepEqual(weights(), ["resnet-stable=100"]);
    assert.equal(replicasOf(w, "resnet-canary"), 1);

    w.newWrites();
    rolledOut(w, "resnet-canary");
    assert.deepEqual(await step(w), ["apply HTTPRoute/resnet", "applyStatus MLModel/resnet"]);
    assert.deepEqual(weights(), ["resnet-stable=90", "resnet-canary=10"]);
    const s = w.lastStatus()!;
    assert.deepEqual(
      [s.canary?.phase, s.canary?.mode, s.canary?.effectivePercent],
      ["Paused", "GatewayAPI", 10],
    );
    assert.deepEqual(
      s.revision?.serving?.map((r) => [r.role, r.replicas, r.trafficPercent]),
      [
        ["Stable", 5, 90],
        ["Canary", 1, 10],
      ],
      "the stable keeps every replica; shares are the route's weights",
    );
    const since = w.client.writes.slice(started);
    assert.ok(
      !since.some((x) => x.kind.kind === "Deployment" && x.name === "resnet"),
      "the stable Deployment keeps its replicas in a route split",
    );
  });
});

describe("reconcileMLModel with a canary: storage", () => {
  it("the canary's version downloads beside the stable one; both Jobs stay; an aborted canary's content is pruned", async () => {
    const v1 = downloaded("1");
    const v2 = downloaded("2");
    const [job1, job2] = [
      childNames.download("resnet", contentHash(v1)),
      childNames.download("resnet", contentHash(v2)),
    ];
    const w = await readyOn(v1);
    respec(w, v2);
    const first = await step(w);
    assert.deepEqual(first, [
      `apply ControllerRevision/resnet-${revisionOf(v2)}`,
      "apply ServiceAccount/resnet-downloader",
      "apply Role/resnet-downloader",
      "apply RoleBinding/resnet-downloader",
      `apply Job/${job2}`,
      "applyStatus MLModel/resnet",
    ]);
    let s = w.lastStatus()!;
    assert.deepEqual([s.phase, s.download?.job], ["Downloading", job2], "the canary's download is reported");
    assert.equal(s.canary?.phase, "Progressing", "the canary waits for its content");

    setJob(w, job2, complete);
    // Ready again (the stable serves): both versions are kept, so nothing is pruned.
    assert.deepEqual(await step(w), [
      "apply Deployment/resnet-canary",
      "apply Service/resnet-stable",
      "apply Service/resnet-canary",
      "applyStatus MLModel/resnet",
    ]);
    rolledOut(w, "resnet-canary");
    const paused = await step(w);
    assert.deepEqual(paused, ["apply Deployment/resnet", "applyStatus MLModel/resnet"], "both Jobs stay");
    s = w.lastStatus()!;
    assert.deepEqual([s.phase, s.canary?.phase], ["Ready", "Paused"]);

    // Abort: the spec goes back to version 1; the canary's content stays while it serves, and
    // once the canary is gone (Aborted) it is the loser and is pruned.
    rolledOut(w, "resnet", 4);
    await step(w);
    respec(w, v1);
    const aborting = await step(w);
    assert.equal(w.lastStatus()?.canary?.phase, "Aborting");
    // Going back to version 1 renumbers its revision as the newest, a gap in the numbers that
    // may as well be a revision gone: a prune Job runs, and it keeps what the canary serves.
    const bothKept = [contentHash(v1), contentHash(v2)].sort();
    const prunes = aborting.filter((x) => x.includes("-prune-"));
    assert.deepEqual(
      prunes,
      [`apply Job/${pruneJobName("resnet", bothKept)}`],
      "nothing pruned while it serves",
    );
    rolledOut(w, "resnet", 5);
    const gone = await step(w);
    assert.ok(gone.includes("delete Deployment/resnet-canary"), `${gone}`);
    const ended = await step(w);
    const jobWrites = [...aborting, ...gone, ...ended].filter((x) => x.includes("Job/resnet-dl"));
    assert.deepEqual(jobWrites, [`delete Job/${job2}`], "the canary's download Job goes, the stable's stays");
    assert.ok(w.get(builtinKinds.Job, job1), "the stable's download Job is kept");
    assert.equal(w.lastStatus()?.canary?.phase, "Aborted");
    assert.deepEqual(ended, [
      `delete Job/${pruneJobName("resnet", bothKept)}`,
      `apply Job/${pruneJobName("resnet", [contentHash(v1)])}`,
      "applyStatus MLModel/resnet",
    ]);
  });
});

describe("the no-canary path", () => {
  it("a model without spec.rollout.canary never reads or writes a canary child, nor routes", async () => {
    const plain: MLModelSpec = { model: {}, image: "registry.local/server:1", replicas: 5 };
    const w = world(plain);
    w.gatewayServed = true;
    await step(w);
    rolledOut(w, "resnet");
    await step(w);
    respec(w, { ...plain, image: "registry.local/server:2" });
    await step(w);
    const touched = w.client.writes.map((x) => `${x.kind.kind}/${x.name}`);
    assert.ok(!touched.some((t) => /canary|stable|HTTPRoute/.test(t)), touched.join(", "));
    assert.equal(w.lastStatus()?.canary, undefined);
    assert.equal(w.lastStatus()?.revision?.serving, undefined);
    assert.equal(w.store(httpRouteKind).list().length, 0);
  });
});

describe("the access table (RBAC) covers the canary's writes", () => {
  it("every write the canary reconciles above made is allowed; the model itself is never written", () => {
    const kinds = new Set(everyWrite.map((w) => `${w.verb} ${w.kind.kind}${w.subresource ? "/status" : ""}`));
    assert.ok(kinds.has("apply HTTPRoute"), [...kinds].join(", "));
    assert.ok(!kinds.has("patch MLModel") && !kinds.has("apply MLModel"), [...kinds].join(", "));
    assert.deepEqual(disallowedWrites(everyWrite), []);
  });
});
