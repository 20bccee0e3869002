/**
 * Fewer round trips per model (bench/README.md, phase E): the revision applied beside the
 * Deployment and Service, a new generation's first Deploying held for the next status, and the
 * echoes of the operator's own child creates waking nobody (OwnWrites; the download path's
 * claim and Job too). Counts and behaviour, no timing.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job } from "@kubernetes/client-node";
import pino from "pino";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec, MLModelStatus } from "../../../src/api/mlmodel.ts";
import type { ModelClient } from "../../../src/operator/mlmodel/context.ts";
import { lookAgainBoundsMs } from "../../../src/operator/mlmodel/download-pods.ts";
import { reconcileMLModel } from "../../../src/operator/mlmodel/reconcile.ts";
import { countsSettleMs, rolloutSettleMs, startsRollout } from "../../../src/operator/mlmodel/report.ts";
import { jobWakes, OwnWrites } from "../../../src/operator/mlmodel/wakes.ts";
import { childNames } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import {
  type AppliedVersion,
  answerMeta,
  builtinKinds,
  Controller,
  FakeClock,
  KubeClient,
  type KubeObject,
  MemoryStore,
  type ResourceKind,
  type StoreChange,
} from "../../../src/runtime/index.ts";
import { pod } from "./fixtures.ts";
import { line, modelWorld, RecordingClient, revisionOf, type World } from "./reconcile-harness.ts";

const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });
const downloaded = (version: string): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version },
});

const world = modelWorld;

/**
 * The Deployment controller counts `count` pods of `revision` (none ready), and they exist:
 * its pod created (1) or gone again (0).
 */
function podCounted(w: World, revision: string, count: 0 | 1): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.status = { observedGeneration: d.metadata.generation ?? 1, replicas: count, updatedReplicas: count };
  });
  if (count) w.put(builtinKinds.Pod, pod(`resnet-${revision}-0`, revision) as KubeObject);
  else w.remove(builtinKinds.Pod, `resnet-${revision}-0`);
}

/** The Deployment reports its rollout done and one pod of `revision` is ready. */
function rolledOut(w: World, revision: string, generation = 1): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.metadata.generation = generation;
    d.status = {
      observedGeneration: generation,
      replicas: 1,
      updatedReplicas: 1,
      readyReplicas: 1,
      availableReplicas: 1,
    };
  });
  w.put(builtinKinds.Pod, pod(`resnet-${revision}-0`, revision, { ready: true }) as KubeObject);
}

describe("the revision beside the Deployment and Service", () => {
  it("is applied without waiting: the serving children are sent while its answer is pending", async () => {
    const w = world(image("1"));
    const inner = w.client;
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const sentWhilePending: string[] = [];
    // The revision's apply answers only once released; every other write goes through at once.
    const client: ModelClient = {
      applyDiscardingAnswer: (kind, obj, opts) => inner.applyDiscardingAnswer(kind, obj, opts),
      applyStatus: (kind, obj, opts) => inner.applyStatus(kind, obj, opts),
      patch: (kind, key, patch, type, opts) => inner.patch(kind, key, patch, type, opts),
      delete: (kind, key, opts) => inner.delete(kind, key, opts),
      create: (kind, obj) => inner.create(kind, obj),
      list: (kind, opts) => inner.list(kind, opts),
      applyForVersion: async (kind: ResourceKind, obj: KubeObject, opts): Promise<AppliedVersion> => {
        const answer = inner.applyForVersion(kind, obj, opts);
        if (kind.kind !== "ControllerRevision") return answer;
        await gate;
        sentWhilePending.push(...inner.writes.map(line));
        return answer;
      },
    };
    w.followHeldCounts = false;
    const ctx = w.context();
    const done = reconcileMLModel({ ...ctx, client }, { ...w.config, now: () => w.now, memory: w.memory });
    await new Promise((r) => setImmediate(r));
    release();
    await done;
    assert.deepEqual(sentWhilePending, [
      `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
      "apply Deployment/resnet",
      "apply Service/resnet",
    ]);
  });

  it("a failed revision write still fails the reconcile, after the other children's writes ended", async () => {
    const w = world(image("1"));
    w.client.failNext({ kind: "ControllerRevision" }, 422);
    await assert.rejects(w.reconcile(), (e: Error & { code?: number }) => e.code === 422);
    assert.deepEqual(w.newWrites().map(line), [
      `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
      "apply Deployment/resnet",
      "apply Service/resnet",
    ]);
  });

  it("a failed Deployment write fails the reconcile; the revision is recorded all the same", async () => {
    const w = world(image("1"));
    w.client.failNext({ kind: "Deployment" }, 409);
    await assert.rejects(w.reconcile(), (e: Error & { code?: number }) => e.code === 409);
    assert.ok(
      w
        .newWrites()
        .map(line)
        .includes(`apply ControllerRevision/resnet-${revisionOf(image("1"))}`),
    );
    w.settle();
    assert.ok(w.get(builtinKinds.ControllerRevision, `resnet-${revisionOf(image("1"))}`));
  });
});

