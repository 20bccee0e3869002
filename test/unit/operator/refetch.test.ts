/**
 * A NodeCache version whose download Job succeeded but that no node holds any more is
 * downloaded again: the decision as a table (refetch.ts, cacheHolders), then the reconcile
 * that acts on it (the Job deleted and created again, one Event naming the key and why), and
 * what it reads to decide (nothing more while the key is listed and every pod serves).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  cacheKey,
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../../src/nodecache/contract.ts";
import { mayBeGone } from "../../../src/operator/mlmodel/observe.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { contentHash } from "../../../src/operator/plan.ts";
import {
  agentRuns,
  type CacheHolders,
  type CacheHoldersInput,
  cacheHolders,
  jobCacheKey,
  jobCompletedAt,
  jobNodeOf,
} from "../../../src/operator/refetch.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { modelWorld, type World } from "./reconcile-harness.ts";

const key = "0123456789abcdef0123";
const completed = "2026-01-01T00:10:00.000Z";
const before = "2026-01-01T00:09:59.000Z";
const after = "2026-01-01T00:10:05.000Z";

function state(node: string, updatedAt: string, keys: string[] = []): NodeCacheState {
  return {
    node,
    budgetBytes: 1e9,
    usedBytes: 10 * keys.length,
    bytesFromPeers: 0,
    bytesFromOrigin: 0,
    evictions: 0,
    updatedAt,
    entries: keys.map((k) => ({
      key: k,
      uri: "s3://bucket/m/",
      size: 10,
      files: 1,
      source: "origin" as const,
      completedAt: before,
      lastUsedAt: before,
      inUse: false,
    })),
  };
}

const input = (over: Partial<CacheHoldersInput>): CacheHoldersInput => ({
  key,
  jobCompletedAt: completed,
  jobNode: "node-a",
  states: [],
  agentNodes: new Set(["node-a", "node-b"]),
  ...over,
});

describe("cacheHolders: whether some node still holds a succeeded download's version", () => {
  const rows: [string, Partial<CacheHoldersInput>, CacheHolders["verdict"], RegExp?][] = [
    ["the Job has not completed", { jobCompletedAt: undefined }, "Unknown", /not completed/],
    ["the running agents were not read", { agentNodes: undefined }, "Unknown", /not read/],
    [
      "a running agent lists it, whenever it wrote",
      { states: [state("node-b", before, [key]), state("node-a", after)] },
      "Held",
    ],
    [
      "the Job's node has not written since the Job completed (its first write may be pending)",
      { states: [state("node-a", before), state("node-b", after)] },
      "Unknown",
      /node-a has not reported since/,
    ],
    ["the Job's node has never written", { states: [state("node-b", after)] }, "Unknown", /node-a/],
    [
      "the Job's node wrote after it completed and lists it no more; an idle agent's old state does not matter",
      { states: [state("node-a", after), state("node-b", before)] },
      "Gone",
    ],
    [
      "the only node that lists it runs no agent any more (gone), the Job's node among them",
      { states: [state("node-a", before, [key]), state("node-b", after)], agentNodes: new Set(["node-b"]) },
      "Gone",
      /and node-a, where its download Job ran, runs no agent any more/,
    ],
    [
      "the Job's node unknown (its pod is gone): every running agent has to have written since",
      { jobNode: undefined, states: [state("node-a", after), state("node-b", before)] },
      "Unknown",
      /node-b has not reported/,
    ],
    [
      "the Job's node unknown, and every running agent wrote since without it",
      { jobNode: undefined, states: [state("node-a", after), state("node-b", after)] },
      "Gone",
    ],
    [
      "an agent that runs but has never written, the Job's node unknown",
      { jobNode: undefined, states: [state("node-a", after)] },
      "Unknown",
      /node-b/,
    ],
    [
      "no agent runs at all: a new download could store nothing",
      { states: [state("node-a", after)], agentNodes: new Set() },
      "Unknown",
      /no node cache agent runs/,
    ],
    [
      "a state written exactly when the Job completed counts as written since",
      { states: [state("node-a", completed), state("node-b", completed)] },
      "Gone",
    ],
    [
      "another key listed is not this one",
      { states: [state("node-a", after, ["fedcba9876543210fedc"])] },
      "Gone",
    ],
  ];
  it("says in its message what made the absence certain", () => {
    const ran = cacheHolders(input({ states: [state("node-a", after)] }));
    assert.equal(
      ran.verdict === "Gone" && ran.message,
      `no node holds cache entry ${key}: none of the 2 running node cache agent(s) lists it, and the agent on node-a, where its download Job ran, has reported without it since the Job completed; downloading it again`,
    );
    const every = cacheHolders(
      input({ jobNode: undefined, states: [state("node-a", after), state("node-b", after)] }),
    );
    assert.match(
      every.verdict === "Gone" ? every.message : "",
      /each in a report written since its download Job completed/,
    );
    const lost = cacheHolders(
      input({ jobNode: "node-c", states: [state("node-c", before, [key]), state("node-d", before, [key])] }),
    );
    assert.match(
      lost.verdict === "Gone" ? lost.message : "",
      /and node-c, where its download Job ran, runs no agent any more; it was on node-d, where no agent runs any more/,
    );
  });
  for (const [situation, over, verdict, words] of rows) {
    it(`${situation}: ${verdict}`, () => {
      const got = cacheHolders(input(over));
      assert.equal(got.verdict, verdict, JSON.stringify(got));
      if (words)
        assert.match(got.verdict === "Held" ? got.nodes.join() : "why" in got ? got.why : got.message, words);
      if (got.verdict === "Gone") assert.match(got.message, new RegExp(`no node holds cache entry ${key}`));
      if (got.verdict === "Held") assert.deepEqual(got.nodes, ["node-b"]);
    });
  }
});

describe("what the decision reads of Jobs and pods", () => {
  it("a Job's completion time, key, and the node its succeeded pod ran on", () => {
    const job = {
      metadata: { name: "m-download-1", uid: "uid-job" },
      spec: {
        template: {
          spec: { containers: [{ name: "d", args: ["--cache", "http://x", "--cache-key", key] }] },
        },
      },
      status: { completionTime: completed, conditions: [{ type: "Complete", status: "True" }] },
    } as unknown as V1Job;
    assert.equal(jobCompletedAt(job), completed);
    assert.equal(jobCompletedAt({ ...job, status: {} }), undefined, "an active Job has not completed");
    assert.equal(jobCacheKey(job), key);
    const pod = (uid: string, phase: string, nodeName: string) => ({
      metadata: { ownerReferences: [{ uid }] },
      spec: { nodeName },
      status: { phase },
    });
    assert.equal(
      jobNodeOf(job, [
        pod("uid-job", "Failed", "node-x"),
        pod("uid-other", "Succeeded", "node-y"),
        pod("uid-job", "Succeeded", "node-a"),
      ] as never),
      "node-a",
    );
    assert.equal(jobNodeOf(job, []), undefined);
  });
  it("an agent pod runs while bound, not ended and not being deleted", () => {
    const agent = (over: object) => ({
      metadata: {},
      spec: { nodeName: "node-a" },
      status: { phase: "Running" },
      ...over,
    });
    assert.equal(agentRuns(agent({}) as never), true);
    assert.equal(
      agentRuns(agent({ status: { phase: "Pending" } }) as never),
      true,
      "starting: it may yet report",
    );
    assert.equal(agentRuns(agent({ metadata: { deletionTimestamp: after } }) as never), false);
    assert.equal(agentRuns(agent({ status: { phase: "Failed" } }) as never), false);
    assert.equal(agentRuns(agent({ spec: {} }) as never), false);
  });
  it("the agents' and Jobs' pods are read only while the key is listed by none or some pods do not serve", () => {
    const serving = { spec: { replicas: 2 }, status: { availableReplicas: 2 } } as V1Deployment;
    const waiting = { spec: { replicas: 2 }, status: { availableReplicas: 1 } } as V1Deployment;
    const listed = [state("node-a", after, [key])];
    assert.equal(mayBeGone(key, listed, [serving]), false);
    assert.equal(mayBeGone(key, listed, [serving, waiting]), true);
    assert.equal(mayBeGone(key, [state("node-a", after)], [serving]), true);
    assert.equal(
      mayBeGone(key, listed, [{ spec: { replicas: 0 } } as V1Deployment]),
      false,
      "scaled to zero",
    );
  });
});

const url = "http://10.96.0.20:8375";
const uri = "s3://bucket/resnet/";
const spec: MLModelSpec = { model: { uri, format: "tensorflow" }, replicas: 2 };
const modelKey = cacheKey(uri);
const jobName = childNames.download("resnet", contentHash(spec));
const system = "mlmodel-system";

function stateConfigMap(s: NodeCacheState): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: nodeCacheStateConfigMap(s.node),
      namespace: system,
      labels: { ...nodeCacheComponentLabels },
    },
    data: { [nodeCacheStateKey]: JSON.stringify(s) },
  } as KubeObject;
}

function agentPod(node: string): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: `agent-${node}`, namespace: system, labels: { ...nodeCacheComponentLabels } },
    spec: { nodeName: node, containers: [] },
    status: { phase: "Running" },
  } as KubeObject;
}

/** The Job `name` completed at `completed`, its pod having succeeded on `node`. */
function succeeded(w: World, name: string, node: string): void {
  w.update<KubeObject & V1Job>(builtinKinds.Job, name, (j) => {
    j.status = {
      succeeded: 1,
      completionTime: completed as never,
      conditions: [{ type: "Complete", status: "True", lastTransitionTime: completed as never }],
    };
  });
  const uid = w.get<KubeObject & V1Job>(builtinKinds.Job, name)!.metadata.uid!;
  w.put(builtinKinds.Pod, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: `${name}-x`,
      labels: { [labels.model]: "resnet", [labels.component]: "download" },
      ownerReferences: [{ apiVersion: "batch/v1", kind: "Job", name, uid, controller: true }],
    },
    spec: { nodeName: node, containers: [] },
    status: { phase: "Succeeded" },
  } as KubeObject);
}

