/**
 * The MLModel reconcile as a whole, without a cluster: each row walks a model to a state
 * (through earlier reconciles whose writes the caches then see) and asserts the exact writes
 * the next reconcile makes, in order, and what it says. The stages' pure parts have tests of
 * their own (status.test.ts, rollback.test.ts, revisions.test.ts, plan-desired.test.ts, and
 * the stage tests at the end of this file).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job, V1Secret } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { downloaderStatusFields, modelUriEnv } from "../../../src/downloader/contract.ts";
import { cacheKey } from "../../../src/nodecache/contract.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { uriSecretKey, uriSecretType } from "../../../src/operator/desired.ts";
import {
  modelOfPod,
  modelReferences,
  secretWithoutValues,
  uriSecretModelKeys,
} from "../../../src/operator/mlmodel/caches.ts";
import { addMLModelController } from "../../../src/operator/mlmodel/controller.ts";
import { decide } from "../../../src/operator/mlmodel/decide.ts";
import { lookAgainBoundsMs, lookWhileClaimPendingMs } from "../../../src/operator/mlmodel/download-pods.ts";
import { ModelMemory } from "../../../src/operator/mlmodel/memory.ts";
import { observe } from "../../../src/operator/mlmodel/observe.ts";
import { countsSettleMs, downloadCountsSettleMs } from "../../../src/operator/mlmodel/report.ts";
import { OwnWrites } from "../../../src/operator/mlmodel/wakes.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import { pruneJobName } from "../../../src/operator/prune.ts";
import {
  builtinKinds,
  KubeClient,
  type KubeObject,
  kindName,
  Manager,
  type ResourceKind,
} from "../../../src/runtime/index.ts";
import { pod } from "./fixtures.ts";
import {
  disallowedWrites,
  everyWrite,
  line,
  mlModel,
  modelWorld,
  revisionOf,
  type World,
} from "./reconcile-harness.ts";

const downloaded = (version: string, extra: Partial<MLModelSpec["model"]> = {}): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version, ...extra },
});
const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });

const jobOf = (spec: MLModelSpec) => childNames.download("resnet", contentHash(spec));
const identity = ["ServiceAccount", "Role", "RoleBinding"].map((k) => `apply ${k}/resnet-downloader`);

const world = modelWorld;

function setJob(w: World, name: string, status: V1Job["status"]): void {
  w.update<KubeObject & V1Job>(builtinKinds.Job, name, (j) => {
    j.status = status;
  });
}
const complete = { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] };

/** The download Job is active and its pod runs (the download has started): the Job counts it ready. */
function runDownload(w: World, spec: MLModelSpec): void {
  setJob(w, jobOf(spec), { active: 1, ready: 1 });
  w.put(builtinKinds.Pod, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: `${jobOf(spec)}-0`,
      labels: { [labels.model]: "resnet", [labels.component]: "download", "job-name": jobOf(spec) },
    },
    status: { phase: "Running" },
  } as KubeObject);
}
const failed = {
  failed: 1,
  conditions: [{ type: "Failed", status: "True", reason: "PodFailurePolicy", message: "exit code 1" }],
};

/** The Deployment reports its rollout done and `replicas` pods of `revision` are ready. */
function rolledOut(w: World, revision: string, replicas = 1): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.metadata.generation = 1;
    d.status = {
      observedGeneration: 1,
      replicas,
      updatedReplicas: replicas,
      readyReplicas: replicas,
      availableReplicas: replicas,
    };
  });
  for (let i = 0; i < replicas; i++)
    w.put(builtinKinds.Pod, pod(`resnet-${revision}-${i}`, revision, { ready: true }) as KubeObject);
}

function respec(w: World, spec: MLModelSpec): void {
  w.update<MLModel>(mlModelKind, "resnet", (m) => {
    m.spec = spec;
    m.metadata.generation = (m.metadata.generation ?? 1) + 1;
  });
}

/** Reconciles and lets the caches see the writes. */
async function step(w: World): Promise<string[]> {
  const { writes } = await w.reconcile();
  w.settle();
  return writes;
}

/** A downloaded model serving version `version`, Ready. */
function readyOn(version: string): Promise<World> {
  return readyWith(downloaded(version));
}

/** A model downloaded and serving `spec`, Ready. */
async function readyWith(spec: MLModelSpec): Promise<World> {
  const w = world(spec);
  await step(w);
  setJob(w, jobOf(spec), complete);
  await step(w);
  rolledOut(w, revisionOf(spec));
  await step(w);
  assert.equal(w.lastStatus()?.phase, "Ready");
  w.newWrites();
  w.events.length = 0;
  return w;
}

