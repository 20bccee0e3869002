// Live progress against the real control plane: the downloader, running under a service account
// that may only patch its own MLModel's status, server-side-applies status.download while it
// downloads from a slow loopback server, and leaves the operator's fields alone.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { mlModelCrd } from "../../../src/api/crds.ts";
import { mlmodelResource, progressFieldManager } from "../../../src/downloader/contract.ts";
import { builtinKinds, KubeClient } from "../../../src/runtime/index.ts";
import { coreApi, createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { FileServer } from "./file-server.ts";
import { randomBytes, runDownload, tempDir } from "./servers.ts";

const { group, version, plural } = mlmodelResource;

interface MLModelLike {
  status?: { download?: Record<string, unknown> };
  metadata: { managedFields?: Array<{ manager?: string; subresource?: string; fieldsV1?: unknown }> };
}

async function installCrd(kc: KubeConfig): Promise<void> {
  await KubeClient.fromKubeConfig(kc).apply(builtinKinds.CustomResourceDefinition, mlModelCrd as never, {
    fieldManager: "mlmodel-tests",
    force: true,
  });
  const custom = kc.makeApiClient(CustomObjectsApi);
  await waitFor("MLModel CRD served", async () => {
    try {
      await custom.listClusterCustomObject({ group, version, plural });
      return true;
    } catch {
      return false;
    }
  });
}

/** A ServiceAccount allowed only `patch` on mlmodels/status of one named MLModel. */
async function leastPrivilegeKubeconfig(
  admin: KubeConfig,
  ns: string,
  model: string,
  dir: string,
): Promise<string> {
  const core = coreApi(admin);
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: "downloader" } } });
  await rbac.createNamespacedRole({
    namespace: ns,
    body: {
      metadata: { name: "downloader" },
      rules: [
        { apiGroups: [group], resources: [`${plural}/status`], resourceNames: [model], verbs: ["patch"] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: ns,
    body: {
      metadata: { name: "downloader" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "downloader" },
      subjects: [{ kind: "ServiceAccount", name: "downloader", namespace: ns }],
    },
  });
  const token = await core.createNamespacedServiceAccountToken({
    name: "downloader",
    namespace: ns,
    body: { spec: { expirationSeconds: 3600 } },
  });
  const cluster = admin.getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: "downloader", token: token.status!.token }],
    contexts: [{ name: "downloader", cluster: cluster.name, user: "downloader", namespace: ns }],
    currentContext: "downloader",
  });
  const path = join(dir, "downloader.kubeconfig");
  writeFileSync(path, kc.exportConfig());
  return path;
}

describe("download progress in MLModel status (real control plane)", () => {
  const server = new FileServer();
  const model = randomBytes(3 * 1024 * 1024, 31);
  let admin: KubeConfig;
  let custom: CustomObjectsApi;
  let ns: TestNamespace;
  let kubeconfig: string;
  let work: string;

  before(async () => {
    admin = kubeConfig();
    custom = admin.makeApiClient(CustomObjectsApi);
    await installCrd(admin);
    ns = await createNamespace("dl-progress");
    work = tempDir("progress");
    await server.start();
    server.files.set("/resnet.bin", model);
    for (const name of ["resnet", "other"]) {
      await custom.createNamespacedCustomObject({
        group,
        version,
        namespace: ns.name,
        plural,
        body: {
          apiVersion: `${group}/${version}`,
          kind: "MLModel",
          metadata: { name },
          spec: { model: { uri: `${server.url}/resnet.bin`, format: "onnx" }, storage: { size: "1Gi" } },
        },
      });
    }
    // The operator's fields, applied by the operator's own manager: they must survive.
    await custom.patchNamespacedCustomObjectStatus(
      {
        group,
        version,
        namespace: ns.name,
        plural,
        name: "resnet",
        fieldManager: "mlmodel-operator",
        force: true,
        body: {
          apiVersion: `${group}/${version}`,
          kind: "MLModel",
          metadata: { name: "resnet", namespace: ns.name },
          status: { download: { job: "resnet-download-1", jobState: "Running", attempts: 1 } },
        },
      },
      setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply),
    );
    kubeconfig = await leastPrivilegeKubeconfig(admin, ns.name, "resnet", work);
  });
  after(async () => {
    await server.stop();
    await ns?.delete();
  });

  const get = async (name: string) =>
    (await custom.getNamespacedCustomObject({
      group,
      version,
      namespace: ns.name,
      plural,
      name,
    })) as MLModelLike;

  it("reports bytesDone while downloading, then Complete, under its own field manager", async () => {
    server.faults = { bytesPerSecond: 1024 * 1024 };
    const run = runDownload(["--uri", `${server.url}/resnet.bin`, "--dest", join(work, "resnet")], {
      KUBECONFIG: kubeconfig,
      MLMODEL_NAME: "resnet",
      MLMODEL_NAMESPACE: ns.name,
    });
    const seen: Array<Record<string, unknown>> = [];
    let finished = false;
    run.then(() => {
      finished = true;
    });
    while (!finished) {
      const d = (await get("resnet")).status?.download;
      if (d?.phase === "Downloading") seen.push(d);
      await sleep(200);
    }
    const res = await run;
    server.faults = {};
    assert.equal(res.code, 0, res.stderr);
    assert.doesNotMatch(res.stderr, /warning: status patch/);

    const midway = seen.find((d) => (d.bytesDone as number) > 0 && (d.bytesDone as number) < model.length);
    assert.ok(midway, `a partial progress report was seen (saw ${JSON.stringify(seen)})`);
    assert.equal(midway.bytesTotal, model.length);
    assert.ok((midway.bytesPerSecond as number) > 0);

    const after = await get("resnet");
    const d = after.status!.download!;
    assert.equal(d.phase, "Complete");
    assert.equal(d.bytesDone, model.length);
    assert.equal(d.bytesTotal, model.length);
    assert.equal(d.filesDone, 1);
    assert.ok(d.finishedAt);
    // The operator's fields are untouched.
    assert.equal(d.job, "resnet-download-1");
    assert.equal(d.jobState, "Running");
    assert.equal(d.attempts, 1);
    const mine = after.metadata.managedFields?.find((f) => f.manager === progressFieldManager);
    assert.equal(mine?.subresource, "status");
    assert.doesNotMatch(JSON.stringify(mine?.fieldsV1), /jobState/);
  });

  it("keeps downloading when it may not patch the status (another model's name)", async () => {
    const res = await runDownload(["--uri", `${server.url}/resnet.bin`, "--dest", join(work, "other")], {
      KUBECONFIG: kubeconfig,
      MLMODEL_NAME: "other",
      MLMODEL_NAMESPACE: ns.name,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stderr, /warning: status patch of .*\/other: HTTP 403/);
    assert.equal(
      (await get("other")).status?.download,
      undefined,
      "least privilege: no access to another model",
    );
  });
});
