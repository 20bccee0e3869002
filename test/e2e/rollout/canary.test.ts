/**
 * Canary rollouts end to end on the local control plane (kwok pods), the operator under its
 * own generated RBAC in a namespace that enforces `restricted`: a canary at 20 % by replicas
 * promoted with `mlmodel promote`; steps with a timed and an indefinite pause (resumed with
 * `mlmodel promote --step`); an abort with `mlmodel rollback` (a downloaded model: the canary's
 * version downloads beside the stable one and is pruned after); an abort by a canary that
 * crash-loops (kwok's simulate-crash-loop stage); an edit of the spec and a delete during a
 * canary; autoscaling and the disruption budget. Each ends with the right Deployments,
 * Services, revisions, status, conditions and Events, and nothing else carrying the model's
 * label. The Gateway API split is canary-gateway.test.ts (a private cluster: it needs the CRDs
 * absent first).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, describe, it } from "node:test";
import type { V1Deployment, V1Job, V1PodDisruptionBudget } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { commandAnnotations } from "../../../src/operator/canary/commands.ts";
import { labels } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import { pruneJobName } from "../../../src/operator/prune.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  operatorTestBed,
  provideVolume,
  type RunningOperator,
  removeTestBed,
  waitForPhase,
} from "../operator/helpers.ts";
import {
  applyModel,
  expectCanaryEvents,
  labelled,
  mlmodel,
  modelEvents,
  patchSpec,
  servingLines,
  servingPods,
  times,
  waitModel,
} from "./canary-helpers.ts";
import { sampleReadyPods } from "./sampler.ts";

const image = (tag: string) => `registry.example.com/team/server:${tag}`;
const served = (tag: string, extra: Partial<MLModelSpec> = {}): MLModelSpec => ({
  image: image(tag),
  model: { path: "/models/m" },
  replicas: 5,
  rollout: { canary: { trafficPercent: 20 } },
  ...extra,
});

describe("canary rollouts", { concurrency: true }, () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  const volumes: string[] = [];
  /** Samplers and pollers still running when a test fails: stopped at the end, whatever happened. */
  const running: { stop(): Promise<unknown> }[] = [];
  const sample = (name: string) => {
    const sampler = sampleReadyPods(admin, ns.name, name);
    running.push(sampler);
    return sampler;
  };

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-canary"));
  });

  after(async () => {
    await Promise.all(running.map((r) => r.stop()));
    await removeTestBed({ ns, admin, operator }, volumes);
  });

  async function ready(name: string, spec: MLModelSpec): Promise<MLModel> {
    await applyModel(admin, ns.name, name, spec);
    return waitForPhase(admin, ns.name, name, "Ready", undefined, 180_000);
  }
  const deployment = (name: string) =>
    admin.get<KubeObject & V1Deployment>(builtinKinds.Deployment, { namespace: ns.name, name });
  const revisionOf = (d: V1Deployment | undefined) => d?.spec?.template.metadata?.labels?.[labels.revision];

  /**
   * Waits until the canary holds its split: paused, with the split's replicas ready on both sides
   * and the model Ready. The pods' counts come first: the stable Deployment reports its scale-down
   * a moment later, and until then the status truly says Deploying ("waiting for Deployment ...
   * to report its rollout complete"; seen with the serving pods' preStop drain).
   */
  function paused(name: string, stable: number, canary: number, phase = "Paused"): Promise<MLModel> {
    return waitModel(admin, ns.name, name, `canary ${phase} with ${stable} + ${canary} ready`, (m) => {
      const [s, c] = m.status?.revision?.serving ?? [];
      return (
        m.status?.canary?.phase === phase &&
        m.status.phase === "Ready" &&
        s?.readyReplicas === stable &&
        s.replicas === stable &&
        c?.readyReplicas === canary &&
        c.replicas === canary
      );
    });
  }

  /** Waits until the canary ended as `phase` and only the stable revision's pods are left. */
  function ended(name: string, phase: "Promoted" | "Aborted", replicas = 5): Promise<MLModel> {
    return waitModel(admin, ns.name, name, `canary ${phase}, ${replicas} pods left`, (m) => {
      const serving = m.status?.revision?.serving ?? [];
      return (
        m.status?.canary?.phase === phase &&
        m.status.phase === "Ready" &&
        serving.length === 1 &&
        serving[0]?.readyReplicas === replicas &&
        serving[0].replicas === replicas &&
        m.status.replicas === replicas
      );
    });
  }

  it("20 % by replicas: 4 + 1 behind the one Service, paused; mlmodel promote moves every replica", async () => {
    const name = "r20";
    const v1 = await ready(name, served("1"));
    const S = v1.status!.revision!.current!;
    const sampler = sample(name);
    await patchSpec(admin, ns.name, name, { image: image("2") });

    const split = await paused(name, 4, 1);
    const X = split.status!.canary!.revision!;
    const c = split.status!.canary!;
    assert.notEqual(X, S);
    assert.deepEqual(
      [c.reason, c.step, c.steps, c.trafficPercent, c.effectivePercent, c.exact, c.mode],
      ["WaitingForPromotion", 0, 1, 20, 20, true, "Replicas"],
    );
    assert.equal(c.summary, "rev 2 at 20% (step 1/1, paused)");
    assert.equal(c.canaryURL, `http://${name}-canary.${ns.name}.svc:8080`);
    assert.equal(c.stableURL, `http://${name}-stable.${ns.name}.svc:8080`);
    assert.deepEqual(servingLines(split), [`Stable ${S} 4/4 80%`, `Canary ${X} 1/1 20%`]);
    assert.deepEqual(
      [split.status?.phase, split.status?.revision?.current, split.status?.revision?.lastReady],
      ["Ready", X, S],
      "the model serves throughout; the spec's revision is current, the stable one last ready",
    );
    const condition = split.status?.conditions?.find((x) => x.type === "Canary");
    assert.deepEqual([condition?.status, condition?.reason], ["True", "Paused"]);
    assert.deepEqual([revisionOf(await deployment(name)), (await deployment(name))?.spec?.replicas], [S, 4]);
    assert.deepEqual(
      [revisionOf(await deployment(`${name}-canary`)), (await deployment(`${name}-canary`))?.spec?.replicas],
      [X, 1],
    );
    assert.deepEqual(await labelled(admin, ns.name, name), {
      ControllerRevision: [`${name}-${S}`, `${name}-${X}`].sort(),
      Deployment: [name, `${name}-canary`],
      PodDisruptionBudget: [name],
      Service: [name, `${name}-canary`, `${name}-stable`],
    });
    assert.deepEqual(
      await servingPods(admin, ns.name, name),
      [...times(4, `${S} ready`), `${X}/canary ready`].sort(),
    );
    await expectCanaryEvents(admin, ns.name, name, ["CanaryStarted", "CanaryPaused"]);

    // At a glance: kubectl get mlm (the Canary printer column), mlmodel status and history.
    const { kubectl } = await ensureBinaries();
    const get = spawnSync(
      kubectl,
      ["get", "mlm", name, "-n", ns.name, "--kubeconfig", process.env.KUBECONFIG!],
      {
        encoding: "utf8",
      },
    );
    assert.equal(get.status, 0, get.stderr);
    assert.match(get.stdout, /CANARY/);
    assert.match(get.stdout, /rev 2 at 20% \(step 1\/1, paused\)/);
    const status = mlmodel(["status", name, "-n", ns.name]);
    assert.equal(status.status, 0, status.stderr);
    assert.match(status.stdout, /r1 4\/4 80% · r2 1\/1 20% · step 1\/1 Paused/);
    const history = mlmodel(["history", name, "-n", ns.name]);
    assert.match(history.stdout, /\n2\s+\S+\s+canary 20%/);
    assert.match(history.stdout, /\n1\s+\S+\s+stable 80%/);

    const promote = mlmodel(["promote", name, "-n", ns.name]);
    assert.equal(promote.status, 0, promote.stderr);
    assert.match(promote.stdout, new RegExp(`promoting the canary of revision 2 \\(${X}\\) of ${name}`));
    const done = await ended(name, "Promoted");
    assert.deepEqual([done.status?.revision?.lastReady, done.status?.revision?.current], [X, X]);
    assert.equal(done.status?.canary?.reason, "PromotedByUser");
    assert.equal(done.status?.canary?.summary, undefined);
    assert.deepEqual(servingLines(done), [`Stable ${X} 5/5 100%`]);
    assert.equal(done.status?.conditions?.find((x) => x.type === "Canary")?.status, "False");
    assert.match(
      done.metadata.annotations?.[commandAnnotations.promote] ?? "",
      new RegExp(`^${X}@\\d+$`),
      "the command names this canary (left in place, inert: the operator writes only status)",
    );
    assert.deepEqual([revisionOf(await deployment(name)), (await deployment(name))?.spec?.replicas], [X, 5]);
    await waitFor("only the stable Deployment and Service left", async () => {
      const now = await labelled(admin, ns.name, name);
      return now.Deployment?.join() === name && now.Service?.join() === name;
    });
    await waitFor(
      "5 ready pods of the promoted revision, none other",
      async () => (await servingPods(admin, ns.name, name)).join() === times(5, `${X} ready`).join(),
    );
    await expectCanaryEvents(admin, ns.name, name, [
      "CanaryStarted",
      "CanaryPaused",
      "CanaryPromoting",
      "CanaryPromoted",
    ]);
    const again = mlmodel(["promote", name, "-n", ns.name]);
    assert.equal(again.status, 1);
    assert.match(again.stderr, /already promoted/);
    const counts = await sampler.stop();
    assert.ok(
      Math.min(...counts) >= 5,
      `ready pods never below 5: min ${Math.min(...counts)} of ${counts.length} samples`,
    );
  });

  it("steps: a timed pause, then an indefinite one ended by mlmodel promote --step, then promoted after the last step", async () => {
    const name = "steps";
    const canary = {
      steps: [
        { trafficPercent: 20, pause: { durationSeconds: 5 } },
        { trafficPercent: 40, pause: {} },
        { trafficPercent: 60 },
      ],
    };
    await ready(name, served("1", { rollout: { canary } }));
    const seen: string[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const m = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name });
        const c = m?.status?.canary;
        const line = `${c?.phase} ${c?.step} ${c?.pauseEndsAt && c.stepReadyAt ? Date.parse(c.pauseEndsAt) - Date.parse(c.stepReadyAt) : "-"}`;
        if (c?.phase && seen.at(-1) !== line) seen.push(line);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    running.push({
      stop: async () => {
        polling = false;
        await poller;
      },
    });
    await patchSpec(admin, ns.name, name, { image: image("2") });
    const second = await paused(name, 5 - 2, 2);
    assert.deepEqual([second.status?.canary?.step, second.status?.canary?.reason], [1, "StepPaused"]);
    assert.match(second.status?.canary?.message ?? "", /held until mlmodel promote --step/);
    const tooSoon = mlmodel(["promote", name, "--step", "-n", ns.name]);
    assert.equal(tooSoon.status, 0, tooSoon.stderr);
    assert.match(tooSoon.stdout, /ending step 2's pause/);
    const done = await ended(name, "Promoted");
    polling = false;
    await poller;
    assert.equal(done.status?.canary?.reason, "Promoted");
    assert.ok(
      seen.includes("Paused 0 5000"),
      `the timed pause held 5 s from when the step was ready: ${seen}`,
    );
    const steps = seen.map((l) => Number(l.split(" ")[1]));
    assert.deepEqual(
      steps.filter((s, i) => s !== steps[i - 1]),
      [0, 1, 2],
      `the steps in order, each once: ${seen}`,
    );
    await expectCanaryEvents(admin, ns.name, name, [
      "CanaryStarted",
      "CanaryPaused",
      "CanaryStep",
      "CanaryPaused",
      "CanaryStep",
      "CanaryPromoting",
      "CanaryPromoted",
    ]);
    const after = mlmodel(["promote", name, "--step", "-n", ns.name]);
    assert.equal(after.status, 1, "a spent --step cannot be replayed on a promoted canary");
  });

  it("abort with mlmodel rollback: the stable takes every replica back, the canary goes, its downloaded version is pruned", async () => {
    const name = "abort";
    volumes.push(await provideVolume(admin, ns.name, `${name}-model`));
    const v1: MLModelSpec = {
      model: { uri: "https://models.example.com/m/v1.tgz", format: "tensorflow" },
      replicas: 5,
      rollout: { canary: { trafficPercent: 20 } },
    };
    const v2: MLModelSpec = { ...v1, model: { ...v1.model, uri: "https://models.example.com/m/v2.tgz" } };
    const first = await ready(name, v1);
    const S = first.status!.revision!.current!;
    const jobs = [contentHash(v1), contentHash(v2)].map((h) => `${name}-dl-${h}`);
    const sampler = sample(name);
    await patchSpec(admin, ns.name, name, { model: v2.model });
    const split = await paused(name, 4, 1);
    const X = split.status!.canary!.revision!;
    assert.equal(split.status?.download?.job, jobs[1], "the canary's download is the one reported");
    assert.deepEqual(
      (await labelled(admin, ns.name, name)).Job?.filter((j) => j.includes("-dl-")),
      [...jobs].sort(),
      "both versions' Jobs",
    );

    const rollback = mlmodel(["rollback", name, "-n", ns.name]);
    assert.equal(rollback.status, 0, rollback.stderr);
    assert.match(rollback.stdout, /rolling abort back to revision 1 .*\(the running canary is aborted\)/);
    const aborted = await ended(name, "Aborted");
    assert.deepEqual([aborted.status?.canary?.reason, aborted.status?.canary?.revision], ["RolledBack", X]);
    assert.equal(aborted.spec.model.uri, v1.model.uri, "the spec says what serves");
    assert.deepEqual(aborted.spec.rollout, split.spec.rollout, "the rollout block is kept");
    assert.equal(aborted.status?.revision?.current, S);
    await expectCanaryEvents(admin, ns.name, name, [
      "CanaryStarted",
      "CanaryPaused",
      "CanaryAborting",
      "CanaryAborted",
    ]);
    const keepOnlyV1 = pruneJobName(name, [contentHash(v1)]);
    await waitFor("the canary's content pruned, its Job gone", async () => {
      const now = await labelled(admin, ns.name, name);
      return now.Job?.join() === [jobs[0], keepOnlyV1].sort().join() ? now : undefined;
    });
    const prune = await admin.get<KubeObject & V1Job>(builtinKinds.Job, {
      namespace: ns.name,
      name: keepOnlyV1,
    });
    assert.deepEqual(
      prune?.spec?.template.spec?.containers[0]?.command?.slice(-1),
      [contentHash(v1)],
      "keeps v1 only",
    );
    assert.deepEqual(await labelled(admin, ns.name, name), {
      ControllerRevision: [`${name}-${S}`, `${name}-${X}`].sort(),
      Deployment: [name],
      Job: [jobs[0]!, keepOnlyV1].sort(),
      PodDisruptionBudget: [name],
      Service: [name],
    });
    const history = mlmodel(["history", name, "-n", ns.name]);
    assert.match(history.stdout, /\n3\s+\S+\s+serving/);
    assert.match(history.stdout, /\n2\s+\S+\s+aborted/);
    const counts = await sampler.stop();
    assert.ok(Math.min(...counts) >= 5, `ready pods never below 5: min ${Math.min(...counts)}`);
  });

  it("abort by a canary that crash-loops: recorded like an automatic rollback, the spec left as written", async () => {
    const name = "crash";
    const S = (await ready(name, served("1"))).status!.revision!.current!;
    const sampler = sample(name);
    await patchSpec(admin, ns.name, name, { image: "registry.example.com/simulate-crash-loop:2" });
    const aborted = await waitModel(
      admin,
      ns.name,
      name,
      "canary aborted",
      (m) => m.status?.canary?.phase === "Aborted",
    );
    const X = aborted.status!.canary!.revision!;
    assert.equal(aborted.status?.canary?.reason, "CrashLoopBackOff");
    assert.deepEqual(
      [aborted.status?.revision?.failed?.revision, aborted.status?.revision?.failed?.reason],
      [X, "CrashLoopBackOff"],
    );
    assert.deepEqual(
      [aborted.status?.phase, aborted.status?.reason, aborted.status?.revision?.current],
      ["Ready", "RolledBack", S],
    );
    assert.equal(aborted.status?.conditions?.find((x) => x.type === "RolledBack")?.status, "True");
    assert.equal(aborted.spec.image, "registry.example.com/simulate-crash-loop:2", "the spec as written");
    // An Event is recorded after the status that says it: wait for the last ones.
    const warnings = ["CanaryAborting", "CanaryAborted", "RolledBack"];
    let events = await modelEvents(admin, ns.name, name);
    const missing = () => warnings.filter((r) => !events.some((e) => e.reason === r && e.type === "Warning"));
    await waitFor(
      "the abort's Warning Events",
      async () => {
        events = await modelEvents(admin, ns.name, name);
        return missing().length === 0;
      },
      { timeoutMs: 30_000 },
    ).catch(() => {});
    assert.deepEqual(missing(), [], `Warning Events missing; recorded: ${events.map((e) => e.reason)}`);
    await waitFor(
      "only the stable revision's 5 pods",
      async () => (await servingPods(admin, ns.name, name)).join() === times(5, `${S} ready`).join(),
    );
    assert.deepEqual(await labelled(admin, ns.name, name), {
      ControllerRevision: [`${name}-${S}`, `${name}-${X}`].sort(),
      Deployment: [name],
      PodDisruptionBudget: [name],
      Service: [name],
    });
    const counts = await sampler.stop();
    assert.ok(Math.min(...counts) >= 5, `ready pods never below 5: min ${Math.min(...counts)}`);
  });

  it("edits during a canary (a third revision, new steps), then a delete: one canary Deployment, then nothing left", async () => {
    const name = "edit";
    await ready(name, served("1"));
    await patchSpec(admin, ns.name, name, { image: image("2") });
    const first = await paused(name, 4, 1);
    await patchSpec(admin, ns.name, name, { image: image("3") });
    const replaced = await paused(name, 4, 1);
    const Y = replaced.status!.canary!.revision!;
    assert.notEqual(Y, first.status?.canary?.revision);
    assert.equal(revisionOf(await deployment(`${name}-canary`)), Y, "the one canary Deployment rolled to it");
    assert.deepEqual((await labelled(admin, ns.name, name)).Deployment, [name, `${name}-canary`]);
    await patchSpec(admin, ns.name, name, { rollout: { canary: { trafficPercent: 40 } } });
    const restarted = await paused(name, 3, 2);
    assert.deepEqual([restarted.status?.canary?.revision, restarted.status?.canary?.step], [Y, 0]);
    await expectCanaryEvents(admin, ns.name, name, [
      "CanaryStarted",
      "CanaryPaused",
      "CanaryReplaced",
      "CanaryPaused",
      "CanaryRestarted",
      "CanaryPaused",
    ]);

    await admin.delete(mlModelKind, { namespace: ns.name, name });
    await waitFor("every child of the deleted model gone", async () => {
      const left = await labelled(admin, ns.name, name);
      const pods = await servingPods(admin, ns.name, name);
      return Object.keys(left).length === 0 && pods.length === 0;
    });
  });

  it("autoscaling and the disruption budget: the autoscaler keeps the stable, the canary runs on top, the budget counts both", async () => {
    const name = "hpa";
    const { replicas: _r, ...spec } = served("1");
    await ready(name, { ...spec, autoscaling: { minReplicas: 4, maxReplicas: 8 } });
    await patchSpec(admin, ns.name, name, { image: image("2") });
    const split = await paused(name, 4, 1);
    assert.equal(split.status?.canary?.effectivePercent, 20, "round(4 x 20 / 80) = 1 canary on top of 4");
    const hpa = await admin.get<KubeObject & { spec: { scaleTargetRef: { name: string } } }>(
      builtinKinds.HorizontalPodAutoscaler,
      { namespace: ns.name, name },
    );
    assert.equal(hpa?.spec.scaleTargetRef.name, name, "the autoscaler scales the stable Deployment");
    const budget = () =>
      admin.get<KubeObject & V1PodDisruptionBudget>(builtinKinds.PodDisruptionBudget, {
        namespace: ns.name,
        name,
      });
    await waitFor(
      "the budget to count both revisions' pods",
      async () => (await budget())?.status?.expectedPods === 5,
    );
    assert.equal((await budget())?.spec?.maxUnavailable, 1);
    assert.equal(mlmodel(["promote", name, "-n", ns.name]).status, 0);
    await ended(name, "Promoted", 4);
    await waitFor(
      "the budget back to the stable's pods",
      async () => (await budget())?.status?.expectedPods === 4,
    );
    assert.deepEqual((await labelled(admin, ns.name, name)).Deployment, [name]);
  });

  it("mlmodel promote refuses a model without a canary and an unknown model", async () => {
    await ready("plain", { image: image("1"), model: { path: "/models/m" } });
    const plain = mlmodel(["promote", "plain", "-n", ns.name]);
    assert.equal(plain.status, 1);
    assert.match(plain.stderr, /has no canary: spec.rollout.canary is not set/);
    const unknown = mlmodel(["promote", "nope", "-n", ns.name]);
    assert.equal(unknown.status, 1);
    assert.match(unknown.stderr, /MLModel "nope" not found/);
  });
});