describe("reconcileMLModel: the writes of each situation", () => {
  const v1 = downloaded("1");
  const v2 = downloaded("2");

  it("a new downloaded model: revision, storage, the download Job and its identity; no Deployment yet", async () => {
    const w = world(v1);
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, [
      `apply ControllerRevision/resnet-${revisionOf(v1)}`,
      "apply PersistentVolumeClaim/resnet-model",
      ...identity,
      `apply Job/${jobOf(v1)}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(
      result,
      { requeueAfterMs: lookWhileClaimPendingMs },
      "a Job with no pod ready is looked at again (its pods are not watched), seldom while the claim is not bound (its binding wakes the model)",
    );
    assert.deepEqual(w.client.lists, [], "no Job yet: no pod to read");
    const forced = w.client.writes.filter((x) => x.force).map(line);
    assert.ok(!forced.some((x) => x.includes("downloader")), "the identity is applied without force");
    assert.deepEqual(w.lastStatus()?.download, { job: jobOf(v1), jobState: "Pending", attempts: 0 });
    assert.equal(
      w.lastStatus()?.message,
      `Job ${jobOf(v1)} waits for its volume (claim resnet-model) to download s3://models/resnet`,
    );
    assert.deepEqual(w.events, [], "a healthy step is said by status alone");
  });

  it("the Deployment is untouched until the download completes, then applied with the Service", async () => {
    const w = world(v1);
    await step(w);
    runDownload(w, v1);
    assert.deepEqual(await step(w), ["applyStatus MLModel/resnet"], "running: only the status moves");
    assert.equal(w.lastStatus()?.download?.jobState, "Running");
    setJob(w, jobOf(v1), complete);
    assert.deepEqual(await step(w), [
      "apply Deployment/resnet",
      "apply Service/resnet",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(w.lastStatus()?.phase, "Deploying");
  });

  it("a change of counts alone right after a status write waits for the next step; a new phase does not", async () => {
    const w = world(v1);
    w.tickMs = 0;
    w.followHeldCounts = false;
    await step(w);
    runDownload(w, v1);
    const running = await w.reconcile();
    assert.deepEqual(running.writes, [], "Pending -> Running, a moment after Downloading: held back");
    assert.deepEqual(
      running.result,
      { requeueAfterMs: downloadCountsSettleMs, replacesRequeue: true },
      "and the look asked for while the Job had no pod ready is withdrawn",
    );
    w.now = new Date(w.now.getTime() + countsSettleMs);
    const later = await w.reconcile();
    assert.deepEqual(later.writes, [], "while downloading, held longer than within other steps");
    assert.deepEqual(later.result, {
      requeueAfterMs: downloadCountsSettleMs - countsSettleMs,
      replacesRequeue: true,
    });
    w.now = new Date(w.now.getTime() + downloadCountsSettleMs - countsSettleMs);
    assert.deepEqual(
      (await w.reconcile()).writes,
      ["applyStatus MLModel/resnet"],
      "written when the time is up",
    );
    assert.equal(w.lastStatus()?.download?.jobState, "Running");
    w.settle();
    setJob(w, jobOf(v1), complete);
    const deploying = await w.reconcile();
    assert.deepEqual(deploying.writes, [
      "apply Deployment/resnet",
      "apply Service/resnet",
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(w.lastStatus()?.phase, "Deploying", "a new phase is written at once");
    assert.equal(deploying.result, undefined);
    w.settle();
    // Within Deploying, counts wait countsSettleMs (a pod ready, not yet the rollout complete).
    w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
      d.status = { observedGeneration: 0, replicas: 1, updatedReplicas: 1 };
    });
    w.put(builtinKinds.Pod, pod(`resnet-${revisionOf(v1)}-0`, revisionOf(v1), { ready: true }) as KubeObject);
    const counted = await w.reconcile();
    assert.deepEqual(counted.writes, []);
    assert.deepEqual(counted.result, { requeueAfterMs: countsSettleMs });
  });

  it("nothing changed: no write at all", async () => {
    const w = await readyOn("1");
    assert.deepEqual(await step(w), []);
    assert.deepEqual(w.events, []);
  });

  it("a new version: a new revision and a new download Job; the old Job and the Deployment stay", async () => {
    const w = await readyOn("1");
    // The downloader's progress of version 1 is in status (it owns those fields).
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.status = { ...m.status, download: { ...m.status?.download, bytesDone: 10, progress: "100%" } };
    });
    respec(w, v2);
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, [
      `apply ControllerRevision/resnet-${revisionOf(v2)}`,
      ...identity,
      "patch MLModel/resnet",
      `apply Job/${jobOf(v2)}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(
      result,
      { requeueAfterMs: lookWhileClaimPendingMs },
      "the new Job has no pod ready yet (and the test's claim says no phase: not bound)",
    );
    const patch = w.client.writes.find((x) => x.verb === "patch")?.body as { status: { download: object } };
    assert.deepEqual(
      patch.status.download,
      Object.fromEntries(downloaderStatusFields.map((f) => [f, null])),
      "the previous download's progress is cleared, the operator's fields kept",
    );
    assert.equal(w.lastStatus()?.phase, "Downloading");
  });

  /** A new model whose claim (created now) is in `claimPhase`, with its download pod still unscheduled for it. */
  async function downloadPodUnscheduledForClaim(claimPhase: "Pending" | "Bound") {
    const w = world(v1);
    await step(w);
    w.update<KubeObject>(builtinKinds.PersistentVolumeClaim, "resnet-model", (c) => {
      c.metadata.creationTimestamp = w.now.toISOString();
      (c as { status?: unknown }).status = { phase: claimPhase };
    });
    setJob(w, jobOf(v1), { active: 1 });
    const unbound = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found";
    w.put(builtinKinds.Pod, {
      ...pod("resnet-dl-0", "", { unschedulable: unbound }),
      metadata: {
        name: "resnet-dl-0",
        labels: { [labels.model]: "resnet", [labels.component]: "download", "job-name": jobOf(v1) },
      },
    } as KubeObject);
    return w;
  }

  it("a download pod waiting for the new claim's volume: Downloading, looked at again when the grace ends (the claim's binding wakes it before), then Unschedulable", async () => {
    const w = await downloadPodUnscheduledForClaim("Pending");
    const waiting = await w.reconcile();
    assert.deepEqual(waiting.writes, [], "said from the Job's creation: it waits for its volume");
    assert.equal(w.lastStatus()?.reason, "Downloading");
    assert.match(w.lastStatus()?.message ?? "", /waits for its volume \(claim resnet-model\)/);
    assert.deepEqual(
      waiting.result,
      { requeueAfterMs: 300_100 },
      "looked at again when the grace ends: the claim's binding would wake it before",
    );
    assert.deepEqual(w.client.lists, [`Pod ${labels.model}=resnet,${labels.component}=download`]);
    assert.equal(w.events.length, 0, "the normal wait for a volume is no problem");
    w.settle();
    w.now = new Date(w.now.getTime() + 301_000);
    const late = await w.reconcile();
    assert.deepEqual(late.writes, ["applyStatus MLModel/resnet"]);
    assert.deepEqual([w.lastStatus()?.phase, w.lastStatus()?.reason], ["Pending", "Unschedulable"]);
    assert.deepEqual(
      late.result,
      { requeueAfterMs: lookWhileClaimPendingMs },
      "still no pod ready, the claim not bound: looked at again, seldom",
    );
    assert.deepEqual(
      w.events.map((e) => `${e.type} ${e.reason}`),
      ["Warning Unschedulable"],
    );
  });

  it("once the claim is bound, a download pod still showing the scheduler's old verdict is looked at again within seconds", async () => {
    const w = await downloadPodUnscheduledForClaim("Bound");
    const bound = await w.reconcile();
    assert.equal(w.lastStatus()?.reason, "Downloading");
    assert.deepEqual(
      bound.result,
      { requeueAfterMs: lookAgainBoundsMs.min },
      "no event would say what the pod does next",
    );
  });

  it("a running Job whose template is no longer wanted is deleted, and the reconcile comes back for it", async () => {
    const w = world(v1);
    await step(w);
    setJob(w, jobOf(v1), { active: 1 });
    await step(w);
    w.config.downloaderImage = "registry.local/mlmodel:next";
    const { writes, result } = await w.reconcile();
    // The status (a Job being started again) is a change of counts alone: it goes with the
    // new Job, when the reconcile comes back.
    assert.deepEqual(writes, [`delete Job/${jobOf(v1)}`]);
    assert.deepEqual(result, { requeueAfterMs: 1000 });
    w.settle();
    assert.deepEqual(
      (await w.reconcile()).writes,
      [...identity, `apply Job/${jobOf(v1)}`],
      "the new Job waits for its pod as the old one did: the status says the same",
    );
  });

  it("a download's pods are read only while its Job needs them: no pod ready (an image that cannot be pulled), or failed", async () => {
    const w = world(v1);
    await step(w);
    const downloadPod = (name: string, status: object): KubeObject =>
      ({
        apiVersion: "v1",
        kind: "Pod",
        metadata: {
          name,
          creationTimestamp: w.now.toISOString(),
          labels: { [labels.model]: "resnet", [labels.component]: "download", "job-name": jobOf(v1) },
        },
        status,
      }) as KubeObject;
    w.update<KubeObject>(builtinKinds.PersistentVolumeClaim, "resnet-model", (c) => {
      (c as { status?: unknown }).status = { phase: "Bound" };
    });
    const download = (state: object) => [
      { name: "download", image: "dl:1", ready: false, restartCount: 0, state },
    ];
    setJob(w, jobOf(v1), { active: 1, ready: 0 });
    w.put(
      builtinKinds.Pod,
      downloadPod("resnet-dl-0", {
        phase: "Pending",
        containerStatuses: download({ waiting: { reason: "ErrImagePull", message: "not found" } }),
      }),
    );
    assert.equal(w.store(builtinKinds.Pod).list().length, 0, "download pods are not cached");
    const pulling = await w.reconcile();
    assert.deepEqual(w.client.lists, [`Pod ${labels.model}=resnet,${labels.component}=download`]);
    assert.deepEqual(pulling.writes, ["applyStatus MLModel/resnet"]);
    assert.deepEqual([w.lastStatus()?.phase, w.lastStatus()?.reason], ["Failed", "ImagePullBackOff"]);
    assert.match(w.lastStatus()?.message ?? "", /download: pod resnet-dl-0: cannot pull image "dl:1"/);
    assert.deepEqual(pulling.result, { requeueAfterMs: lookAgainBoundsMs.min }, "and looked at again");
    w.settle();

    w.client.lists.length = 0;
    setJob(w, jobOf(v1), { active: 1, ready: 1 });
    w.put(
      builtinKinds.Pod,
      downloadPod("resnet-dl-0", { phase: "Running", containerStatuses: download({ running: {} }) }),
    );
    const running = await w.reconcile();
    assert.deepEqual(w.client.lists, [], "a pod ready: the Job's count says it all");
    assert.deepEqual([w.lastStatus()?.phase, w.lastStatus()?.download?.jobState], ["Downloading", "Running"]);
    assert.equal(w.lastStatus()?.download?.attempts, 1);
    assert.deepEqual(running.result, { replacesRequeue: true }, "the look asked for is withdrawn");
    w.settle();

    const said = "GET https://models.example/resnet: 403 Forbidden; check the credentials";
    w.put(
      builtinKinds.Pod,
      downloadPod("resnet-dl-0", {
        phase: "Failed",
        containerStatuses: download({ terminated: { exitCode: 1, reason: "Error", message: said } }),
      }),
    );
    setJob(w, jobOf(v1), failed);
    await w.reconcile();
    assert.deepEqual(w.client.lists, [`Pod ${labels.model}=resnet,${labels.component}=download`]);
    assert.equal(w.lastStatus()?.reason, "DownloadFailed");
    assert.match(
      w.lastStatus()?.message ?? "",
      /after 1 attempt\(s\) \(PodFailurePolicy\): GET https:\/\/models\.example\/resnet: 403 Forbidden/,
    );
  });

  it("a failed download is retried when its credentials Secret changes, not before", async () => {
    const spec = downloaded("1", { credentialsSecretRef: { name: "s3" } });
    const secret = { apiVersion: "v1", kind: "Secret", metadata: { name: "s3" }, data: { key: "c2VjcmV0" } };
    const w = world(spec, [builtinKinds.Secret, secret]);
    await step(w);
    setJob(w, jobOf(spec), failed);
    assert.deepEqual(await step(w), ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.reason, "DownloadFailed");
    assert.deepEqual(await step(w), [], "same inputs: the failure stands");
    w.put(builtinKinds.Secret, { ...secret, data: { key: "Zml4ZWQ=" } });
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, [`delete Job/${jobOf(spec)}`, "applyStatus MLModel/resnet"]);
    assert.deepEqual(result, { requeueAfterMs: 1000 });
  });

  it("pruning waits for Ready, and runs only once a version left the history: then only kept contents stay", async () => {
    const limited = (version: string): MLModelSpec => ({
      ...downloaded(version),
      rollout: { revisionHistoryLimit: 1 },
    });
    const w = await readyWith(limited("1"));
    assert.equal(
      w.client.writes.filter((x) => x.name.includes("-prune-")).length,
      0,
      "a first download: storage holds only its content, no prune Job",
    );
    respec(w, limited("2"));
    await step(w);
    setJob(w, jobOf(limited("2")), complete);
    assert.deepEqual(await step(w), ["apply Deployment/resnet", "applyStatus MLModel/resnet"]);
    assert.deepEqual(await step(w), [], "rolling out, not Ready: nothing is pruned");
    rolledOut(w, revisionOf(limited("2")));
    w.own = new OwnWrites();
    assert.deepEqual((await w.reconcile()).writes, [
      `delete ControllerRevision/resnet-${revisionOf(limited("1"))}`,
      `delete Job/${jobOf(limited("1"))}`,
      `apply Job/${pruneJobName("resnet", [contentHash(limited("2"))])}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.deepEqual(
      w.settleEchoes(),
      [`delete ControllerRevision/resnet-${revisionOf(limited("1"))}`, `delete Job/${jobOf(limited("1"))}`],
      "the prune Job's create wakes nobody (OwnWrites); the deletes do",
    );
    w.client.lists.length = 0;
    assert.deepEqual(await step(w), [], "the prune Job is created once");
    assert.deepEqual(w.client.lists, [], "a running prune Job is no download: no pod is listed");
  });

  it("an update within the history limit keeps every version on storage: the old Job goes, no prune Job", async () => {
    const w = await readyOn("1");
    respec(w, v2);
    await step(w);
    setJob(w, jobOf(v2), complete);
    await step(w);
    rolledOut(w, revisionOf(v2));
    assert.deepEqual(await step(w), [`delete Job/${jobOf(v1)}`, "applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Ready");
  });

  it("a failed revision is recorded first, then the last ready one is served, and both are said", async () => {
    const good = image("1");
    const bad = image("2");
    const w = world(good);
    await step(w);
    rolledOut(w, revisionOf(good));
    await step(w);
    assert.equal(w.lastStatus()?.phase, "Ready");
    respec(w, bad);
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(bad)}`,
      "apply Deployment/resnet",
      "applyStatus MLModel/resnet",
    ]);
    w.put(
      builtinKinds.Pod,
      pod("resnet-bad-0", revisionOf(bad), { waiting: "CrashLoopBackOff" }) as KubeObject,
    );
    w.events.length = 0;

    const recorded = await w.reconcile();
    assert.deepEqual(recorded.writes, ["applyStatus MLModel/resnet"], "recorded, nothing served yet");
    assert.deepEqual(recorded.result, { requeueAfterMs: 100 });
    assert.equal(w.lastStatus()?.revision?.failed?.revision, revisionOf(bad));

    // The cache has not seen that status yet: the reconcile reads it back from what it wrote.
    const served = await w.reconcile();
    assert.deepEqual(served.writes, ["apply Deployment/resnet", "applyStatus MLModel/resnet"]);
    const deployment = w.client.writes.findLast((x) => x.kind.kind === "Deployment")?.body as V1Deployment;
    assert.equal(deployment.spec?.template.metadata?.labels?.[labels.revision], revisionOf(good));
    assert.equal(w.lastStatus()?.conditions?.find((c) => c.type === "RolledBack")?.status, "True");
    assert.deepEqual(
      w.events.map((e) => `${e.type} ${e.reason}`),
      ["Warning CrashLoopBackOff", "Warning RolledBack"],
    );
    // The rollback is a rollout whose pods are not watched: looked at again (serving-pods.ts).
    assert.deepEqual(served.result, { requeueAfterMs: lookAgainBoundsMs.min });
  });

  it("revisions beyond the history limit go at once, Ready or not; never the last ready one", async () => {
    const limited = (tag: string): MLModelSpec => ({ ...image(tag), rollout: { revisionHistoryLimit: 1 } });
    const w = world(limited("1"));
    await step(w);
    rolledOut(w, revisionOf(limited("1")));
    await step(w);
    respec(w, limited("2"));
    assert.deepEqual(
      await step(w),
      [
        `apply ControllerRevision/resnet-${revisionOf(limited("2"))}`,
        "apply Deployment/resnet",
        "applyStatus MLModel/resnet",
      ],
      "revision 1 is beyond the limit but last ready: kept",
    );
    respec(w, limited("3"));
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(limited("3"))}`,
      "apply Deployment/resnet",
      `delete ControllerRevision/resnet-${revisionOf(limited("2"))}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.notEqual(w.lastStatus()?.phase, "Ready");
  });

  it("autoscaling on: an autoscaler and a disruption budget; off again: both deleted", async () => {
    const scaled: MLModelSpec = { ...image("1"), autoscaling: { minReplicas: 2, maxReplicas: 5 } };
    const w = world(scaled);
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(scaled)}`,
      "apply Deployment/resnet",
      "apply Service/resnet",
      "apply HorizontalPodAutoscaler/resnet",
      "apply PodDisruptionBudget/resnet",
      "applyStatus MLModel/resnet",
    ]);
    respec(w, { ...image("1"), replicas: 1 });
    assert.deepEqual(await step(w), [
      "apply Deployment/resnet",
      "delete HorizontalPodAutoscaler/resnet",
      "delete PodDisruptionBudget/resnet",
      "applyStatus MLModel/resnet",
    ]);
  });

  it("a status written is forgotten a minute later even when nothing reconciles its model again", () => {
    const { written } = new ModelMemory();
    const entry = { fromResourceVersion: "1", resourceVersion: "2", status: {} };
    written.set("ml/a", entry, 0);
    written.set("ml/b", entry, 30_000);
    written.set("ml/a", entry, 40_000);
    assert.deepEqual([...written.keys()], ["ml/b", "ml/a"], "in order of writing");
    written.set("ml/c", entry, 95_000);
    assert.deepEqual([...written.keys()], ["ml/a", "ml/c"]);
    written.expire(155_000);
    assert.deepEqual([...written.keys()], [], "swept without a write");
  });

  it("a deleted model: no write, and its written status is forgotten", async () => {
    const w = world(image("1"));
    await w.reconcile();
    assert.ok(w.written.has("ml/resnet"));
    w.remove(mlModelKind, "resnet");
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, []);
    assert.equal(result, undefined);
    assert.equal(w.written.has("ml/resnet"), false);
  });

  it("a model being deleted: no child is created or recorded, the status says Terminating", async () => {
    const w = world(v1);
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.metadata.deletionTimestamp = "2026-01-01T00:00:00Z";
    });
    assert.deepEqual((await w.reconcile()).writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Terminating");
  });

  it("a missing Secret: only the revision is recorded, the status says what is missing; its arrival starts the download", async () => {
    const spec = downloaded("1", { credentialsSecretRef: { name: "s3" } });
    const w = world(spec);
    assert.deepEqual(await step(w), [
      `apply ControllerRevision/resnet-${revisionOf(spec)}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual([w.lastStatus()?.phase, w.lastStatus()?.reason], ["Pending", "SecretNotFound"]);
    assert.deepEqual(
      w.events.map((e) => `${e.type} ${e.reason}`),
      ["Warning SecretNotFound"],
    );
    w.put(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "s3" },
      data: { k: "dg==" },
    });
    assert.deepEqual(await step(w), [
      "apply PersistentVolumeClaim/resnet-model",
      ...identity,
      `apply Job/${jobOf(spec)}`,
      "applyStatus MLModel/resnet",
    ]);
  });
});

describe("reconcileMLModel: failed writes", () => {
  for (const [what, code] of [
    ["a conflict (409)", 409],
    ["an invalid object (422)", 422],
  ] as const) {
    it(`${what} on the Deployment fails the reconcile before any status is written`, async () => {
      const w = world(image("1"));
      w.client.failNext({ verb: "apply", kind: "Deployment" }, code);
      await assert.rejects(w.reconcile(), (e: Error & { code?: number }) => e.code === code);
      assert.deepEqual(w.newWrites().map(line), [
        `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
        "apply Deployment/resnet",
        "apply Service/resnet",
      ]);
      assert.deepEqual(w.events, []);
    });
  }

  it("a stale Job already gone (404 on delete) is no error", async () => {
    const w = world(downloaded("1"));
    await step(w);
    setJob(w, jobOf(downloaded("1")), { active: 1 });
    await step(w);
    w.config.downloaderImage = "registry.local/mlmodel:next";
    w.client.failNext({ verb: "delete", kind: "Job" }, 404);
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, [`delete Job/${jobOf(downloaded("1"))}`]);
    assert.deepEqual(result, { requeueAfterMs: 1000 });
  });
});

