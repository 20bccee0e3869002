/**
 * Each failure mode, simulated with the control plane's kwok failure stages or the real
 * scheduler, gives the right phase, reason and Warning event, and fixing the cause recovers
 * without manual steps. The operator runs under its own RBAC; the namespace enforces the
 * restricted Pod Security level.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { mlModelKind, servingRuntimeKind } from "../../../src/api/kinds.ts";
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import { builtinKinds, type KubeClient } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { tfServing } from "../../unit/operator/fixtures.ts";
import {
  applyObjects,
  eventsFor,
  isReady,
  leftovers,
  operatorTestBed,
  podsOf,
  provideVolume,
  type RunningOperator,
  userClaim,
  waitForPhase,
} from "./helpers.ts";

const image = "registry.example.com/team/server:1";

describe("failure modes and recovery", { concurrency: true }, () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  const volumes: string[] = [];
  const models: string[] = [];

  async function create(name: string, spec: MLModelSpec): Promise<void> {
    models.push(name);
    await applyObjects(admin, ns.name, [
      { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", metadata: { name }, spec },
    ]);
  }

  async function patch(name: string, body: unknown, type: "merge" | "json" = "merge"): Promise<void> {
    await admin.patch(mlModelKind, { namespace: ns.name, name }, body, type);
  }

  async function assertWarning(name: string, reason: string, note?: RegExp): Promise<void> {
    const found = await waitFor(`a ${reason} Warning event for ${name}`, async () =>
      (await eventsFor(admin, ns.name, name)).find((e) => e.reason === reason && e.type === "Warning"),
    );
    if (note) assert.match(found.note, note);
  }

  async function assertServing(name: string, replicas = 1): Promise<void> {
    const m = await waitForPhase(admin, ns.name, name, "Ready");
    assert.equal(m.status?.conditions?.find((c) => c.type === "Ready")?.status, "True");
    assert.ok((await podsOf(admin, ns.name, name)).filter(isReady).length >= replicas);
  }

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-failures"));
  });

  after(async () => {
    // Deleting leaves nothing behind, for every model that went through a failure.
    for (const name of models) await admin.delete(mlModelKind, { namespace: ns.name, name });
    for (const name of models) {
      await waitFor(
        `children of ${name} to be gone`,
        async () => (await leftovers(admin, ns.name, name)).length === 0,
      );
    }
    await operator?.stop();
    await ns?.delete();
    for (const pv of volumes) await admin.delete(builtinKinds.PersistentVolume, { name: pv }).catch(() => {});
  });

  it("download failure: Failed/DownloadFailed with the downloader's termination message; a new URI recovers", async () => {
    volumes.push(await provideVolume(admin, ns.name, "dl-model"));
    await create("dl", {
      model: { uri: "https://models.example.com/simulate-job-failure/m.tgz", format: "tensorflow" },
    });
    const failed = await waitForPhase(admin, ns.name, "dl", "Failed", "DownloadFailed");
    assert.match(failed.status?.message ?? "", /simulated failure/);
    assert.equal(
      failed.status?.conditions?.find((c) => c.type === "ModelDownloaded")?.reason,
      "DownloadFailed",
    );
    await assertWarning("dl", "DownloadFailed", /simulated failure/);
    await patch("dl", { spec: { model: { uri: "https://models.example.com/good/m.tgz" } } });
    await assertServing("dl");
  });

  it("a download pod that cannot pull its image: Failed/ImagePullBackOff, though download pods are not watched; a new URI recovers", async () => {
    // The marker in the model URI reaches the download container's args, which kwok's stage
    // reads. The operator sees the pod only by listing it while its Job has no pod ready.
    volumes.push(await provideVolume(admin, ns.name, "dlpull-model"));
    await create("dlpull", {
      model: { uri: "https://models.example.com/simulate-image-pull-error/m.tgz", format: "tensorflow" },
    });
    const m = await waitForPhase(admin, ns.name, "dlpull", "Failed", "ImagePullBackOff");
    assert.match(m.status?.message ?? "", /^download: pod dlpull-\S+: cannot pull image/);
    assert.equal(m.status?.download?.attempts, 0, "a pod that never started is no attempt");
    await assertWarning("dlpull", "ImagePullBackOff");
    await patch("dlpull", { spec: { model: { uri: "https://models.example.com/good/m.tgz" } } });
    await assertServing("dlpull");
  });

  it("a crash loop before serving: Failed/ModelLoadFailed in the container's words; a working image recovers", async () => {
    await create("crash", {
      image: "registry.example.com/simulate-crash-loop:1",
      model: { path: "/models/m" },
    });
    const m = await waitForPhase(admin, ns.name, "crash", "Failed", "ModelLoadFailed");
    assert.match(
      m.status?.message ?? "",
      /cannot load the model: .*last exit code 1\), saying: simulated crash \(kwok stage simulate-crash-loop\)/,
    );
    await assertWarning("crash", "ModelLoadFailed");
    await patch("crash", { spec: { image } });
    await assertServing("crash");
  });

  it("image pull failure: Failed/ImagePullBackOff naming the image; a pullable image recovers", async () => {
    await create("pull", {
      image: "registry.example.com/simulate-image-pull-error:1",
      model: { path: "/models/m" },
    });
    const m = await waitForPhase(admin, ns.name, "pull", "Failed", "ImagePullBackOff");
    assert.match(m.status?.message ?? "", /simulate-image-pull-error/);
    await assertWarning("pull", "ImagePullBackOff");
    await patch("pull", { spec: { image } });
    await assertServing("pull");
  });

  it("unschedulable (more GPUs than any node): Pending/Unschedulable; asking for none recovers", async () => {
    await create("gpu", { image, model: { path: "/models/m" }, resources: { gpu: 4 } });
    const m = await waitForPhase(admin, ns.name, "gpu", "Pending", "Unschedulable");
    assert.match(m.status?.message ?? "", /nvidia.com\/gpu/);
    await assertWarning("gpu", "Unschedulable");
    await patch("gpu", [{ op: "remove", path: "/spec/resources/gpu" }], "json");
    await assertServing("gpu");
  });

  it("a rollout past its progress deadline: Failed/ProgressDeadlineExceeded; a working image recovers", async () => {
    await create("stuck", {
      image: "registry.example.com/simulate-never-ready:1",
      model: { path: "/models/m" },
      rollout: { progressDeadlineSeconds: 30 },
    });
    await waitForPhase(admin, ns.name, "stuck", "Failed", "ProgressDeadlineExceeded");
    await assertWarning("stuck", "ProgressDeadlineExceeded");
    await patch("stuck", { spec: { image } });
    await assertServing("stuck");
  });

  it("missing Secret: Pending/SecretNotFound naming it; creating it recovers", async () => {
    await create("creds", { image, model: { path: "/m", credentialsSecretRef: { name: "late-creds" } } });
    const m = await waitForPhase(admin, ns.name, "creds", "Pending", "SecretNotFound");
    assert.match(m.status?.message ?? "", /Secret late-creds .*does not exist/);
    await assertWarning("creds", "SecretNotFound");
    await applyObjects(admin, ns.name, [
      { apiVersion: "v1", kind: "Secret", metadata: { name: "late-creds" }, stringData: { HF_TOKEN: "x" } },
    ]);
    await assertServing("creds");
  });

  it("missing ConfigMap: Pending/ConfigMapNotFound; creating it recovers", async () => {
    await create("tfcfg", {
      runtime: "tensorflow-serving",
      model: { name: "resnet", configMapRef: { name: "late-config", key: "models.config" } },
    });
    await waitForPhase(admin, ns.name, "tfcfg", "Pending", "ConfigMapNotFound");
    await assertWarning("tfcfg", "ConfigMapNotFound");
    await applyObjects(admin, ns.name, [
      {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "late-config" },
        data: { "models.config": "model_config_list {}" },
      },
    ]);
    await assertServing("tfcfg");
  });

  it("unknown runtime: Failed/RuntimeNotFound listing the runtimes; creating it recovers", async () => {
    await create("custom-rt", { runtime: "team-runtime", model: { uri: "pvc://shared/m" } });
    const m = await waitForPhase(admin, ns.name, "custom-rt", "Failed", "RuntimeNotFound");
    assert.match(m.status?.message ?? "", /"team-runtime".*tensorflow-serving/);
    await assertWarning("custom-rt", "RuntimeNotFound");
    // The pvc:// claim is missing too: the next thing the status says once the runtime exists.
    await applyObjects(admin, ns.name, [
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "ServingRuntime",
        metadata: { name: "team-runtime" },
        spec: tfServing.spec,
      },
    ]);
    await waitForPhase(admin, ns.name, "custom-rt", "Pending", "ClaimNotFound");
    volumes.push(await userClaim(admin, ns.name, "shared"));
    await assertServing("custom-rt");
    void servingRuntimeKind;
  });
});