/** A NodeCache model whose download Job completed (at `completed`) on node-a, and agents running on `agents`. */
async function downloadedOnNodeA(agents = ["node-a", "node-b"]): Promise<World> {
  const w = modelWorld(spec);
  Object.assign(w.config, { nodeCacheUrl: url, nodeCacheNamespace: system });
  await w.reconcile();
  w.settle();
  succeeded(w, jobName, "node-a");
  for (const node of agents) w.put(builtinKinds.Pod, agentPod(node));
  return w;
}

const jobDeletes = (w: World) => w.client.writes.filter((x) => x.verb === "delete" && x.kind.kind === "Job");

describe("reconcile: a succeeded download whose version no node holds runs again", () => {
  it("deletes the Job once no running agent lists the key since it completed, says why in an Event, and creates it again", async () => {
    const w = await downloadedOnNodeA();
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", after)));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-b", before)));
    await w.reconcile();
    assert.deepEqual(
      jobDeletes(w).map((x) => x.name),
      [jobName],
    );
    const told = w.events.filter((e) => e.reason === "CacheEntryGone");
    assert.equal(told.length, 1);
    assert.equal(told[0]?.type, "Warning");
    assert.match(told[0]!.message, new RegExp(`no node holds cache entry ${modelKey}.*downloading it again`));
    w.settle();
    const writes = w.client.writes.length;
    await w.reconcile();
    const recreated = w.client.writes
      .slice(writes)
      .filter((x) => x.verb === "apply" && x.kind.kind === "Job");
    assert.deepEqual(
      recreated.map((x) => x.name),
      [jobName],
      "the same name: the Job is named by its content",
    );
    assert.notEqual(w.lastStatus()?.phase, "Ready", "status does not claim the new download done");
    assert.equal(w.events.filter((e) => e.reason === "CacheEntryGone").length, 1, "told once");
  });

  it("keeps the Job while a running agent lists the key", async () => {
    const w = await downloadedOnNodeA();
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", after)));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-b", after, [modelKey])));
    await w.reconcile();
    assert.equal(jobDeletes(w).length, 0);
    assert.equal(w.events.filter((e) => e.reason === "CacheEntryGone").length, 0);
  });

  it("keeps the Job while the agent of the node it ran on has not written since it completed", async () => {
    const w = await downloadedOnNodeA();
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", before)));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-b", after)));
    await w.reconcile();
    assert.equal(jobDeletes(w).length, 0);
  });

  it("runs it again when the only node that lists the key has no agent any more", async () => {
    const w = await downloadedOnNodeA(["node-b"]);
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", after, [modelKey])));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-b", after)));
    await w.reconcile();
    assert.deepEqual(
      jobDeletes(w).map((x) => x.name),
      [jobName],
    );
    assert.match(
      w.events.find((e) => e.reason === "CacheEntryGone")?.message ?? "",
      /and node-a, where its download Job ran, runs no agent any more/,
    );
  });

  it("reads no pod of the agents while the key is listed and every replica serves", async () => {
    const w = await downloadedOnNodeA();
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", after, [modelKey])));
    await w.reconcile();
    w.settle();
    w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
      d.status = { replicas: 2, availableReplicas: 2, readyReplicas: 2, updatedReplicas: 2 };
    });
    const lists = w.client.lists.length;
    await w.reconcile();
    const agentLists = w.client.lists
      .slice(lists)
      .filter((l) => l.includes(nodeCacheComponentLabels["app.kubernetes.io/name"]));
    assert.deepEqual(agentLists, []);
    assert.equal(jobDeletes(w).length, 0);
  });
});

