/**
 * Each stage of the MLModel reconcile on its own, as a table: inputs -> outputs. The scenario
 * walks (reconcile.test.ts, round-trips.test.ts, reconcile-canary.test.ts) run the stages
 * together over time; here each row names one situation and what the stage makes of it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec, MLModelStatus } from "../../../src/api/mlmodel.ts";
import { assess } from "../../../src/operator/mlmodel/assess.ts";
import { cleanupSteps } from "../../../src/operator/mlmodel/cleanup.ts";
import { decide } from "../../../src/operator/mlmodel/decide.ts";
import { lookAgainBoundsMs, lookWhileClaimPendingMs } from "../../../src/operator/mlmodel/download-pods.ts";
import { observe } from "../../../src/operator/mlmodel/observe.ts";
import { countsOnly, statusEvent } from "../../../src/operator/mlmodel/report.ts";
import { withServingPods } from "../../../src/operator/mlmodel/serving-pods.ts";
import { syncChildren } from "../../../src/operator/mlmodel/sync.ts";
import { failureRecordedWakeMs, type Waits, wakeUp } from "../../../src/operator/mlmodel/wake-up.ts";
import { childNames } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { pod } from "./fixtures.ts";
import { line, modelWorld, revisionOf, type World } from "./reconcile-harness.ts";

const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });
const downloaded = (version: string): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version },
});
const jobOf = (spec: MLModelSpec) => childNames.download("resnet", contentHash(spec));

/** Reconciles whole and lets the caches see the writes: how a row reaches its situation. */
async function step(w: World): Promise<void> {
  await w.reconcile();
  w.settle();
}

function setJob(w: World, spec: MLModelSpec, status: V1Job["status"]): void {
  w.update<KubeObject & V1Job>(builtinKinds.Job, jobOf(spec), (j) => {
    j.status = status;
  });
}

function setDeployment(w: World, status: V1Deployment["status"]): void {
  w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
    d.metadata.generation = 1;
    d.status = { observedGeneration: 1, ...status };
  });
}

/** The Deployment reports its rollout done and one pod of `spec`'s revision is ready. */
function rolledOut(w: World, spec: MLModelSpec): void {
  setDeployment(w, { replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1 });
  w.put(
    builtinKinds.Pod,
    pod(`resnet-${revisionOf(spec)}-0`, revisionOf(spec), { ready: true }) as KubeObject,
  );
}

function respec(w: World, spec: MLModelSpec): void {
  w.update<MLModel>(mlModelKind, "resnet", (m) => {
    m.spec = spec;
    m.metadata.generation = (m.metadata.generation ?? 1) + 1;
  });
}

/** A model serving `spec`, Ready. */
async function ready(spec: MLModelSpec): Promise<World> {
  const w = modelWorld(spec);
  await step(w);
  if (spec.model.uri) {
    setJob(w, spec, { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] });
    await step(w);
  }
  rolledOut(w, spec);
  await step(w);
  assert.equal(w.lastStatus()?.phase, "Ready");
  return w;
}

/** The stages one reconcile runs, one by one, with what each returned; nothing is reported. */
async function stages(w: World) {
  const ctx = w.context();
  const o = await observe(ctx, w.memory, w.now);
  assert.ok(o, "the model exists");
  const d = decide(o);
  const before = w.client.writes.length;
  const s = await syncChildren(ctx, o, d, { ...w.config, memory: w.memory });
  const syncWrites = w.client.writes.slice(before).map(line);
  const seen = await withServingPods(ctx, o, s.serving.deployments);
  const a = assess(seen, d, s);
  const steps = cleanupSteps(seen, d, s, a.status, w.config).map((c) =>
    c.verb === "prune"
      ? `prune Job/${c.job.metadata?.name}`
      : `delete ${c.kind.kind}/${c.object.metadata?.name}`,
  );
  const now = Date.parse(o.now);
  const wakes = (waits: Waits) => waits.wakes.map((x) => `${x.reason} in ${x.at - now} ms`);
  return { o, d, s, syncWrites, a, steps, wakes };
}

