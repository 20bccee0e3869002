/**
 * Backup and restore across clusters, on the real control plane (kwok nodes): a model with
 * three revisions (the first with credentials in its URI, kept by the operator in a URI
 * Secret) is backed up with `mlmodel backup`, and its cluster goes down. In a fresh cluster
 * whose operator already runs, a dry run names the Secret the backup needs, then, with it,
 * `mlmodel restore` recreates the model: the same revision serves, `mlmodel history` matches
 * the old cluster's, a second restore refuses, and `mlmodel rollback --to-revision 1` serves
 * revision 1's spec (its exact URI read back from the Secret).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { V1ControllerRevision, V1Deployment } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { labels } from "../../../src/operator/names.ts";
import { recordedSource } from "../../../src/operator/revisions.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";
import {
  adminClient,
  provideVolume,
  type RunningOperator,
  repoRoot,
  startOperator,
  waitForPhase,
} from "../operator/helpers.ts";

const execFileAsync = promisify(execFile);
const cli = join(repoRoot, "src", "cli", "main.ts");
const ns = "models";
const name = "resnet";
const signature = "s3cr3tSignatureValue";
const signedUri = `https://models.example.com/m/v1.tgz?X-Amz-Signature=${signature}`;

interface HistoryEntry {
  number: number;
  hash: string;
  marks: string[];
  modelURI?: string;
}

/** Runs the CLI against a cluster; resolves with its exit code and output, never rejects on exit codes. */
async function mlmodel(kubeconfig: string, ...args: string[]) {
  try {
    const { stdout, stderr } = await execFileAsync(process.execPath, [
      cli,
      ...args,
      "--kubeconfig",
      kubeconfig,
    ]);
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

async function history(kubeconfig: string): Promise<HistoryEntry[]> {
  const out = await mlmodel(kubeconfig, "history", name, "-n", ns, "-o", "json");
  assert.equal(out.code, 0, out.stderr);
  return JSON.parse(out.stdout) as HistoryEntry[];
}

/** Waits until the model is Ready and its status says what `revision` wants. */
async function readyOn(client: KubeClient, revision: (m: MLModel) => boolean): Promise<MLModel> {
  return waitFor("the model Ready on the revision", async () => {
    const m = await waitForPhase(client, ns, name, "Ready");
    return revision(m) ? m : undefined;
  });
}

async function deployment(client: KubeClient): Promise<V1Deployment> {
  return (await client.get(builtinKinds.Deployment, { namespace: ns, name })) as unknown as V1Deployment;
}

describe("mlmodel backup, cluster down, a fresh cluster, mlmodel restore", { timeout: 600_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-backup-e2e-"));
  const file = join(dir, "backup.yaml");
  let source: PrivateCluster | undefined;
  let target: PrivateCluster | undefined;
  let sourceOperator: RunningOperator | undefined;
  let targetOperator: RunningOperator | undefined;
  let before3: HistoryEntry[];
  let servedBefore: string;
  let uriSecret: { name: string; data: Record<string, string> };

  before(async () => {
    source = await startPrivateCluster("backup-source");
    const admin = await adminClient(source.kubeConfig());
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels: { "pod-security.kubernetes.io/enforce": "restricted" } },
    });
    sourceOperator = await startOperator(ns, { adminKc: source.kubeConfig() });
    await provideVolume(admin, ns, `${name}-model`);
    await admin.create(mlModelKind, {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name, namespace: ns },
      spec: { model: { uri: signedUri, format: "tensorflow" }, replicas: 1 },
    });
    const first = await readyOn(admin, (m) => m.status?.revision?.currentNumber === 1);
    await admin.patch(
      mlModelKind,
      { namespace: ns, name },
      { spec: { model: { uri: "https://models.example.com/m/v2.tgz" } } },
      "merge",
    );
    await readyOn(admin, (m) => m.status?.revision?.currentNumber === 2);
    await admin.patch(
      mlModelKind,
      { namespace: ns, name },
      { spec: { env: [{ name: "LOG_LEVEL", value: "debug" }] } },
      "merge",
    );
    const third = await readyOn(admin, (m) => m.status?.revision?.currentNumber === 3);
    servedBefore = third.status!.revision!.current!;
    before3 = await history(source.kubeconfigPath);
    // What a user keeps in their own secret store: the URI Secret of revision 1.
    const revs = (
      await admin.list<KubeObject>(builtinKinds.ControllerRevision, {
        namespace: ns,
        labelSelector: `${labels.model}=${name}`,
      })
    ).items as unknown as V1ControllerRevision[];
    const rev1 = revs.find((r) => r.metadata?.labels?.[labels.revision] === first.status?.revision?.current)!;
    const secretName = recordedSource(rev1)!.uriSecret;
    const secret = await admin.get<KubeObject & { data: Record<string, string> }>(builtinKinds.Secret, {
      namespace: ns,
      name: secretName,
    });
    uriSecret = { name: secretName, data: secret!.data };
  });

  after(async () => {
    await sourceOperator?.stop();
    await targetOperator?.stop();
    await source?.stop();
    await target?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the source cluster's history has three revisions, the newest serving", () => {
    assert.deepEqual(
      before3.map((e) => [e.number, e.marks]),
      [
        [3, ["serving"]],
        [2, []],
        [1, []],
      ],
    );
  });

  it("mlmodel backup writes one file with no credential in it, naming the Secret a restore needs", async () => {
    const out = await mlmodel(source!.kubeconfigPath, "backup", "-n", ns, "-o", file);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stderr, /backed up 1 MLModel\(s\) with 3 revision\(s\)/);
    const text = readFileSync(file, "utf8");
    assert.doesNotMatch(text, new RegExp(signature));
    assert.ok(
      text.includes(
        `Secret ${ns}/${uriSecret.name}: revision 1's exact model URI of MLModel ${name} (only to roll back to it)`,
      ),
    );
    assert.doesNotMatch(text, /\buid:|resourceVersion:|managedFields:|creationTimestamp:/);
    // cluster down
    await sourceOperator!.stop();
    sourceOperator = undefined;
    await source!.stop();
    source = undefined;
  });

  it("a fresh cluster: a file that is not a backup is refused; a dry run names the missing Secret and writes nothing", async () => {
    target = await startPrivateCluster("backup-target");
    targetOperator = await startOperator(ns, { adminKc: target.kubeConfig() });
    const admin = await adminClient(target.kubeConfig());
    const notBackup = join(dir, "not-a-backup.yaml");
    writeFileSync(notBackup, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    const refused = await mlmodel(target.kubeconfigPath, "restore", notBackup);
    assert.equal(refused.code, 1);
    assert.match(
      refused.stderr,
      /not-a-backup.yaml is not an mlmodel backup: its first line is "apiVersion: v1"/,
    );
    const dry = await mlmodel(target.kubeconfigPath, "restore", file, "--dry-run");
    assert.equal(dry.code, 0, dry.stderr);
    assert.match(
      dry.stderr,
      new RegExp(
        `Secret ${ns}/${uriSecret.name} \\(revision 1's exact model URI of MLModel ${name}\\) does not exist`,
      ),
    );
    assert.match(dry.stdout, /dry run: nothing written/);
    assert.equal(
      await admin.get(builtinKinds.Namespace, { name: ns }),
      undefined,
      "a dry run writes nothing",
    );
  });

  it("restore recreates the model: the same revision serves and mlmodel history matches", async (t) => {
    const admin = await adminClient(target!.kubeConfig());
    // The user restores their Secrets first (no owner: the one they had named the old cluster's revision).
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels: { "pod-security.kubernetes.io/enforce": "restricted" } },
    });
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: uriSecret.name, namespace: ns },
      type: "serving.mlmodel.dev/model-uri",
      data: uriSecret.data,
    });
    await provideVolume(admin, ns, `${name}-model`);
    // Every document is an object the API server takes as kubectl applies it (docs/backup.md
    // says what a plain apply does not restore).
    const { kubectl } = await ensureBinaries();
    const applied = await execFileAsync(kubectl, [
      "apply",
      "--dry-run=server",
      "-f",
      file,
      "--kubeconfig",
      target!.kubeconfigPath,
    ]);
    assert.match(applied.stdout, /mlmodel.serving.mlmodel.dev\/resnet created \(server dry run\)/);
    assert.equal(
      applied.stdout.match(/controllerrevision.apps\/resnet-[0-9a-f]{10} created \(server dry run\)/g)
        ?.length,
      3,
    );
    const out = await mlmodel(target!.kubeconfigPath, "restore", file);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /restored 1 MLModel\(s\) with 3 revision\(s\)/);
    t.diagnostic(out.stdout.trim());
    const m = await readyOn(admin, (x) => x.status?.revision?.current === servedBefore);
    assert.equal(m.status?.revision?.currentNumber, 3);
    assert.equal((await deployment(admin)).spec?.template.metadata?.labels?.[labels.revision], servedBefore);
    const after = await waitFor("history to settle", async () => {
      const h = await history(target!.kubeconfigPath);
      return JSON.stringify(h) === JSON.stringify(before3) ? h : undefined;
    }).catch(async () => history(target!.kubeconfigPath));
    assert.deepEqual(after, before3);
    const secret = await admin.get(builtinKinds.Secret, { namespace: ns, name: uriSecret.name });
    assert.equal(
      secret?.metadata.ownerReferences?.[0]?.kind,
      "ControllerRevision",
      "the Secret goes with its revision again",
    );
  });

  it("a second restore refuses: the model exists", async () => {
    const again = await mlmodel(target!.kubeconfigPath, "restore", file);
    assert.equal(again.code, 1);
    assert.match(
      again.stderr,
      /the cluster already has 1 MLModel\(s\) named as in the backup \(models\/resnet\): nothing was written/,
    );
  });

  it("rollback --to-revision 1 serves revision 1's spec, its exact URI read from the Secret", async () => {
    const admin = await adminClient(target!.kubeConfig());
    const out = await mlmodel(target!.kubeconfigPath, "rollback", name, "-n", ns, "--to-revision", "1");
    assert.equal(out.code, 0, out.stderr);
    const first = before3.find((e) => e.number === 1)!.hash;
    const m = await readyOn(admin, (x) => x.status?.revision?.current === first);
    assert.equal(m.spec.model.uri, signedUri);
    assert.equal(m.spec.env, undefined, "revision 1's whole serving spec");
    assert.equal(m.status?.revision?.currentNumber, 4, "served again, it takes the next number");
    const template = (await deployment(admin)).spec?.template;
    assert.equal(template?.metadata?.labels?.[labels.revision], first);
    assert.ok(!template?.spec?.containers.some((c) => c.env?.some((e) => e.name === "LOG_LEVEL")));
  });

  it("after a plain kubectl apply of the file (history lost), restore --overwrite brings the history back", async (t) => {
    const admin = await adminClient(target!.kubeConfig());
    await admin.delete(mlModelKind, { namespace: ns, name });
    await waitFor("the model and its revisions to be gone", async () => {
      const revs = await admin.list(builtinKinds.ControllerRevision, {
        namespace: ns,
        labelSelector: `${labels.model}=${name}`,
      });
      return !(await admin.get(mlModelKind, { namespace: ns, name })) && revs.items.length === 0;
    });
    // The model's claim went with it, and its volume with the claim: a new one for the new claim.
    const oldVolume = `${ns}-${name}-model`; // provideVolume's name for it
    await admin.delete(builtinKinds.PersistentVolume, { name: oldVolume });
    await waitFor(
      "the old volume to be gone",
      async () => !(await admin.get(builtinKinds.PersistentVolume, { name: oldVolume })),
    );
    await provideVolume(admin, ns, `${name}-model`);
    const { kubectl } = await ensureBinaries();
    await execFileAsync(kubectl, ["apply", "-f", file, "--kubeconfig", target!.kubeconfigPath]);
    await readyOn(admin, (m) => m.status?.revision?.current === servedBefore);
    // As docs/backup.md says: the operator does not adopt the orphaned revisions, and numbers
    // the spec's revision 1 on the object of that name.
    const lost = await waitFor("the operator to record the spec's revision", async () => {
      const h = await history(target!.kubeconfigPath);
      return h.length ? h : undefined;
    });
    assert.deepEqual(
      lost.map((e) => [e.number, e.hash]),
      [[1, servedBefore]],
    );
    const out = await mlmodel(target!.kubeconfigPath, "restore", file, "--overwrite");
    assert.equal(out.code, 0, out.stderr);
    t.diagnostic(out.stdout.trim());
    const m = await readyOn(admin, (x) => x.status?.revision?.currentNumber === 3);
    assert.equal(m.status?.revision?.current, servedBefore);
    assert.deepEqual(await history(target!.kubeconfigPath), before3);
  });
});