describe("reconcile: a canary's version is decided by its own Job", () => {
  const version = (n: string, sha: string): MLModelSpec => ({
    model: { uri, format: "tensorflow", version: n, sha256: sha.repeat(64) },
    replicas: 2,
    rollout: { canary: { trafficPercent: 20 } },
  });
  const v1 = version("1", "a");
  const v2 = version("2", "b");
  const job1 = childNames.download("resnet", contentHash(v1));
  const job2 = childNames.download("resnet", contentHash(v2));
  const [key1, key2] = [cacheKey(uri, "a".repeat(64)), cacheKey(uri, "b".repeat(64))];

  it("the canary's version gone and the stable's held: only the canary's Job runs again", async () => {
    const w = modelWorld(v1);
    Object.assign(w.config, { nodeCacheUrl: url, nodeCacheNamespace: system });
    for (const node of ["node-a", "node-b"]) w.put(builtinKinds.Pod, agentPod(node));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-a", after, [key1])));
    w.put(builtinKinds.ConfigMap, stateConfigMap(state("node-b", after, [key1])));
    await w.reconcile();
    w.settle();
    succeeded(w, job1, "node-a");
    await w.reconcile();
    w.settle();
    w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
      d.metadata.generation = 1;
      d.status = {
        observedGeneration: 1,
        replicas: 2,
        updatedReplicas: 2,
        readyReplicas: 2,
        availableReplicas: 2,
      };
    });
    await w.reconcile();
    w.settle();
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.spec = v2;
      m.metadata.generation = 2;
    });
    await w.reconcile();
    w.settle();
    assert.ok(w.get(builtinKinds.Job, job2), "the canary's version downloads beside the stable one");
    succeeded(w, job2, "node-b");
    // node-b reported after its Job completed and lists only the stable's key.
    await w.reconcile();
    assert.deepEqual(
      jobDeletes(w).map((x) => x.name),
      [job2],
    );
    const told = w.events.filter((e) => e.reason === "CacheEntryGone").map((e) => e.message);
    assert.equal(told.length, 1);
    assert.match(
      told[0]!,
      new RegExp(`no node holds cache entry ${key2}: .*node-b, where its download Job ran`),
    );
  });
});
