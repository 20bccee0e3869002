/**
 * Updates without downtime and revision history, end to end with the operator under its own
 * RBAC. A sampler lists the ready serving pods of the Service's selector throughout each
 * update; the count must never drop below the replicas the spec promises. A model change
 * downloads into a new directory with a new Job before any serving pod of the new revision
 * exists; a non-model change rolls without a download. Every revision is a ControllerRevision;
 * `mlmodel history` lists them, `mlmodel rollback --to-revision` serves one again, and the
 * history stays within its limit without dropping the served revision.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { V1ControllerRevision, V1Job } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import { pruneJobName } from "../../../src/operator/prune.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  applyObjects,
  operatorTestBed,
  podsOf,
  provideVolume,
  type RunningOperator,
  removeTestBed,
  repoRoot,
  waitForPhase,
} from "../operator/helpers.ts";
import { sampleReadyPods } from "./sampler.ts";

const name = "rolling";
const promised = 2;
const run = promisify(execFile);

describe("rollouts without downtime, revision history, rollback", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  let volume: string;

  const key = () => ({ namespace: ns.name, name });
  const model = async () => (await admin.get<MLModel>(mlModelKind, key()))!;
  async function revisions(): Promise<V1ControllerRevision[]> {
    const list = await admin.list<KubeObject>(builtinKinds.ControllerRevision, {
      namespace: ns.name,
      labelSelector: `serving.mlmodel.dev/model=${name}`,
    });
    return list.items as unknown as V1ControllerRevision[];
  }
  async function jobs(): Promise<V1Job[]> {
    const list = await admin.list<KubeObject>(builtinKinds.Job, {
      namespace: ns.name,
      labelSelector: `serving.mlmodel.dev/model=${name}`,
    });
    return list.items as unknown as V1Job[];
  }

  /** Waits until every serving pod runs `revision` and the model is Ready on it. */
  async function rolledOutTo(): Promise<MLModel> {
    const m = await waitFor("a Ready model on a new revision with only its pods", async () => {
      const now = await waitForPhase(admin, ns.name, name, "Ready");
      const pods = await podsOf(admin, ns.name, name);
      const current = now.status?.revision?.current;
      return pods.length === promised &&
        pods.every((p) => p.metadata.labels?.["serving.mlmodel.dev/revision"] === current)
        ? now
        : undefined;
    });
    return m;
  }

  /** Applies an update while sampling, and returns the ready-pod counts seen. */
  async function updateWhileSampling(patch: unknown): Promise<{ counts: number[]; after: MLModel }> {
    const before = (await model()).status?.revision?.current;
    const sampler = sampleReadyPods(admin, ns.name, name);
    await admin.patch(mlModelKind, key(), patch, "merge");
    const after = await waitFor("the update to roll out", async () => {
      const m = await rolledOutTo();
      return m.status?.revision?.current !== before ? m : undefined;
    });
    return { counts: await sampler.stop(), after };
  }

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-rollout"));
    volume = await provideVolume(admin, ns.name, `${name}-model`);
    await applyObjects(admin, ns.name, [
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name },
        spec: {
          model: { uri: "https://models.example.com/m/v1.tgz", format: "tensorflow" },
          replicas: promised,
          rollout: { revisionHistoryLimit: 3 },
        },
      },
    ]);
    await rolledOutTo();
  });

  after(() => removeTestBed({ ns, admin, operator }, [volume]));

  it("records the first revision", async () => {
    const m = await model();
    const revs = await revisions();
    assert.equal(revs.length, 1);
    assert.equal(revs[0]?.revision, 1);
    assert.equal(m.status?.revision?.currentNumber, 1);
    assert.equal(m.status?.revision?.lastReady, m.status?.revision?.current);
    assert.equal(m.status?.revision?.rollingOut, undefined);
  });

  it("a model change downloads beside the served version first, then rolls with no fewer ready pods than promised", async () => {
    const jobBefore = (await jobs()).map((j) => j.metadata?.name);
    const { counts, after } = await updateWhileSampling({
      spec: { model: { uri: "https://models.example.com/m/v2.tgz" } },
    });
    assert.ok(counts.length >= 3, `sampled ${counts.length} times`);
    assert.ok(Math.min(...counts) >= promised, `ready pods seen: ${counts.join(",")}`);
    const newJob = (await jobs()).find((j) => !jobBefore.includes(j.metadata?.name));
    assert.ok(newJob, "a new download Job for the new content");
    assert.match(JSON.stringify(newJob.spec?.template.spec?.containers[0]?.args), /v2\.tgz/);
    // The new content goes to its own directory: the served one is untouched while it downloads.
    const dest = (args: string[] | undefined) => args?.[args.indexOf("--dest") + 1];
    assert.notEqual(dest(newJob.spec?.template.spec?.containers[0]?.args), undefined);
    // No serving pod of the new revision existed before its download completed.
    const completed = Date.parse(String(newJob.status?.completionTime));
    for (const pod of await podsOf(admin, ns.name, name)) {
      assert.ok(Date.parse(String(pod.metadata.creationTimestamp)) >= completed - 1000);
    }
    assert.equal(after.status?.revision?.currentNumber, 2);
  });

  it("a non-model change rolls without a new download, with no fewer ready pods than promised", async () => {
    const jobNames = (await jobs()).map((j) => j.metadata?.name).sort();
    const { counts, after } = await updateWhileSampling({
      spec: { env: [{ name: "LOG_LEVEL", value: "debug" }] },
    });
    assert.ok(counts.length >= 3, `sampled ${counts.length} times`);
    assert.ok(Math.min(...counts) >= promised, `ready pods seen: ${counts.join(",")}`);
    assert.deepEqual((await jobs()).map((j) => j.metadata?.name).sort(), jobNames, "no new download Job");
    assert.equal(after.status?.revision?.currentNumber, 3);
  });

  it("mlmodel history lists the revisions; mlmodel rollback --to-revision 1 serves the first one again", async () => {
    const cli = join(repoRoot, "src", "cli", "main.ts");
    const history = await run(process.execPath, [cli, "history", name, "-n", ns.name, "-o", "json"]);
    const entries = JSON.parse(history.stdout) as {
      number: number;
      hash: string;
      marks: string[];
      modelURI: string;
    }[];
    assert.deepEqual(
      entries.map((e) => e.number),
      [3, 2, 1],
    );
    assert.deepEqual(entries[0]?.marks, ["serving"]);
    assert.match(entries[2]?.modelURI ?? "", /v1\.tgz/);
    const first = entries[2]!.hash;

    const sampler = sampleReadyPods(admin, ns.name, name);
    await run(process.execPath, [cli, "rollback", name, "-n", ns.name, "--to-revision", "1"]);
    const m = await waitFor("the rollback to be served", async () => {
      const now = await rolledOutTo();
      return now.status?.revision?.current === first ? now : undefined;
    });
    const counts = await sampler.stop();
    assert.ok(Math.min(...counts) >= promised, `ready pods seen: ${counts.join(",")}`);
    assert.match(m.spec.model.uri ?? "", /v1\.tgz/);
    assert.equal(m.spec.env, undefined, "the whole serving spec of revision 1, not a merge");
    assert.equal(m.spec.replicas, promised, "scaling is kept");
    // Serving an old revision again gives it the next number, as a Deployment does.
    assert.equal(m.status?.revision?.currentNumber, 4);
  });

  it("history stays within revisionHistoryLimit and never drops the served revision", async () => {
    await updateWhileSampling({ spec: { model: { uri: "https://models.example.com/m/v3.tgz" } } });
    const m = await model();
    const revs = await waitFor("old revisions to be pruned", async () => {
      const r = await revisions();
      return r.length === 3 ? r : undefined;
    });
    const hashes = revs.map((r) => r.metadata?.labels?.["serving.mlmodel.dev/revision"]);
    assert.ok(hashes.includes(m.status?.revision?.current));
    assert.deepEqual(revs.map((r) => r.revision).sort(), [3, 4, 5]);
  });

  it("prunes model versions no kept revision uses from storage, never the served one", async () => {
    await updateWhileSampling({ spec: { model: { uri: "https://models.example.com/m/v4.tgz" } } });
    const served = await model();
    const hashOf = (v: string) => contentHash({ model: { uri: `https://models.example.com/m/${v}.tgz` } });
    // Kept revisions now serve v1 (the rollback), v3 and v4; v2 only lived in pruned ones.
    const want = [hashOf("v1"), hashOf("v3"), hashOf("v4")].sort();
    const prune = await waitFor("the prune Job for the kept versions", async () =>
      (await jobs()).find((j) => j.metadata?.name === pruneJobName(name, want)),
    );
    const command = prune.spec?.template.spec?.containers[0]?.command ?? [];
    const keep = command.slice(4);
    assert.deepEqual(keep, want);
    assert.ok(keep.includes(contentHash(served.spec)), "the served version is kept");
    assert.ok(!keep.includes(hashOf("v2")));
    assert.equal(command[3], "/mnt/models", "prunes under the mount path");
  });
});
