/**
 * The MLModel reconcile as a whole, without a cluster: each row walks a model to a state
 * (through earlier reconciles whose writes the caches then see) and asserts the exact writes
 * the next reconcile makes, in order, and what it says. The stages' pure parts have tests of
 * their own (status.test.ts, rollback.test.ts, revisions.test.ts, plan-desired.test.ts, and
 * the stage tests at the end of this file).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job } from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { downloaderStatusFields } from "../../../src/downloader/contract.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { servingPodTemplate } from "../../../src/operator/desired.ts";
import {
  modelOfPod,
  modelReferences,
  podModelKeys,
  secretWithoutValues,
} from "../../../src/operator/mlmodel/caches.ts";
import { addMLModelController } from "../../../src/operator/mlmodel/controller.ts";
import { decide } from "../../../src/operator/mlmodel/decide.ts";
import { observe } from "../../../src/operator/mlmodel/observe.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { contentHash, planModel } from "../../../src/operator/plan.ts";
import { pruneJobName } from "../../../src/operator/prune.ts";
import { resolveRuntime } from "../../../src/operator/runtime-selection.ts";
import {
  builtinKinds,
  KubeClient,
  type KubeObject,
  kindName,
  Manager,
  type ResourceKind,
} from "../../../src/runtime/index.ts";
import { pod, tfServing } from "./fixtures.ts";
import { disallowedWrites, everyWrite, line, mlModel, World } from "./reconcile-harness.ts";

const downloaded = (version: string, extra: Partial<MLModelSpec["model"]> = {}): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version, ...extra },
});
const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });

/** The serving revision (pod template hash) of a spec, as the operator computes it. */
function revisionOf(spec: MLModelSpec): string {
  const model = mlModel(spec);
  const resolution = resolveRuntime(model, [], [tfServing]);
  assert.ok(resolution.ok);
  return servingPodTemplate(planModel(model, resolution.runtime)).revision;
}
const jobOf = (spec: MLModelSpec) => childNames.download("resnet", contentHash(spec));
const identity = ["ServiceAccount", "Role", "RoleBinding"].map((k) => `apply ${k}/resnet-downloader`);

function world(spec: MLModelSpec, ...more: [typeof builtinKinds.Secret, KubeObject][]): World {
  return new World([clusterServingRuntimeKind, tfServing], [mlModelKind, mlModel(spec)], ...more);
}

function setJob(w: World, name: string, status: V1Job["status"]): void {
  w.update<KubeObject & V1Job>(builtinKinds.Job, name, (j) => {
    j.status = status;
  });
}
const complete = { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] };
const failed = {
  failed: 1,
  conditions: [{ type: "Failed", status: "True", reason: "PodFailurePolicy", message: "exit code 1" }],
};

/** The Deployment reports its rollout done and `replicas` pods of `revision` are ready. */
function rolledOut(w: World, revision: string, replicas = 1): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.metadata.generation = 1;
    d.status = { observedGeneration: 1, replicas, updatedReplicas: replicas, availableReplicas: replicas };
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
async function readyOn(version: string): Promise<World> {
  const w = world(downloaded(version));
  await step(w);
  setJob(w, jobOf(downloaded(version)), complete);
  await step(w);
  rolledOut(w, revisionOf(downloaded(version)));
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
    assert.equal(result, undefined);
    const forced = w.client.writes.filter((x) => x.force).map(line);
    assert.ok(!forced.some((x) => x.includes("downloader")), "the identity is applied without force");
    assert.deepEqual(w.lastStatus()?.download, { job: jobOf(v1), jobState: "Pending", attempts: 0 });
    assert.deepEqual(w.events, [
      {
        type: "Normal",
        reason: "Downloading",
        // The Job as the API server returned it, just created: no pod has run yet.
        message: `Downloading: Job ${jobOf(v1)} is downloading s3://models/resnet`,
      },
    ]);
  });

  it("the Deployment is untouched until the download completes, then applied with the Service", async () => {
    const w = world(v1);
    await step(w);
    setJob(w, jobOf(v1), { active: 1 });
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
    assert.equal(result, undefined);
    const patch = w.client.writes.find((x) => x.verb === "patch")?.body as { status: { download: object } };
    assert.deepEqual(
      patch.status.download,
      Object.fromEntries(downloaderStatusFields.map((f) => [f, null])),
      "the previous download's progress is cleared, the operator's fields kept",
    );
    assert.equal(w.lastStatus()?.phase, "Downloading");
  });

  it("a running Job whose template is no longer wanted is deleted, and the reconcile comes back for it", async () => {
    const w = world(v1);
    await step(w);
    setJob(w, jobOf(v1), { active: 1 });
    await step(w);
    w.config.downloaderImage = "registry.local/mlmodel:next";
    const { writes, result } = await w.reconcile();
    assert.deepEqual(writes, [`delete Job/${jobOf(v1)}`, "applyStatus MLModel/resnet"]);
    assert.deepEqual(result, { requeueAfterMs: 1000 });
    w.settle();
    assert.deepEqual((await w.reconcile()).writes, [
      ...identity,
      `apply Job/${jobOf(v1)}`,
      "applyStatus MLModel/resnet",
    ]);
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

  it("pruning waits for Ready: then the old Job goes and a prune Job keeps only the kept contents", async () => {
    const w = await readyOn("1");
    respec(w, v2);
    await step(w);
    setJob(w, jobOf(v2), complete);
    assert.deepEqual(await step(w), ["apply Deployment/resnet", "applyStatus MLModel/resnet"]);
    assert.deepEqual(await step(w), [], "rolling out, not Ready: nothing is pruned");
    rolledOut(w, revisionOf(v2));
    const keep = [contentHash(v1), contentHash(v2)].sort();
    assert.deepEqual(await step(w), [
      `delete Job/${jobOf(v1)}`,
      `delete Job/${pruneJobName("resnet", [contentHash(v1)])}`,
      `apply Job/${pruneJobName("resnet", keep)}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.deepEqual(await step(w), [], "the prune Job is created once");
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
    assert.equal(served.result, undefined);
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

  it("a deleted model: no write, and its written status is forgotten", async () => {
    const w = world(image("1"));
    await step(w);
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
    assert.deepEqual(writes, [`delete Job/${jobOf(downloaded("1"))}`, "applyStatus MLModel/resnet"]);
    assert.deepEqual(result, { requeueAfterMs: 1000 });
  });
});

describe("the stages alone", () => {
  it("pods map to their model one way, for the index and the watch alike", () => {
    const serving = pod("resnet-abc", "r1") as KubeObject;
    serving.metadata.namespace = "ml";
    assert.deepEqual(modelOfPod(serving), { namespace: "ml", name: "resnet" });
    assert.deepEqual(podModelKeys(serving), ["ml/resnet"]);
    const foreign = { apiVersion: "v1", kind: "Pod", metadata: { name: "x", namespace: "ml" } };
    assert.equal(modelOfPod(foreign), undefined);
    assert.deepEqual(podModelKeys(foreign), []);
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
    const o = observe(w.context(), undefined, w.now);
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