describe("a new generation's first Deploying is held for the next status (HeldRollouts)", () => {
  it("a new model: children written, no status, and the queue is asked back within rolloutSettleMs", async () => {
    const w = world(image("1"));
    w.followHeldCounts = false;
    w.tickMs = 0;
    const first = await w.reconcile();
    assert.deepEqual(first.writes, [
      `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
      "apply Deployment/resnet",
      "apply Service/resnet",
    ]);
    assert.deepEqual(first.result, { requeueAfterMs: rolloutSettleMs });
    assert.equal(w.events.length, 0, "no Event for a status not written");
    w.settle();
    // The pod turns ready within the hold: Ready is written at once, the only status write.
    rolledOut(w, revisionOf(image("1")));
    const ready = await w.reconcile();
    assert.deepEqual(ready.writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.deepEqual(ready.result, { replacesRequeue: true }, "the hold's requeue is withdrawn");
    assert.equal(w.heldRollouts.size, 0, "nothing left held");
    assert.equal(w.client.writes.filter((x) => x.verb === "applyStatus").length, 1);
  });

  it("held no longer than rolloutSettleMs: then Deploying is written as before", async () => {
    const w = world(image("1"));
    w.followHeldCounts = false;
    w.tickMs = 0;
    await w.reconcile();
    w.settle();
    w.now = new Date(w.now.getTime() + rolloutSettleMs / 2);
    const still = await w.reconcile();
    assert.deepEqual(still.writes, [], "a wake within the hold writes nothing");
    assert.deepEqual(still.result, { requeueAfterMs: rolloutSettleMs / 2 }, "the hold is not restarted");
    w.now = new Date(w.now.getTime() + rolloutSettleMs / 2);
    assert.deepEqual((await w.reconcile()).writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Deploying");
  });

  it("a spec update of a Ready model: the old Ready stays for the old generation, then Ready for the new", async () => {
    const w = world(image("1"));
    await w.reconcile();
    w.settle();
    rolledOut(w, revisionOf(image("1")));
    await w.reconcile();
    w.settle();
    assert.equal(w.get<MLModel>(mlModelKind, "resnet")?.status?.phase, "Ready");
    w.followHeldCounts = false;
    w.tickMs = 0;
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.spec = image("2");
      m.metadata.generation = 2;
    });
    const update = await w.reconcile();
    assert.ok(!update.writes.includes("applyStatus MLModel/resnet"));
    assert.deepEqual(update.result, { requeueAfterMs: rolloutSettleMs });
    w.settle();
    const cached = w.get<MLModel>(mlModelKind, "resnet")?.status;
    assert.equal(cached?.observedGeneration, 1, "what status says is about generation 1");
    rolledOut(w, revisionOf(image("2")), 2);
    assert.deepEqual((await w.reconcile()).writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.equal(w.lastStatus()?.observedGeneration, 2);
  });

  /** A new model's Deploying written (its hold over), then its pod created: a change of counts alone, held back. */
  async function countsHeld(): Promise<{ w: World; rev: string }> {
    const w = world(image("1"));
    const rev = revisionOf(image("1"));
    w.followHeldCounts = false;
    w.tickMs = 0;
    await w.reconcile();
    w.settle();
    w.now = new Date(w.now.getTime() + rolloutSettleMs);
    assert.deepEqual(
      (await w.reconcile()).writes,
      ["applyStatus MLModel/resnet"],
      "Deploying, the hold over",
    );
    w.settle();
    podCounted(w, rev, 1);
    const counted = await w.reconcile();
    assert.deepEqual(counted.writes, []);
    assert.deepEqual(counted.result, { requeueAfterMs: countsSettleMs });
    return { w, rev };
  }

  it("a change of counts held back, then a status written at once: the counts' requeue is withdrawn", async () => {
    const { w, rev } = await countsHeld();
    // Rolled out before that time: Ready written at once, with the counts; nothing left to come back for.
    rolledOut(w, rev);
    const ready = await w.reconcile();
    assert.deepEqual(ready.writes, ["applyStatus MLModel/resnet"]);
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.deepEqual(ready.result, { replacesRequeue: true });
    w.settle();
    assert.equal((await w.reconcile()).result, undefined, "no hold, nothing withdrawn");
  });

  it("a change of counts held back that went away: its requeue is withdrawn", async () => {
    const { w, rev } = await countsHeld();
    podCounted(w, rev, 0);
    const back = await w.reconcile();
    assert.deepEqual(back.writes, [], "the status already says it");
    // Only the look at the rollout's pods is left (they are not watched: serving-pods.ts).
    assert.deepEqual(back.result, { replacesRequeue: true, requeueAfterMs: lookAgainBoundsMs.min });
  });

  it("a held model deleted: the hold forgotten and its requeue withdrawn", async () => {
    const w = world(image("1"));
    w.followHeldCounts = false;
    await w.reconcile();
    w.remove(mlModelKind, "resnet");
    assert.deepEqual((await w.reconcile()).result, { replacesRequeue: true });
    assert.equal(w.heldRollouts.size, 0);
  });

  it("without a memory nothing is held", async () => {
    const w = world(image("1"));
    await reconcileMLModel(w.context(), { ...w.config, now: () => w.now });
    assert.equal(w.client.writes.filter((x) => x.verb === "applyStatus").length, 1);
    assert.equal(w.lastStatus()?.phase, "Deploying");
  });

  it("Downloading, the first status of a downloaded model, is written at once", async () => {
    const w = world(downloaded("1"));
    w.followHeldCounts = false;
    const first = await w.reconcile();
    assert.ok(first.writes.includes("applyStatus MLModel/resnet"));
    assert.equal(w.lastStatus()?.phase, "Downloading");
  });

  it("startsRollout: only Deploying of a new generation, never a failure, a rollback, a canary", () => {
    const deploying: MLModelStatus = { phase: "Deploying", observedGeneration: 2 };
    assert.equal(startsRollout(undefined, deploying), true);
    assert.equal(startsRollout({ phase: "Ready", observedGeneration: 1 }, deploying), true);
    assert.equal(startsRollout({ phase: "Deploying", observedGeneration: 2 }, deploying), false);
    for (const after of [
      { phase: "Ready", observedGeneration: 2 },
      { phase: "Failed", observedGeneration: 2 },
      { phase: "Downloading", observedGeneration: 2 },
      {
        ...deploying,
        revision: { failed: { revision: "r", reason: "CrashLoopBackOff", message: "", at: "t" } },
      },
      { ...deploying, canary: { phase: "Progressing" } },
      {
        ...deploying,
        conditions: [
          {
            type: "RolledBack",
            status: "True",
            reason: "CrashLoopBackOff",
            message: "",
            lastTransitionTime: "t",
          },
        ],
      },
    ] as MLModelStatus[])
      assert.equal(
        startsRollout({ phase: "Ready", observedGeneration: 1 }, after),
        false,
        JSON.stringify(after),
      );
  });
});

describe("reconciles per model with the hold, on the runtime's Controller and queue", () => {
  /**
   * The MLModel reconcile of `w` run by the runtime's Controller on a fake clock. The test
   * wakes the model as the watches would (queue.add): the creates' echoes wake nobody
   * (OwnWrites) and the status write's nobody either (the MLModel watch wakes on generation).
   */
  function controllerOf(w: World) {
    const clock = new FakeClock(w.now.getTime());
    let reconciles = 0;
    const ctrl = new Controller(
      {
        name: "mlmodel",
        forKind: mlModelKind,
        sources: [],
        concurrency: 1,
        reconciler: async () => {
          reconciles++;
          const result = await reconcileMLModel(w.context(), {
            ...w.config,
            now: () => new Date(clock.now()),
            memory: w.memory,
          });
          w.settle(); // the caches see the writes before the next reconcile
          return result;
        },
      },
      {
        informer: () => [],
        store: (kind) => w.store(kind),
        client: new KubeClient({ server: "http://unused.invalid", headers: async () => ({}) }),
        recorder: w.context().recorder,
        log: pino({ level: "silent" }),
        clock,
      },
    );
    const started = ctrl.start();
    const key = "ml/resnet";
    return {
      clock,
      ctrl,
      get reconciles() {
        return reconciles;
      },
      /** Wakes the model and waits until its reconcile (and any it queued at once) ended. */
      async wake(): Promise<void> {
        ctrl.queue.add(key);
        await idle();
      },
      async advance(ms: number): Promise<void> {
        await clock.advance(ms);
        await idle();
      },
      async stop(): Promise<void> {
        await ctrl.stop(1000);
        await started;
      },
    };
    async function idle(): Promise<void> {
      const settle = () => new Promise((resolve) => setImmediate(resolve));
      for (let i = 0; i < 1000 && (ctrl.queue.length > 0 || ctrl.queue.processing > 0); i++) await settle();
      assert.equal(ctrl.queue.processing + ctrl.queue.length, 0, "the reconciles ended");
    }
  }

  it("Ready within the hold: 2 reconciles and 1 status write (the hold's requeue withdrawn, not a third that writes nothing)", async () => {
    const w = world(image("1"));
    const c = controllerOf(w);
    await c.wake(); // created: the children, Deploying held
    assert.equal(c.ctrl.queue.delayed, 1, "asked back for the end of the hold");
    await c.advance(rolloutSettleMs / 4);
    rolledOut(w, revisionOf(image("1")));
    await c.wake(); // the Deployment's status update: Ready
    assert.equal(w.lastStatus()?.phase, "Ready");
    assert.equal(c.ctrl.queue.delayed, 0, "the hold's requeue withdrawn");
    await c.advance(60_000);
    assert.equal(c.reconciles, 2);
    assert.equal(w.client.writes.filter((x) => x.verb === "applyStatus").length, 1);
    await c.stop();
  });

  it("Ready after the hold: 3 reconciles, Deploying then Ready, as before", async () => {
    const w = world(image("1"));
    const c = controllerOf(w);
    await c.wake();
    await c.advance(rolloutSettleMs); // the hold's requeue: Deploying written
    assert.equal(w.lastStatus()?.phase, "Deploying");
    rolledOut(w, revisionOf(image("1")));
    await c.wake();
    assert.equal(w.lastStatus()?.phase, "Ready");
    await c.advance(60_000);
    assert.equal(c.reconciles, 3);
    assert.equal(w.client.writes.filter((x) => x.verb === "applyStatus").length, 2);
    await c.stop();
  });
});

describe("OwnWrites: the echo of a create of ours wakes nobody", () => {
  const D = builtinKinds.Deployment;
  const deployment = (name: string): KubeObject => ({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name, namespace: "ml" },
  });
  /** A client whose answers say created (or not) with the next resourceVersion. */
  function fixture(created = () => true) {
    const inner = new RecordingClient();
    let rv = 100;
    inner.resourceVersions = () => String(++rv);
    inner.exists = () => !created();
    const own = new OwnWrites();
    const client = own.client(inner);
    const store = new MemoryStore();
    const wakes = own.predicate(D);
    /** The watch delivers `obj` at `resourceVersion` (live, not a relist); whether it wakes. */
    const event = (obj: KubeObject, resourceVersion: string, initial = false): boolean => {
      const change = store.apply({ ...obj, metadata: { ...obj.metadata, resourceVersion } }, initial);
      return change ? wakes(change) : false;
    };
    return { inner, own, client, event };
  }
  const opts = { fieldManager: "mlmodel-operator", force: true };

  it("the add carrying the created version is dropped; every later change wakes", async () => {
    const { own, client, event } = fixture();
    const answer = await client.applyForVersion(D, deployment("a"), opts);
    assert.deepEqual(answer, { created: true, uid: "uid-Deployment-a", resourceVersion: "101" });
    assert.equal(event(deployment("a"), "101"), false, "the echo");
    assert.equal(own.dropped, 1);
    assert.equal(event(deployment("a"), "150"), true, "kube-controller-manager's status update");
    assert.equal(own.size, 0, "forgotten once matched");
  });

  it("another version of the same object wakes (another writer first, or the echo missed)", async () => {
    const { client, event } = fixture();
    await client.applyForVersion(D, deployment("a"), opts);
    assert.equal(event(deployment("a"), "99"), true, "an older version: not ours");
    assert.equal(event(deployment("a"), "102"), true, "a newer one: not ours");
  });

  it("an echo that arrives before the answer is read wakes: it costs a reconcile, no wake-up is lost", async () => {
    const { own, event } = fixture();
    assert.equal(event(deployment("a"), "101"), true);
    own.remember(D, deployment("a"), "101"); // the answer, read after its echo
    assert.equal(event(deployment("a"), "102"), true, "the next change is not taken for it");
  });

  it("an apply that changed (or found) an existing object is not remembered: its version may be another writer's", async () => {
    const { own, client, event } = fixture(() => false);
    const answer = await client.applyForVersion(D, deployment("a"), opts);
    assert.equal(answer.created, false);
    assert.equal(own.size, 0);
    assert.equal(event(deployment("a"), answer.resourceVersion!), true);
  });

  it("an echo of a relist, a delete, and other kinds or names wake", async () => {
    const { own, client, event } = fixture();
    await client.applyForVersion(D, deployment("a"), opts);
    assert.equal(event(deployment("a"), "101", true), true, "relisted (initial): wakes");
    await client.applyForVersion(D, deployment("b"), opts);
    const service = own.predicate(builtinKinds.Service);
    const echoOfB = {
      type: "add",
      object: { ...deployment("b"), metadata: { name: "b", namespace: "ml", resourceVersion: "102" } },
      initial: false,
    } as StoreChange;
    assert.equal(service(echoOfB), true, "another kind with the same name and version");
    const deleted = { ...echoOfB, type: "delete" } as StoreChange;
    assert.equal(own.predicate(D)(deleted), true, "a delete always wakes");
    assert.equal(own.predicate(D)(echoOfB), false);
  });

  it("passes every verb through, applyDiscardingAnswer and applyStatus included, remembering none", async () => {
    const { inner, own, client } = fixture();
    await client.applyDiscardingAnswer(D, deployment("a"), opts);
    await client.applyStatus(mlModelKind, { ...deployment("m"), kind: "MLModel" }, opts);
    await client.delete(D, { namespace: "ml", name: "a" });
    await client.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "s", namespace: "ml" },
    });
    assert.deepEqual(inner.writes.map(line), [
      "apply Deployment/a",
      "applyStatus MLModel/m",
      "delete Deployment/a",
      "create Secret/s",
    ]);
    assert.equal(own.size, 0);
  });

  it("a version whose echo never came is forgotten after ttlMs", async () => {
    let now = 0;
    const own = new OwnWrites({ ttlMs: 1000, now: () => now });
    own.remember(D, deployment("a"), "1");
    now = 500;
    own.remember(D, deployment("b"), "2");
    now = 1200;
    own.remember(D, deployment("c"), "3");
    assert.equal(own.size, 2, "a's forgotten");
  });

  it("a reconcile of a new model: its three creates' echoes wake nobody; the rollout's next change does", async () => {
    const w = world(image("1"));
    const own = new OwnWrites();
    w.own = own;
    w.followHeldCounts = false;
    await w.reconcile();
    // The watches bring the created children, as stored (settle() gives them the versions answered).
    assert.deepEqual(w.settleEchoes(), []);
    assert.equal(own.dropped, 3);
    const old = w.store(builtinKinds.Deployment).get({ namespace: "ml", name: "resnet" })!;
    rolledOut(w, revisionOf(image("1")));
    const object = w.store(builtinKinds.Deployment).get({ namespace: "ml", name: "resnet" })!;
    assert.equal(
      own.predicate(builtinKinds.Deployment)({ type: "update", object, old, initial: false }),
      true,
    );
  });
});

describe("the download path's creates: their echoes wake nobody either", () => {
  const jobName = childNames.download("resnet", contentHash(downloaded("1")));
  const J = builtinKinds.Job;

  it("a downloaded model's first reconcile: the claim's and the Job's echoes are dropped; the Job's first status update that is read wakes", async () => {
    const w = world(downloaded("1"));
    const own = new OwnWrites();
    w.own = own;
    const first = await w.reconcile();
    assert.deepEqual(first.writes, [
      `apply ControllerRevision/resnet-${revisionOf(downloaded("1"))}`,
      "apply PersistentVolumeClaim/resnet-model",
      ...["ServiceAccount", "Role", "RoleBinding"].map((k) => `apply ${k}/resnet-downloader`),
      `apply Job/${jobName}`,
      "applyStatus MLModel/resnet",
    ]);
    assert.deepEqual(w.settleEchoes(), [], "the identity's kinds are not watched; the rest are our creates");
    assert.equal(own.dropped, 3, "the revision, the claim, the Job");
    // The status said of the Job as applied (no status yet, as a create answers) what the
    // cached Job says: the next reconcile writes nothing.
    assert.deepEqual((await w.reconcile()).writes, []);
    const old = w.store(J).get({ namespace: "ml", name: jobName })!;
    w.update<KubeObject & V1Job>(J, jobName, (j) => {
      j.status = { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] };
    });
    const object = w.store(J).get({ namespace: "ml", name: jobName })!;
    assert.equal(own.predicate(J)({ type: "update", object, old, initial: false }), true);
    assert.equal(jobWakes({ type: "update", object, old, initial: false }), true);
  });

  it("an apply that found the Job (the cache behind) is not remembered: its watch event wakes", async () => {
    const w = world(downloaded("1"));
    w.own = new OwnWrites();
    w.client.exists = (kind, name) => kind.kind === "Job" || w.get(kind, name) !== undefined;
    await w.reconcile();
    assert.deepEqual(w.settleEchoes(), [`apply Job/${jobName}`]);
    assert.equal(w.lastStatus()?.phase, "Downloading", "reported as just started until then");
  });
});

describe("answerMeta: uid and resourceVersion of an answer without parsing it", () => {
  it("reads them from the leading members of metadata, as the API server writes them", () => {
    const answer = {
      kind: "Deployment",
      apiVersion: "apps/v1",
      metadata: {
        name: "a",
        namespace: "ml",
        uid: "u-1",
        resourceVersion: "4242",
        generation: 1,
        labels: { resourceVersion: "not this" },
      },
      spec: { resourceVersion: "nor this" },
    };
    assert.deepEqual(answerMeta(JSON.stringify(answer)), { uid: "u-1", resourceVersion: "4242" });
    assert.deepEqual(answerMeta(JSON.stringify(answer, null, 2)), { uid: "u-1", resourceVersion: "4242" });
  });

  it("is never fooled by a value that contains the member's name, and falls back to JSON.parse", () => {
    const tricky = `{"kind":"ConfigMap","metadata":{"name":"a","annotations":{"x":"\\"resourceVersion\\":\\"1\\""},"resourceVersion":"7"}}`;
    assert.deepEqual(answerMeta(tricky), { resourceVersion: "7" });
    const late = { metadata: { generation: 3, name: "a", uid: "u", resourceVersion: "9" } };
    assert.deepEqual(answerMeta(JSON.stringify(late)), { uid: "u", resourceVersion: "9" });
    const escaped = `{"metadata":{"name":"a","uid":"u\\u0031","resourceVersion":"8"}}`;
    assert.deepEqual(answerMeta(escaped), { uid: "u1", resourceVersion: "8" });
    assert.deepEqual(answerMeta(""), {});
    assert.deepEqual(answerMeta(JSON.stringify({ kind: "Status" })), {});
  });
});
