/**
 * Live download progress end to end, with least privilege, on the real control plane: the
 * operator (its own generated RBAC) creates the download Job and the Job's identity; kwok pods
 * run no containers, so the test runs the real `mlmodel download` as the pod would, with the
 * Job's args and env and a kubeconfig holding only a token of the Job's ServiceAccount (from
 * the TokenRequest API), against a loopback server that sends a multi-MiB file slowly.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Job } from "@kubernetes/client-node";
import { AuthorizationV1Api, CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { progressFieldManager } from "../../../src/downloader/contract.ts";
import { shortBytes } from "../../../src/downloader/progress.ts";
import { childNames, fieldManager } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, KubeClient } from "../../../src/runtime/index.ts";
import {
  createNamespace,
  kubeConfig,
  localCluster,
  type TestNamespace,
  waitFor,
} from "../../harness/cluster.ts";
import { FileServer } from "../../integration/downloader/file-server.ts";
import { randomBytes, tempDir } from "../../integration/downloader/servers.ts";
import { adminClient, provideVolume, type RunningOperator, startOperator, userClaim } from "./helpers.ts";

const model = "resnet";
// 12 MiB at 1 MiB/s: about 6 progress intervals of 2 s, so several partial reports land even
// when a loaded machine delays the downloader's start and its patches.
const size = 12 * 1024 * 1024;
const total = shortBytes(size); // "12Mi"
const repoRoot = join(import.meta.dirname, "..", "..", "..");

interface Download {
  job?: string;
  jobState?: string;
  phase?: string;
  bytesDone?: number;
  bytesTotal?: number;
  bytesPerSecond?: number;
  progress?: string;
}
type ManagedField = { manager?: string; subresource?: string; fieldsV1?: unknown };

function downloadFields(m: MLModel | undefined, manager: string): string[] {
  const entry = (m?.metadata.managedFields as ManagedField[] | undefined)?.find(
    (f) => f.manager === manager && f.subresource === "status",
  );
  const fields = (entry?.fieldsV1 as { "f:status"?: { "f:download"?: Record<string, unknown> } })?.[
    "f:status"
  ]?.["f:download"];
  return Object.keys(fields ?? {})
    .filter((k) => k.startsWith("f:"))
    .map((k) => k.slice(2))
    .sort();
}

describe("download progress in status, end to end with the Job's own identity", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let op: RunningOperator;
  let volume: string;
  let sharedVolume: string | undefined;
  const server = new FileServer();
  const body = randomBytes(size, 41);
  let job: V1Job;
  let token: string;
  let tokenKubeconfig: string;
  let work: string;

  before(async () => {
    ns = await createNamespace("e2e-dl-progress", { podSecurity: "restricted" });
    admin = await adminClient();
    op = await startOperator(ns.name);
    volume = await provideVolume(admin, ns.name, childNames.storage(model));
    await server.start();
    server.files.set("/models/resnet.bin", body);
    work = tempDir("e2e-dl-progress");
    const spec = (version: string) => ({
      model: { uri: `${server.url}/models/resnet.bin`, format: "tensorflow", version },
      storage: { size: "1Gi" },
      replicas: 1,
    });
    for (const [name, s] of [
      [model, spec("1")],
      ["other", { image: "registry.example.com/team/server:1", model: { path: "/m" }, replicas: 1 }],
    ] as const) {
      await admin.apply(
        mlModelKind,
        {
          apiVersion: "serving.mlmodel.dev/v1alpha1",
          kind: "MLModel",
          metadata: { name, namespace: ns.name },
          spec: s,
        },
        { fieldManager: "e2e", force: true },
      );
    }
    job = await waitFor("the operator to create the download Job", async () => {
      const jobs = await admin.list(builtinKinds.Job, {
        namespace: ns.name,
        labelSelector: `serving.mlmodel.dev/model=${model},app.kubernetes.io/component=download`,
      });
      return jobs.items[0] as unknown as V1Job | undefined;
    });
  });

  after(async () => {
    await op?.stop();
    await server.stop();
    await ns?.delete();
    for (const v of [volume, sharedVolume])
      if (v) await admin.delete(builtinKinds.PersistentVolume, { name: v }).catch(() => {});
  });

  const get = () => admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: model });

  it("the Job runs as its own ServiceAccount, with a token, its model's name, and a restricted pod", async () => {
    const pod = job.spec!.template.spec!;
    assert.equal(pod.serviceAccountName, childNames.downloader(model));
    assert.equal(pod.automountServiceAccountToken, true);
    const env = Object.fromEntries((pod.containers[0]!.env ?? []).map((e) => [e.name, e.value]));
    assert.equal(env.MLMODEL_NAME, model);
    assert.equal(env.MLMODEL_NAMESPACE, ns.name);
    // Its pod was admitted in a namespace enforcing `restricted` (kwok then "runs" it).
    const pods = await waitFor("the download pod", async () => {
      const list = await admin.list(builtinKinds.Pod, {
        namespace: ns.name,
        labelSelector: `job-name=${job.metadata!.name}`,
      });
      return list.items.length ? list.items : undefined;
    });
    assert.equal(
      (pods[0] as { spec?: { serviceAccountName?: string } }).spec?.serviceAccountName,
      pod.serviceAccountName,
    );
    const events = await kubeConfig().makeApiClient(CoreV1Api).listNamespacedEvent({ namespace: ns.name });
    assert.deepEqual(
      events.items.filter((e) => e.reason === "FailedCreate").map((e) => e.message),
      [],
      "no pod was refused (Pod Security, a missing ServiceAccount)",
    );
    // The identity objects belong to the MLModel (garbage-collected with it).
    for (const kind of [builtinKinds.ServiceAccount, builtinKinds.Role, builtinKinds.RoleBinding]) {
      const obj = await admin.get(kind, { namespace: ns.name, name: childNames.downloader(model) });
      assert.equal(obj?.metadata.ownerReferences?.[0]?.name, model, `${kind.kind} is owned by the model`);
      assert.equal(obj?.metadata.ownerReferences?.[0]?.controller, true);
    }
  });

  it("the downloader, with only the Job's token, reports advancing progress the operator keeps", async (t) => {
    const pod = job.spec!.template.spec!;
    const res = await kubeConfig()
      .makeApiClient(CoreV1Api)
      .createNamespacedServiceAccountToken({
        name: pod.serviceAccountName!,
        namespace: ns.name,
        body: { spec: { expirationSeconds: 3600 } },
      });
    token = res.status?.token ?? "";
    assert.ok(token, "the TokenRequest API returned a token");
    const cluster = kubeConfig().getCurrentCluster()!;
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "local", server: cluster.server, caData: cluster.caData, skipTLSVerify: false }],
      users: [{ name: "downloader", token }],
      contexts: [{ name: "downloader", cluster: "local", user: "downloader", namespace: ns.name }],
      currentContext: "downloader",
    });
    tokenKubeconfig = join(work, "downloader.kubeconfig");
    writeFileSync(tokenKubeconfig, kc.exportConfig());

    // Exactly the Job's container args and env; only DEST moves into a temp dir.
    const c = pod.containers[0]!;
    const args = [...(c.args ?? [])];
    const destAt = args.indexOf("--dest") + 1;
    assert.ok(destAt > 0, "the Job passes --dest");
    const dest = join(work, "model");
    args[destAt] = dest;
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: work,
      ...Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? ""])),
      KUBECONFIG: tokenKubeconfig,
      MLMODEL_TERMINATION_LOG: join(work, "termination-log"),
    };
    const auditFrom = auditLines().length;
    // The server holds the second half of the file until kubectl has shown partial progress
    // (or has run many times without), so a late kubectl on a loaded machine cannot miss it.
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    server.faults = { bytesPerSecond: 1024 * 1024, holdAt: { bytes: size / 2, until: released } };
    // Only a bound on a broken run (no progress ever shown): the assertions below then fail.
    const unhold = setTimeout(release, 180_000);
    const child = spawn(
      process.execPath,
      [join(repoRoot, "src/cli/main.ts"), ...c.command!.slice(1), ...args],
      {
        env,
        stdio: ["ignore", "ignore", "pipe"],
      },
    );
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const exited = new Promise<number>((resolve) => child.on("close", (code) => resolve(code ?? -1)));
    let done = false;
    void exited.then(() => {
      done = true;
    });

    const seen: Download[] = [];
    // kubectl runs beside the polling (a slow spawn must not hide progress reports), again and
    // again while the download runs: on a loaded machine one kubectl can start so late that the
    // download has finished by the time it reads.
    const tables: string[] = [];
    const partialRow = new RegExp(`^${model}\\s.*\\s\\d{1,2}% [\\d.]+[KM]i/${total} `);
    let kubectlLoop: Promise<void> | undefined;
    while (!done) {
      const d = (await get())?.status?.download as Download | undefined;
      if (d?.phase === "Downloading" && d.bytesDone !== seen.at(-1)?.bytesDone) seen.push(d);
      if (!kubectlLoop && d?.phase === "Downloading" && (d.bytesDone ?? 0) > 0) {
        kubectlLoop = (async () => {
          while (!done) {
            const shown = await kubectlGet();
            tables.push(shown);
            if (partialRow.test(shown.split("\n")[1] ?? "") || tables.length >= 30) release();
          }
        })();
      }
      await sleep(250);
    }
    await kubectlLoop;
    clearTimeout(unhold);
    const code = await exited;
    server.faults = {};
    assert.equal(code, 0, stderr);
    assert.doesNotMatch(stderr, /warning: status patch/, "every progress patch was allowed");
    assert.deepEqual(readFileSync(join(dest, "resnet.bin")), body);

    // Progress advanced: several partial reports, bytesDone increasing, the total right.
    const partial = seen.filter((d) => (d.bytesDone ?? 0) > 0 && (d.bytesDone ?? 0) < size);
    assert.ok(partial.length >= 2, `at least two partial reports (saw ${JSON.stringify(seen)})`);
    for (let i = 1; i < partial.length; i++)
      assert.ok(partial[i]!.bytesDone! > partial[i - 1]!.bytesDone!, "bytesDone only grows");
    for (const d of partial) {
      assert.equal(d.bytesTotal, size);
      assert.match(d.progress ?? "", new RegExp(`^\\d{1,2}% [\\d.]+[KM]i/${total} [\\d.]+([KM]i)?B?/s$`));
      // The operator's fields were there all along, next to the downloader's.
      assert.equal(d.job, job.metadata!.name);
      assert.ok(d.jobState, "jobState present");
    }
    // kubectl get mlm shows it in the Download column.
    assert.ok(tables.length > 0, "a partial report was seen, and kubectl ran then");
    for (const shown of tables)
      assert.match(shown.split("\n")[0] ?? "", /NAME\s+PHASE\s+READY\s+REPLICAS\s+DOWNLOAD\s+URL/);
    assert.ok(
      tables.some((shown) => partialRow.test(shown.split("\n")[1] ?? "")),
      `a kubectl get mlm during the download showed partial progress; it printed:\n${tables.join("\n")}`,
    );

    const final = await get();
    const d = final?.status?.download as Download;
    assert.equal(d.phase, "Complete");
    assert.equal(d.bytesDone, size);
    assert.equal(d.progress, `100% ${total}`);
    assert.equal(d.job, job.metadata!.name);
    assert.ok(["Pending", "Running", "Succeeded"].includes(d.jobState ?? ""), `jobState ${d.jobState}`);
    // Two managers, disjoint fields.
    const theirs = downloadFields(final, progressFieldManager);
    const ours = downloadFields(final, fieldManager);
    assert.ok(theirs.includes("bytesDone") && theirs.includes("progress"), `downloader owns ${theirs}`);
    assert.ok(ours.includes("job") && ours.includes("jobState"), `operator owns ${ours}`);
    assert.deepEqual(
      theirs.filter((f) => ours.includes(f)),
      [],
      "no field is owned by both",
    );

    const patches = auditLines()
      .slice(auditFrom)
      .filter(
        (e) =>
          e.user?.username === `system:serviceaccount:${ns.name}:${childNames.downloader(model)}` &&
          e.verb === "patch",
      );
    if (localCluster()) {
      assert.ok(patches.length >= 3, `progress patches and the final one (audit: ${patches.length})`);
      assert.deepEqual(
        patches.filter((e) => e.responseStatus?.code !== 200).map((e) => e.responseStatus?.code),
        [],
      );
    }
    t.diagnostic(`kubectl get mlm while downloading (${tables.length} runs), first:\n${tables[0]}`);
    t.diagnostic(
      `${size} bytes at ~1 MiB/s: ${partial.length} partial reports seen, ${patches.length} status patches by the Job's identity (audit)`,
    );
  });

  it("a later operator status write leaves the downloader's fields alone", async () => {
    const earlier = (await get())?.status?.download as Download;
    await admin.patch(mlModelKind, { namespace: ns.name, name: model }, { spec: { replicas: 2 } }, "merge");
    const later = await waitFor("the operator to write status for generation 2", async () => {
      const m = await get();
      return m?.status?.observedGeneration === m?.metadata.generation && m?.metadata.generation === 2
        ? m
        : undefined;
    });
    const d = later.status?.download as Download;
    assert.equal(d.progress, earlier.progress);
    assert.equal(d.bytesDone, earlier.bytesDone);
    assert.equal(d.phase, "Complete");
  });

  it("the Job's token is denied everything but its own model's status", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(tokenKubeconfig);
    const sa = KubeClient.fromKubeConfig(kc);
    const status = (name: string) => ({
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name, namespace: ns.name },
      status: { download: { progress: "forged" } },
    });
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (err: unknown) => (err instanceof ApiError ? err.code : -1),
      );
    assert.equal(
      await code(
        sa.applyStatus(mlModelKind, status("other"), { fieldManager: progressFieldManager, force: true }),
      ),
      403,
      "another model's status",
    );
    assert.equal(
      await code(
        sa.patch(mlModelKind, { namespace: ns.name, name: model }, { spec: { replicas: 5 } }, "merge"),
      ),
      403,
      "its own model's spec",
    );
    assert.equal(await code(sa.get(mlModelKind, { namespace: ns.name, name: model })), 403, "reading");
    assert.equal(
      await code(sa.list(builtinKinds.Secret, { namespace: ns.name })),
      403,
      "the namespace's Secrets",
    );
    // SubjectAccessReviews agree, and the one right it has is granted.
    const authz = kubeConfig().makeApiClient(AuthorizationV1Api);
    const can = async (verb: string, name: string, subresource?: string) =>
      (
        await authz.createSubjectAccessReview({
          body: {
            spec: {
              user: `system:serviceaccount:${ns.name}:${childNames.downloader(model)}`,
              groups: ["system:serviceaccounts", `system:serviceaccounts:${ns.name}`, "system:authenticated"],
              resourceAttributes: {
                group: "serving.mlmodel.dev",
                resource: "mlmodels",
                namespace: ns.name,
                verb,
                name,
                ...(subresource ? { subresource } : {}),
              },
            },
          },
        })
      ).status?.allowed === true;
    assert.equal(await can("patch", model, "status"), true);
    assert.equal(await can("patch", "other", "status"), false);
    assert.equal(await can("patch", model), false);
    assert.equal(await can("update", model, "status"), false);
    const unchanged = (await get())?.status?.download as Download;
    assert.notEqual(unchanged.progress, "forged");
  });

  it("a new download (new version) starts from cleared progress", async () => {
    const old = job.metadata!.name;
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: model },
      { spec: { model: { version: "2" } } },
      "merge",
    );
    const m = await waitFor("the new download Job in status", async () => {
      const x = await get();
      const d = x?.status?.download as Download | undefined;
      return d?.job && d.job !== old ? x : undefined;
    });
    const d = m.status?.download as Download;
    // Until the new Job's downloader reports (it never does here), no progress is claimed.
    assert.equal(d.progress, undefined, JSON.stringify(d));
    assert.equal(d.bytesDone, undefined);
    assert.equal(d.phase, undefined);
  });

  it("a model that no longer downloads (pvc://) shows no download progress", async () => {
    // Progress reported for the current Job, by its own identity...
    const kc = new KubeConfig();
    kc.loadFromFile(tokenKubeconfig);
    const now = new Date().toISOString();
    await KubeClient.fromKubeConfig(kc).applyStatus(
      mlModelKind,
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name: model, namespace: ns.name },
        status: {
          download: {
            phase: "Complete",
            bytesDone: 1,
            bytesPerSecond: 0,
            filesDone: 1,
            startedAt: now,
            updatedAt: now,
            progress: "100% 1B",
          },
        },
      },
      { fieldManager: progressFieldManager, force: true },
    );
    assert.equal((await get())?.status?.download?.progress, "100% 1B");
    // ...then the model moves to a claim of the user's: nothing is downloaded any more.
    sharedVolume = await userClaim(admin, ns.name, "shared");
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: model },
      { spec: { model: { uri: "pvc://shared/models/resnet", version: null } } },
      "merge",
    );
    const m = await waitFor("status of the pvc:// model", async () => {
      const x = await get();
      return x?.status?.observedGeneration === x?.metadata.generation &&
        x?.status?.conditions?.some((c) => c.type === "ModelDownloaded" && c.reason === "NotRequired")
        ? x
        : undefined;
    });
    await waitFor("the old progress to be gone", async () => !(await get())?.status?.download);
    assert.ok(m.status?.conditions?.length);
  });

  it("deleting the model removes the Job's identity (owner references)", async () => {
    await admin.delete(mlModelKind, { namespace: ns.name, name: model });
    for (const kind of [builtinKinds.ServiceAccount, builtinKinds.Role, builtinKinds.RoleBinding]) {
      await waitFor(
        `${kind.kind} ${childNames.downloader(model)} to be collected`,
        async () => !(await admin.get(kind, { namespace: ns.name, name: childNames.downloader(model) })),
      );
    }
  });

  async function kubectlGet(): Promise<string> {
    const { kubectl } = await ensureBinaries();
    return new Promise((resolve, reject) => {
      const p = spawn(kubectl, ["get", "mlm", model, "-n", ns.name], {
        env: { ...process.env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      p.stdout.on("data", (d: Buffer) => {
        out += d.toString();
      });
      p.stderr.on("data", (d: Buffer) => {
        err += d.toString();
      });
      p.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`kubectl get mlm: ${err}`))));
    });
  }
});

interface AuditEvent {
  user?: { username?: string };
  verb?: string;
  responseStatus?: { code?: number };
}

function auditLines(): AuditEvent[] {
  const cluster = localCluster();
  if (!cluster) return [];
  return readFileSync(cluster.auditLog, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as AuditEvent);
}