describe("syncChildren: the children a situation needs written", () => {
  const rows: { name: string; given: () => Promise<World>; writes: string[]; revision: boolean }[] = [
    {
      name: "a new model on an image: its revision and serving children",
      given: async () => modelWorld(image("1")),
      writes: [
        `apply ControllerRevision/resnet-${revisionOf(image("1"))}`,
        "apply Deployment/resnet",
        "apply Service/resnet",
      ],
      revision: true,
    },
    {
      name: "a new downloaded model: storage and the download first, no serving children yet",
      given: async () => modelWorld(downloaded("1")),
      writes: [
        `apply ControllerRevision/resnet-${revisionOf(downloaded("1"))}`,
        `apply PersistentVolumeClaim/${childNames.storage("resnet")}`,
        "apply ServiceAccount/resnet-downloader",
        "apply Role/resnet-downloader",
        "apply RoleBinding/resnet-downloader",
        `apply Job/${jobOf(downloaded("1"))}`,
      ],
      revision: true,
    },
    {
      name: "a missing credentials Secret: the revision is recorded, nothing else",
      given: async () => modelWorld({ ...image("1"), model: { credentialsSecretRef: { name: "creds" } } }),
      writes: [
        `apply ControllerRevision/resnet-${revisionOf({ ...image("1"), model: { credentialsSecretRef: { name: "creds" } } })}`,
      ],
      revision: false,
    },
    {
      name: "a Ready model with nothing new: no write",
      given: () => ready(image("1")),
      writes: [],
      revision: true,
    },
    {
      name: "a model being deleted: no write",
      given: async () => {
        const w = await ready(image("1"));
        w.update<MLModel>(mlModelKind, "resnet", (m) => {
          m.metadata.deletionTimestamp = new Date(w.now).toISOString() as never;
        });
        return w;
      },
      writes: [],
      revision: false,
    },
  ];
  for (const row of rows)
    it(row.name, async () => {
      const { syncWrites, s } = await stages(await row.given());
      assert.deepEqual(syncWrites, row.writes);
      assert.equal(s.revision !== undefined, row.revision, "whether the serving children were synced");
    });
});