describe("reconcileMLModel: a model URI with credentials in it (a pre-signed URL)", () => {
  const canary = "canary0123456789abcdef";
  const signedUri = `https://bucket.s3.amazonaws.com/resnet.tgz?X-Amz-Credential=AKIA%2F${canary}&X-Amz-Signature=${canary}`;
  const shownUri =
    "https://bucket.s3.amazonaws.com/resnet.tgz?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED";
  const signed = (version: string) => downloaded(version, { uri: signedUri });
  const uriSecretOf = (spec: MLModelSpec) => childNames.uriSecret("resnet", revisionOf(spec));
  const body = <T>(w: World, kind: string, name: string) =>
    w.client.writes.findLast((x) => x.kind.kind === kind && x.name === name)?.body as T;
  const container = (job: V1Job) => job.spec!.template.spec!.containers[0]!;
  /** The canary shows in no write but the URI Secret's create, and in no Event. */
  function assertNoLeak(w: World): void {
    for (const x of w.client.writes)
      if (x.verb !== "create") assert.ok(!JSON.stringify(x.body ?? "").includes(canary), line(x));
    assert.ok(!JSON.stringify(w.events).includes(canary), JSON.stringify(w.events));
  }

  it("its revision is recorded redacted, its URI Secret created at once, owned by it; the Job reads it from env", async () => {
    const v1 = signed("1");
    const rev = revisionOf(v1);
    const w = world(v1);
    assert.deepEqual((await w.reconcile()).writes, [
      `apply ControllerRevision/resnet-${rev}`,
      `create Secret/${uriSecretOf(v1)}`,
      "apply PersistentVolumeClaim/resnet-model",
      ...identity,
      `apply Job/${jobOf(v1)}`,
      "applyStatus MLModel/resnet",
    ]);
    const recorded = body<{ data: { spec: MLModelSpec; source: object } }>(
      w,
      "ControllerRevision",
      `resnet-${rev}`,
    );
    assert.equal(recorded.data.spec.model.uri, shownUri);
    assert.deepEqual(recorded.data.source, {
      content: contentHash(v1),
      uriSecret: uriSecretOf(v1),
      cacheKey: cacheKey(v1.model.uri!, v1.model.sha256),
    });
    const secret = body<V1Secret>(w, "Secret", uriSecretOf(v1));
    assert.equal(secret.type, uriSecretType);
    assert.equal(secret.immutable, true);
    assert.equal(Buffer.from(secret.data![uriSecretKey]!, "base64").toString(), signedUri);
    assert.deepEqual(secret.metadata?.ownerReferences, [
      {
        apiVersion: "apps/v1",
        kind: "ControllerRevision",
        name: `resnet-${rev}`,
        uid: `uid-ControllerRevision-resnet-${rev}`,
        controller: true,
      },
    ]);
    const job = container(body<V1Job>(w, "Job", jobOf(v1)));
    assert.deepEqual(job.args?.slice(0, 2), ["--uri-from-env", modelUriEnv]);
    assert.deepEqual(job.env?.[0], {
      name: modelUriEnv,
      valueFrom: { secretKeyRef: { name: uriSecretOf(v1), key: uriSecretKey } },
    });
    assert.equal(
      w.lastStatus()?.message,
      `Job ${jobOf(v1)} waits for its volume (claim resnet-model) to download ${shownUri}`,
    );
    assertNoLeak(w);

    // A plain URI: in the Job's args, and no Secret (the first row's writes have no create).
    const plain = world(downloaded("1"));
    await plain.reconcile();
    assert.deepEqual(container(body<V1Job>(plain, "Job", jobOf(downloaded("1")))).args?.slice(0, 2), [
      "--uri",
      "s3://models/resnet",
    ]);
    assert.ok(!plain.client.writes.some((x) => x.verb === "create"));
  });

  it("created once: not again while the cache has not shown it, again only after a minute (409 is done)", async () => {
    const v1 = signed("1");
    const w = world(v1);
    await step(w);
    w.remove(builtinKinds.Secret, uriSecretOf(v1)); // the Secret's watch lags behind
    assert.deepEqual(await step(w), [], "expected: the reconcile waits for the cache");
    w.now = new Date(w.now.getTime() + 61_000);
    w.client.failNext({ verb: "create", kind: "Secret" }, 409);
    assert.deepEqual(await step(w), [`create Secret/${uriSecretOf(v1)}`], "AlreadyExists: done");
    assert.deepEqual(await step(w), [], "cached: nothing to do");
  });

  it("a same-named Secret the operator did not make is refused: no Job reads it", async () => {
    const v1 = signed("1");
    const foreign = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: uriSecretOf(v1) },
      data: { uri: "" },
    };
    const w = world(v1, [builtinKinds.Secret, foreign]);
    await assert.rejects(
      w.reconcile(),
      new RegExp(`Secret ${uriSecretOf(v1)} exists but the operator did not create it for MLModel resnet`),
    );
    assert.deepEqual(w.newWrites().map(line), [`apply ControllerRevision/resnet-${revisionOf(v1)}`]);
  });

  /** v1 Ready, v2 downloaded and crash-looping, its failure recorded: the next reconcile rolls back. */
  async function failedOver(v1: MLModelSpec, v2: MLModelSpec, before?: (w: World) => void): Promise<World> {
    const w = await readyWith(v1);
    before?.(w);
    respec(w, v2);
    await step(w);
    setJob(w, jobOf(v2), complete);
    await step(w);
    w.put(
      builtinKinds.Pod,
      pod("resnet-bad-0", revisionOf(v2), { waiting: "CrashLoopBackOff" }) as KubeObject,
    );
    assert.deepEqual((await w.reconcile()).writes, ["applyStatus MLModel/resnet"], "failure recorded");
    return w;
  }

  it("a rollback downloads the older revision's exact URI from that revision's Secret", async () => {
    const v1 = signed("1");
    const v2 = signed("2");
    const w = await failedOver(v1, v2);
    // The older version's Job is gone (a TTL, a person): the rollback downloads it again.
    w.remove(builtinKinds.Job, jobOf(v1));
    assert.deepEqual((await w.reconcile()).writes, [
      ...identity,
      `apply Job/${jobOf(v1)}`,
      "applyStatus MLModel/resnet",
    ]);
    const job = container(body<V1Job>(w, "Job", jobOf(v1)));
    assert.deepEqual(job.env?.[0]?.valueFrom?.secretKeyRef, { name: uriSecretOf(v1), key: uriSecretKey });
    assert.equal(w.lastStatus()?.conditions?.find((c) => c.type === "RolledBack")?.status, "True");
    assert.deepEqual(
      w.client.writes.filter((x) => x.verb === "create").map(line),
      [`create Secret/${uriSecretOf(v1)}`, `create Secret/${uriSecretOf(v2)}`],
      "each revision's Secret was created once, when it was recorded",
    );
    assertNoLeak(w);
  });

  it("a rollback whose revision's Secret is gone waits for it, saying which and what to do", async () => {
    const v1 = signed("1");
    const w = await failedOver(v1, signed("2"));
    w.remove(builtinKinds.Secret, uriSecretOf(v1));
    w.remove(builtinKinds.Job, jobOf(v1));
    assert.deepEqual((await w.reconcile()).writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.reason, "SecretNotFound");
    assert.match(
      w.lastStatus()?.message ?? "",
      new RegExp(`Secret ${uriSecretOf(v1)}, which holds the exact model URI of the revision being served`),
    );
  });

  it("a rollback to a revision an older operator recorded with its exact URI creates that revision's Secret", async () => {
    const v1 = signed("1");
    const rev = `resnet-${revisionOf(v1)}`;
    const w = await failedOver(v1, signed("2"), (w) => {
      w.update<KubeObject & { data: object }>(builtinKinds.ControllerRevision, rev, (r) => {
        r.data = { spec: v1 }; // no source beside it: the URI as written
      });
      w.remove(builtinKinds.Secret, uriSecretOf(v1));
    });
    w.remove(builtinKinds.Job, jobOf(v1));
    assert.deepEqual((await w.reconcile()).writes, [
      `create Secret/${uriSecretOf(v1)}`,
      ...identity,
      `apply Job/${jobOf(v1)}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(body<V1Secret>(w, "Secret", uriSecretOf(v1)).metadata?.ownerReferences?.[0]?.name, rev);
  });
});

describe("the stages alone", () => {
  it("pods map to their model by its label", () => {
    const serving = pod("resnet-abc", "r1") as KubeObject;
    serving.metadata.namespace = "ml";
    assert.deepEqual(modelOfPod(serving), { namespace: "ml", name: "resnet" });
    const foreign = { apiVersion: "v1", kind: "Pod", metadata: { name: "x", namespace: "ml" } };
    assert.equal(modelOfPod(foreign), undefined);
  });

  it("a model is indexed by what it references; Secrets are cached without their values", () => {
    const m = mlModel({
      model: {
        uri: "pvc://models/resnet",
        credentialsSecretRef: { name: "creds" },
        configMapRef: { name: "tf", key: "k" },
      },
    });
    assert.deepEqual(modelReferences(m), [
      "Secret/ml/creds",
      "ConfigMap/ml/tf",
      "PersistentVolumeClaim/ml/models",
    ]);
    const kept = secretWithoutValues({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "creds", managedFields: [{}] } as KubeObject["metadata"],
      data: { key: "c2VjcmV0" },
    });
    assert.deepEqual(kept, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "creds" },
      data: { key: "" },
    });
  });

  it("URI Secrets are indexed by model from their names, ours or not; other Secrets are not", async () => {
    const named = (name: string) => ({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: "ml" },
    });
    const name = childNames.uriSecret("resnet-v2", "0123456789");
    assert.deepEqual(
      uriSecretModelKeys(named(name)),
      ["ml/resnet-v2"],
      "the inverse of childNames.uriSecret",
    );
    assert.deepEqual(uriSecretModelKeys(named("resnet-uri")), []);
    assert.deepEqual(uriSecretModelKeys(named("resnet-creds")), []);
    const foreign = childNames.uriSecret("resnet", "abcdef0123");
    const w = world(image("1"), [builtinKinds.Secret, named(foreign)], [builtinKinds.Secret, named("other")]);
    const o = await observe(w.context(), undefined, w.now);
    assert.deepEqual([...(o?.references.keys() ?? [])], [`Secret/ml/${foreign}`]);
    assert.deepEqual(
      o?.references.get(`Secret/ml/${foreign}`)?.keys,
      [],
      "seen, with no controller: not ours",
    );
  });

  it("observe reads the references of the spec and of the last ready revision, for a rollback's sake", async () => {
    const good = { ...image("1"), model: { credentialsSecretRef: { name: "old-creds" } } };
    const w = world(good, [
      builtinKinds.Secret,
      { apiVersion: "v1", kind: "Secret", metadata: { name: "old-creds" }, data: { a: "YQ==" } },
    ]);
    await step(w);
    rolledOut(w, revisionOf(good));
    await step(w);
    respec(w, image("2"));
    await step(w);
    const o = await observe(w.context(), undefined, w.now);
    assert.ok(o);
    assert.deepEqual([...o.references.keys()], ["Secret/ml/old-creds"]);
    assert.deepEqual(o.references.get("Secret/ml/old-creds")?.keys, ["a"], "keys, never values");
    const d = decide(o);
    assert.equal(d.rollback, undefined, "not failed: no rollback");
    assert.deepEqual(d.missing, []);
    assert.equal(d.revisionToRecord, undefined, "the spec's revision is already the newest");
  });
});

describe("the access table (RBAC) covers the code", () => {
  const allowed = (kind: ResourceKind, subresource: string | undefined, verb: string) =>
    operatorAccess.some(
      (a) =>
        kindName(a.kind) === kindName(kind) &&
        a.subresource === subresource &&
        a.verbs.includes(verb as never),
    );

  it("every cache the controller registers may be listed and watched", () => {
    const mgr = new Manager({
      client: new KubeClient({ server: "http://127.0.0.1:9", headers: async () => ({}) }),
    });
    addMLModelController(mgr, { downloaderImage: "x" });
    const caches = mgr.caches.map((c) => kindName(c.kind));
    assert.ok(caches.length >= 10, caches.join(", "));
    for (const { kind } of mgr.caches)
      assert.ok(
        allowed(kind, undefined, "list") && allowed(kind, undefined, "watch"),
        `list/watch ${kindName(kind)}`,
      );
  });

  it("every write the reconciles above made is allowed", () => {
    assert.ok(everyWrite.length > 50);
    assert.deepEqual(disallowedWrites(everyWrite), []);
  });
});