describe("assess: the status, what it waits for, and the waits that are over", () => {
  const rows: {
    name: string;
    given: () => Promise<World>;
    phase: string;
    wakes: string[];
    over: string[];
  }[] = [
    {
      name: "a new image model: Deploying, and its Deployment's first status wakes it",
      given: async () => modelWorld(image("1")),
      phase: "Deploying",
      wakes: [],
      over: [],
    },
    {
      name: "a rollout with no pod ready: its pods are looked at again soon",
      given: async () => {
        const w = modelWorld(image("1"));
        await step(w);
        setDeployment(w, { replicas: 1, updatedReplicas: 1, readyReplicas: 0 });
        return w;
      },
      phase: "Deploying",
      wakes: [`serving pods in ${lookAgainBoundsMs.min} ms`],
      over: [],
    },
    {
      name: "a rollout that settled while not Ready: Ready, and the pods' look is over",
      given: async () => {
        const w = modelWorld(image("1"));
        await step(w);
        setDeployment(w, { replicas: 1, updatedReplicas: 1, readyReplicas: 0 });
        await step(w);
        rolledOut(w, image("1"));
        return w;
      },
      phase: "Ready",
      wakes: [],
      over: ["serving pods"],
    },
    {
      name: "a new download Job, its claim not bound: looked at once the claim had time",
      given: async () => modelWorld(downloaded("1")),
      phase: "Downloading",
      wakes: [`download pods in ${lookWhileClaimPendingMs} ms`],
      over: [],
    },
    {
      name: "a download Job whose pod runs: no look, and any look asked before is over",
      given: async () => {
        const w = modelWorld(downloaded("1"));
        await step(w);
        setJob(w, downloaded("1"), { active: 1, ready: 1 });
        return w;
      },
      phase: "Downloading",
      wakes: [],
      over: ["download pods"],
    },
    {
      name: "a Ready model: nothing to wait for",
      given: () => ready(image("1")),
      phase: "Ready",
      wakes: [],
      over: [],
    },
    {
      name: "an update whose image cannot be pulled: the failure is recorded, the rollback follows first",
      given: async () => {
        const w = await ready(image("1"));
        respec(w, image("2"));
        await step(w);
        w.put(
          builtinKinds.Pod,
          pod("resnet-2-0", revisionOf(image("2")), {
            waiting: "ImagePullBackOff",
          }) as KubeObject,
        );
        setDeployment(w, {
          replicas: 2,
          updatedReplicas: 1,
          readyReplicas: 1,
          conditions: [{ type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" }],
        } as V1Deployment["status"]);
        return w;
      },
      phase: "Failed",
      wakes: [
        `failure recorded in ${failureRecordedWakeMs} ms`,
        `serving pods in ${lookAgainBoundsMs.min} ms`,
      ],
      over: [],
    },
  ];
  for (const row of rows)
    it(row.name, async () => {
      const { a, wakes } = await stages(await row.given());
      assert.equal(a.status.phase, row.phase);
      assert.deepEqual(wakes(a.waits), row.wakes);
      assert.deepEqual(a.waits.over, row.over);
    });
});

describe("cleanupSteps: what goes once it is no longer needed", () => {
  const limited = (tag: string): MLModelSpec => ({ ...image(tag), rollout: { revisionHistoryLimit: 1 } });
  const rows: { name: string; given: () => Promise<World>; steps: string[] }[] = [
    {
      name: "a model not Ready yet: nothing goes",
      given: async () => modelWorld(downloaded("1")),
      steps: [],
    },
    {
      name: "a Ready downloaded model: its download Job stays (in use), nothing goes",
      given: () => ready(downloaded("1")),
      steps: [],
    },
    {
      name: "a model moved from a download to an image, Ready: the old Job and the claim go",
      given: async () => {
        const w = await ready(downloaded("1"));
        respec(w, image("2"));
        await step(w);
        rolledOut(w, image("2"));
        return w;
      },
      steps: [
        `delete Job/${jobOf(downloaded("1"))}`,
        `delete PersistentVolumeClaim/${childNames.storage("resnet")}`,
      ],
    },
    {
      name: "more revisions than the history keeps: one neither served, last ready nor the spec's goes",
      given: async () => {
        const w = await ready(limited("1"));
        respec(w, limited("2"));
        await step(w);
        respec(w, limited("3"));
        return w;
      },
      steps: [`delete ControllerRevision/resnet-${revisionOf(limited("2"))}`],
    },
  ];
  for (const row of rows)
    it(row.name, async () => {
      const { steps } = await stages(await row.given());
      assert.deepEqual(steps, row.steps);
    });
});

describe("countsOnly: whether a status change is counts and their messages alone", () => {
  const deploying: MLModelStatus = {
    phase: "Deploying",
    observedGeneration: 1,
    replicas: 2,
    readyReplicas: 0,
    message: "0 of 2 ready",
  };
  const rows: { name: string; before: MLModelStatus | undefined; after: MLModelStatus; counts: boolean }[] = [
    { name: "no status before", before: undefined, after: deploying, counts: false },
    { name: "the same status", before: deploying, after: deploying, counts: true },
    {
      name: "a pod turned ready, its message with it",
      before: deploying,
      after: { ...deploying, readyReplicas: 1, message: "1 of 2 ready" },
      counts: true,
    },
    {
      name: "a condition's time moved",
      before: { ...deploying, conditions: [] },
      after: { ...deploying, conditions: [{ type: "Ready", status: "False" } as never] },
      counts: true,
    },
    { name: "a new phase", before: deploying, after: { ...deploying, phase: "Ready" }, counts: false },
    {
      name: "a new reason",
      before: deploying,
      after: { ...deploying, reason: "ImagePullBackOff" },
      counts: false,
    },
    {
      name: "a new generation",
      before: deploying,
      after: { ...deploying, observedGeneration: 2 },
      counts: false,
    },
    {
      name: "the download Job's state",
      before: { ...deploying, download: { job: "j1", jobState: "Pending" } as never },
      after: { ...deploying, download: { job: "j1", jobState: "Running" } as never },
      counts: true,
    },
    {
      name: "another download Job",
      before: { ...deploying, download: { job: "j1" } as never },
      after: { ...deploying, download: { job: "j2" } as never },
      counts: false,
    },
  ];
  for (const row of rows)
    it(row.name, () => {
      assert.equal(countsOnly(row.before, row.after), row.counts);
    });
});

describe("statusEvent: the Event a status change is worth", () => {
  const rolledBack = (message: string) => ({ type: "RolledBack", status: "True", message }) as never;
  const rows: {
    name: string;
    before: MLModelStatus | undefined;
    after: MLModelStatus;
    event: { type: string; reason: string; message: string } | undefined;
  }[] = [
    { name: "a first Ready", before: undefined, after: { phase: "Ready" }, event: undefined },
    {
      name: "a problem",
      before: { phase: "Deploying" },
      after: { phase: "Failed", reason: "ImagePullBackOff", message: "not found" },
      event: { type: "Warning", reason: "ImagePullBackOff", message: "Failed: not found" },
    },
    {
      name: "the same problem again",
      before: { phase: "Failed", reason: "ImagePullBackOff", message: "not found" },
      after: { phase: "Failed", reason: "ImagePullBackOff", message: "still not found" },
      event: undefined,
    },
    {
      name: "the end of a problem",
      before: { phase: "Failed", reason: "ImagePullBackOff" },
      after: { phase: "Ready", message: "serving" },
      event: { type: "Normal", reason: "Ready", message: "Ready: serving" },
    },
    {
      name: "rolled back after a recorded failure",
      before: { phase: "Failed", reason: "ImagePullBackOff" },
      after: {
        phase: "Deploying",
        conditions: [rolledBack("serving revision 1")],
        revision: { failed: { revision: "r2", reason: "ImagePullBackOff", message: "", at: "" } } as never,
      },
      event: { type: "Warning", reason: "RolledBack", message: "serving revision 1" },
    },
    {
      name: "still rolled back",
      before: { phase: "Ready", conditions: [rolledBack("serving revision 1")] },
      after: { phase: "Ready", conditions: [rolledBack("serving revision 1")] },
      event: undefined,
    },
  ];
  for (const row of rows)
    it(row.name, () => {
      assert.deepEqual(statusEvent(row.before, row.after), row.event);
    });
});

describe("wakeUp: the stages' waits -> the reconcile's result", () => {
  const now = 1_000_000;
  const rows: { name: string; stages: Waits[]; result: ReturnType<typeof wakeUp> }[] = [
    { name: "nothing waited for", stages: [{ wakes: [], over: [] }], result: undefined },
    {
      name: "one wake",
      stages: [{ wakes: [{ reason: "serving pods", at: now + 5000 }], over: [] }],
      result: { requeueAfterMs: 5000 },
    },
    {
      name: "the soonest of several stages' wakes",
      stages: [
        { wakes: [{ reason: "download Job replaced", at: now + 1000 }], over: [] },
        {
          wakes: [
            { reason: "download pods", at: now + 30_000 },
            { reason: "failure recorded", at: now + 100 },
          ],
          over: [],
        },
        { wakes: [{ reason: "counts held", at: now + 2000 }], over: [] },
      ],
      result: { requeueAfterMs: 100 },
    },
    {
      name: "a wait over, nothing left: the pending requeue is withdrawn",
      stages: [
        { wakes: [], over: [] },
        { wakes: [], over: ["rollout held"] },
      ],
      result: { replacesRequeue: true },
    },
    {
      name: "a wait over, another left: the pending requeue is replaced by the one left",
      stages: [
        { wakes: [], over: ["download pods"] },
        { wakes: [{ reason: "counts held", at: now + 15_000 }], over: [] },
      ],
      result: { requeueAfterMs: 15_000, replacesRequeue: true },
    },
  ];
  for (const row of rows)
    it(row.name, () => {
      assert.deepEqual(wakeUp(row.stages, now), row.result);
    });
});
