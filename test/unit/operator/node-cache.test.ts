import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  cacheKey,
  cacheKeyLabel,
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../../src/nodecache/contract.ts";
import {
  desiredDeployment,
  desiredDownloadJob,
  desiredStorage,
  servingPodTemplate,
  usesOwnClaim,
} from "../../../src/operator/desired.ts";
import { servedCacheCopyImages } from "../../../src/operator/mlmodel/decide.ts";
import { countsOnly } from "../../../src/operator/mlmodel/report.ts";
import { servingSelector } from "../../../src/operator/names.ts";
import {
  fillOf,
  fillProgressText,
  fillReportMaxAgeMs,
  isNodeCacheState,
  modelCacheKeys,
  nodeCacheStateOf,
  nodeCacheStatus,
  nodeCacheUrlOf,
  stateKeys,
  stateShownChanged,
} from "../../../src/operator/node-cache.ts";
import { defaults, PlanError, planModel, storageModeOf } from "../../../src/operator/plan.ts";
import { desiredPruneJob } from "../../../src/operator/prune.ts";
import { revisionData } from "../../../src/operator/revisions.ts";
import { computeStatus, type Observed } from "../../../src/operator/status.ts";
import type { KubeObject } from "../../../src/runtime/index.ts";
import { claimModeObjects, claimModeSpecs } from "./claim-objects.ts";
import { model, owner, tf } from "./fixtures.ts";
import { restrictedViolations } from "./restricted.ts";

const url = "http://10.96.0.20:8375";
const image = "example.com/mlmodel:1";
const config = { downloaderImage: image };
const withCache = { nodeCacheUrl: url, cacheCopyImage: image };
const sha = "b".repeat(64);
const spec: MLModelSpec = {
  model: { uri: "s3://bucket/resnet/", format: "tensorflow", version: "2", sha256: sha },
  replicas: 3,
  storage: { size: "20Gi" },
};

function nodeCachePlan(s: MLModelSpec = spec) {
  return planModel(model(s), tf, undefined, withCache);
}

describe("storage mode", () => {
  const storage = (extra: object = {}) => ({ size: "10Gi", accessMode: "ReadWriteOnce" as const, ...extra });

  it("Auto is NodeCache only with a node cache, no claim of the model's own and no shared claim asked for", () => {
    assert.equal(storageModeOf(storage(), {}), "Claim", "no node cache installed");
    assert.equal(storageModeOf(storage(), { nodeCacheUrl: url }), "NodeCache");
    assert.equal(storageModeOf(storage({ mode: "Auto" }), { nodeCacheUrl: url }), "NodeCache");
    assert.equal(
      storageModeOf(storage(), { nodeCacheUrl: url, hasClaim: true }),
      "Claim",
      "a model a claim serves stays on it",
    );
    assert.equal(storageModeOf(storage({ accessMode: "ReadWriteMany" }), { nodeCacheUrl: url }), "Claim");
    assert.equal(
      storageModeOf(storage({ accessMode: "ReadWriteOncePod" }), { nodeCacheUrl: url }),
      "NodeCache",
    );
  });

  it("Claim and NodeCache are what the user asked", () => {
    assert.equal(storageModeOf(storage({ mode: "Claim" }), { nodeCacheUrl: url }), "Claim");
    assert.equal(
      storageModeOf(storage({ mode: "NodeCache" }), { nodeCacheUrl: url, hasClaim: true }),
      "NodeCache",
    );
  });

  it("NodeCache without a node cache names the field, its value and what would do", () => {
    assert.throws(
      () => planModel(model({ ...spec, storage: { mode: "NodeCache" } }), tf),
      (err: unknown) =>
        err instanceof PlanError &&
        err.reason === "NodeCacheNotInstalled" &&
        err.condition === "StorageReady" &&
        /spec\.storage\.mode is NodeCache/.test(err.message) &&
        /Auto or Claim/.test(err.message) &&
        /mlmodel-node-cache/.test(err.message),
    );
  });

  it("NodeCache with a pvc:// model says it is mounted in place", () => {
    const pvc = {
      model: { uri: "pvc://models/resnet", format: "tensorflow" },
      storage: { mode: "NodeCache" },
    };
    assert.throws(
      () => planModel(model(pvc as MLModelSpec), tf, undefined, withCache),
      (err: unknown) =>
        err instanceof PlanError &&
        err.reason === "NodeCacheNeedsDownload" &&
        err.message.includes('"pvc://models/resnet"') &&
        /Auto or Claim/.test(err.message),
    );
  });

  it("a pvc:// model keeps mounting in place with a node cache installed", () => {
    const plan = planModel(
      model({ model: { uri: "pvc://models/resnet", format: "tensorflow" } }),
      tf,
      undefined,
      withCache,
    );
    assert.equal(plan.source.type, "pvc");
  });
});

describe("Claim mode is unchanged", () => {
  const golden = JSON.parse(
    readFileSync(new URL("./golden/claim-mode.json", import.meta.url), "utf8"),
  ) as Record<string, unknown>;

  it("without a node cache, every child is byte for byte what the operator made before it", () => {
    assert.equal(JSON.stringify(claimModeObjects()), JSON.stringify(golden));
  });

  it("with a node cache, a model a claim serves keeps its children (an upgrade rolls nothing)", () => {
    assert.equal(JSON.stringify(claimModeObjects({ ...withCache, hasClaim: true })), JSON.stringify(golden));
  });

  it("with a node cache, a new model moves to it except the one that asks for a shared claim", () => {
    const now = claimModeObjects(withCache);
    const same = Object.keys(claimModeSpecs).filter(
      (name) => JSON.stringify(now[name]) === JSON.stringify(golden[name]),
    );
    assert.deepEqual(same, ["shared"]);
  });
});

describe("NodeCache mode", () => {
  it("keys the version by its exact URI and sha256: two models with both share one entry", () => {
    const a = nodeCachePlan();
    const b = planModel(model(spec, "resnet-copy"), tf, undefined, withCache);
    const other = nodeCachePlan({ ...spec, model: { ...spec.model, sha256: "c".repeat(64) } });
    const key = (p: typeof a) => (p.source.type === "download" ? p.source.nodeCache?.key : undefined);
    assert.equal(key(a), cacheKey("s3://bucket/resnet/", sha));
    assert.equal(key(b), key(a));
    assert.notEqual(key(other), key(a));
  });

  it("a revision recorded with its URI redacted is served again under the same key", () => {
    const signed = {
      model: { uri: "https://s.example.com/m.tgz?X-Amz-Signature=abc", format: "tensorflow" },
    };
    const spec1 = nodeCachePlan(signed);
    const data = revisionData(signed, "resnet", "0123456789");
    const again = planModel(model({ ...signed, model: data.spec.model }), tf, data.source, withCache);
    assert.ok(spec1.source.type === "download" && again.source.type === "download");
    assert.equal(again.source.nodeCache?.key, spec1.source.nodeCache?.key);
    assert.ok(!JSON.stringify(again.source.nodeCache).includes("Signature"));
  });

  it("has no claim and no prune Job", () => {
    const plan = nodeCachePlan();
    assert.equal(desiredStorage(plan, owner), undefined);
    assert.equal(usesOwnClaim(plan), false);
    assert.equal(desiredPruneJob(plan, owner, config, []), undefined);
  });

  it("downloads into scratch space with --cache and --cache-key: the agent first, the origin only if no agent has it", () => {
    const plan = nodeCachePlan();
    const job = desiredDownloadJob(plan, owner, config)!;
    const pod = job.spec!.template.spec!;
    const c = pod.containers[0]!;
    const content = plan.source.type === "download" ? plan.source.content : "";
    assert.deepEqual(c.args, [
      "--uri",
      "s3://bucket/resnet/",
      "--dest",
      `/scratch/${content}/2`,
      "--sha256",
      sha,
      "--cache",
      url,
      "--cache-key",
      cacheKey("s3://bucket/resnet/", sha),
    ]);
    assert.deepEqual(
      pod.volumes?.find((v) => v.name === "scratch"),
      { name: "scratch", emptyDir: { sizeLimit: "20Gi" } },
    );
    assert.ok(!pod.volumes?.some((v) => v.persistentVolumeClaim), "no claim");
    assert.deepEqual(c.volumeMounts?.[0], { name: "scratch", mountPath: defaults.scratchMountPath });
    assert.deepEqual(restrictedViolations(pod), []);
  });

  it("serving pods fill their own emptyDir from the node's agent before the server starts", () => {
    const plan = nodeCachePlan();
    const template = desiredDeployment(plan, owner).spec!.template;
    const pod = template.spec!;
    const dest = plan.source.type === "download" ? plan.source.dest : "";
    const init = pod.initContainers?.[0];
    assert.equal(pod.initContainers?.length, 1);
    assert.equal(init?.name, "cache-copy");
    assert.equal(init?.image, image);
    assert.deepEqual(init?.command, ["mlmodel", "cache-copy"]);
    assert.deepEqual(init?.args, [
      "--cache",
      url,
      "--key",
      cacheKey("s3://bucket/resnet/", sha),
      "--dest",
      dest,
    ]);
    assert.equal(init?.securityContext?.readOnlyRootFilesystem, true);
    assert.deepEqual(init?.resources, defaults.cacheCopyResources);
    assert.deepEqual(init?.volumeMounts, [{ name: "model", mountPath: plan.mountPath }]);
    assert.deepEqual(
      pod.volumes?.find((v) => v.name === "model"),
      { name: "model", emptyDir: { sizeLimit: "20Gi" } },
    );
    const server = pod.containers[0]!;
    assert.deepEqual(
      server.volumeMounts?.find((m) => m.name === "model"),
      { name: "model", mountPath: plan.mountPath, readOnly: true },
    );
    assert.equal(template.metadata?.labels?.[cacheKeyLabel], cacheKey("s3://bucket/resnet/", sha));
    assert.deepEqual(restrictedViolations(pod), []);
  });

  it("spreads replicas over nodes and zones unless the user places them", () => {
    const pod = desiredDeployment(nodeCachePlan(), owner).spec!.template.spec!;
    const spread = pod.topologySpreadConstraints;
    assert.deepEqual(
      spread?.map((c) => [c.topologyKey, c.maxSkew, c.whenUnsatisfiable]),
      [["kubernetes.io/hostname", 1, "ScheduleAnyway"]],
    );
    assert.deepEqual(spread?.[0]?.labelSelector?.matchLabels, servingSelector("resnet"));
    // Zones by preference: a zone constraint would turn the node spread off where nodes have no zone label.
    const zone = pod.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution?.[0];
    assert.equal(zone?.podAffinityTerm.topologyKey, "topology.kubernetes.io/zone");
    assert.deepEqual(zone?.podAffinityTerm.labelSelector?.matchLabels, servingSelector("resnet"));
    const placed = nodeCachePlan({ ...spec, placement: { nodeSelector: { pool: "gpu" } } });
    assert.equal(desiredDeployment(placed, owner).spec!.template.spec!.topologySpreadConstraints, undefined);
    assert.equal(desiredDeployment(placed, owner).spec!.template.spec!.affinity, undefined);
  });

  it("leaves a lost node after 30 s instead of Kubernetes' 300, unless the user tolerates that taint", () => {
    const tolerations = (s: MLModelSpec) =>
      desiredDeployment(nodeCachePlan(s), owner).spec!.template.spec!.tolerations?.map((t) => [
        t.key,
        t.effect,
        t.tolerationSeconds,
      ]);
    assert.deepEqual(tolerations(spec), [
      ["node.kubernetes.io/not-ready", "NoExecute", defaults.nodeLossTolerationSeconds],
      ["node.kubernetes.io/unreachable", "NoExecute", defaults.nodeLossTolerationSeconds],
    ]);
    const own = {
      key: "node.kubernetes.io/unreachable",
      operator: "Exists" as const,
      effect: "NoExecute" as const,
      tolerationSeconds: 600,
    };
    assert.deepEqual(tolerations({ ...spec, placement: { tolerations: [own] } }), [
      ["node.kubernetes.io/unreachable", "NoExecute", 600],
      ["node.kubernetes.io/not-ready", "NoExecute", defaults.nodeLossTolerationSeconds],
    ]);
    const everything = { operator: "Exists" as const };
    assert.deepEqual(tolerations({ ...spec, placement: { tolerations: [everything] } }), [
      [undefined, undefined, undefined],
    ]);
    const claim = desiredDeployment(planModel(model(spec), tf), owner).spec!.template.spec!;
    assert.equal(claim.tolerations, undefined, "a claim's replicas wait for their node");
  });

  it("keeps a served version's cache-copy image across an operator upgrade; a new version gets the operator's", () => {
    const served = desiredDeployment(nodeCachePlan(), owner);
    const upgraded = { ...withCache, cacheCopyImage: "example.com/mlmodel:2" };
    const images = servedCacheCopyImages([served]);
    assert.deepEqual([...images], [[cacheKey("s3://bucket/resnet/", sha), image]]);
    const samePlan = planModel(model(spec), tf, undefined, { ...upgraded, servedCacheCopyImages: images });
    assert.deepEqual(
      desiredDeployment(samePlan, owner).spec!.template,
      served.spec!.template,
      "the upgrade rolls no pod of a served version",
    );
    const next = { ...spec, model: { ...spec.model, uri: "s3://bucket/resnet-2/" } };
    const newVersion = planModel(model(next), tf, undefined, { ...upgraded, servedCacheCopyImages: images });
    assert.equal(
      desiredDeployment(newVersion, owner).spec!.template.spec!.initContainers![0]!.image,
      "example.com/mlmodel:2",
    );
  });

  it("is a revision of its own: moving a model between modes rolls it once", () => {
    const claim = planModel(model(spec), tf);
    assert.notEqual(servingPodTemplate(nodeCachePlan()).revision, servingPodTemplate(claim).revision);
  });
});

function stateConfigMap(state: NodeCacheState, extra: Partial<KubeObject["metadata"]> = {}): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: nodeCacheStateConfigMap(state.node),
      namespace: "mlmodel-system",
      labels: { ...nodeCacheComponentLabels },
      ...extra,
    },
    data: { [nodeCacheStateKey]: JSON.stringify(state) },
  } as KubeObject;
}

const key = cacheKey("s3://bucket/resnet/", sha);
function state(node: string, entries: Partial<NodeCacheState["entries"][number]>[]): NodeCacheState {
  return {
    node,
    budgetBytes: 100e9,
    usedBytes: 0,
    bytesFromPeers: 0,
    bytesFromOrigin: 0,
    evictions: 0,
    updatedAt: "2026-11-27T10:00:00Z",
    entries: entries.map((e) => ({
      key,
      uri: "s3://bucket/resnet/",
      size: 1000,
      files: 3,
      source: "origin",
      completedAt: "2026-11-27T09:00:00Z",
      lastUsedAt: "2026-11-27T09:30:00Z",
      inUse: false,
      ...e,
    })),
  };
}

describe("status from the agents' states", () => {
  const states = [
    state("node-b", [{ source: "peer", peer: "node-a", inUse: true, size: 1000 }]),
    state("node-a", [
      { source: "origin", size: 1000 },
      { key: "other", size: 5 },
    ]),
    state("node-c", [{ key: "other", size: 5 }]),
  ];

  it("lists each node holding the key, where it came from, and bytes from the origin vs peers", () => {
    assert.deepEqual(nodeCacheStatus(key, url, states), {
      key,
      url,
      nodes: [
        {
          node: "node-a",
          size: 1000,
          files: 3,
          source: "Origin",
          inUse: false,
          completedAt: "2026-11-27T09:00:00Z",
        },
        {
          node: "node-b",
          size: 1000,
          files: 3,
          source: "Peer",
          peer: "node-a",
          inUse: true,
          completedAt: "2026-11-27T09:00:00Z",
        },
      ],
      nodesCached: 2,
      bytesFromOrigin: 1000,
      bytesFromPeers: 1000,
    });
  });

  it("reads states only from the agents' ConfigMaps, and a broken one as absent", () => {
    const good = stateConfigMap(states[0]!);
    assert.equal(isNodeCacheState(good), true);
    assert.deepEqual(stateKeys(good), [key]);
    assert.equal(nodeCacheStateOf({ ...good, metadata: { ...good.metadata, labels: {} } }), undefined);
    assert.equal(
      nodeCacheStateOf({ ...good, metadata: { ...good.metadata, name: "user-config" } }),
      undefined,
    );
    const broken = { ...good, data: { [nodeCacheStateKey]: "{not json" } } as KubeObject;
    assert.equal(nodeCacheStateOf(broken), undefined);
    assert.deepEqual(stateKeys(broken), []);
  });

  it("a state's change wakes models only when what status shows of it changed", () => {
    const before = stateConfigMap(states[0]!);
    const used = state("node-b", [
      { source: "peer", peer: "node-a", inUse: true, lastUsedAt: "2026-11-27T11:00:00Z" },
    ]);
    const notUsed = state("node-b", [{ source: "peer", peer: "node-a", inUse: false }]);
    const update = (next: NodeCacheState) => ({
      type: "update" as const,
      old: before,
      object: stateConfigMap(next),
      initial: false,
    });
    assert.equal(stateShownChanged(update(used)), false, "a time of use alone");
    assert.equal(stateShownChanged(update(notUsed)), true, "inUse changed");
    assert.equal(stateShownChanged({ type: "add", object: before, initial: false }), true);
    const userConfig = { ...before, metadata: { name: "x", namespace: "ml" } };
    assert.equal(stateShownChanged({ type: "add", object: userConfig, initial: false }), false);
  });

  it("a model is indexed by its spec's key and the key its status shows", () => {
    const m = { ...model(spec), status: { cache: { key: "older" } } };
    assert.deepEqual(modelCacheKeys(m), [key, "older"]);
    assert.deepEqual(modelCacheKeys(model({ model: { uri: "pvc://c/x", format: "tensorflow" } })), []);
  });

  it("computeStatus tells the mode, the storage condition and status.cache", () => {
    const plan = nodeCachePlan();
    const observed: Observed = {
      model: model(spec),
      now: "2026-11-27T10:00:00Z",
      plan,
      missing: [],
      jobPods: [],
      pods: undefined,
      nodeCache: { states },
    };
    const status = computeStatus(observed);
    assert.equal(status.storageMode, "NodeCache");
    assert.equal(status.cache?.nodesCached, 2);
    const storage = status.conditions?.find((c) => c.type === "StorageReady");
    assert.equal(storage?.status, "True");
    assert.equal(storage?.reason, "NodeCache");
    assert.doesNotMatch(status.message ?? "", /volume|claim/, "a NodeCache download waits for no volume");
  });

  it("a Claim model shows its mode only when a node cache is installed", () => {
    const base = {
      model: model(spec),
      now: "2026-11-27T10:00:00Z",
      missing: [],
      jobPods: [],
      pods: undefined,
    };
    const claim = planModel(model(spec), tf);
    assert.equal(computeStatus({ ...base, plan: claim }).storageMode, undefined);
    assert.equal(computeStatus({ ...base, plan: claim, nodeCache: { states: [] } }).storageMode, "Claim");
    assert.equal(computeStatus({ ...base, plan: claim, nodeCache: { states: [] } }).cache, undefined);
  });

  it("lists no node, rather than none, when the operator cannot see the agents' states", () => {
    const base = {
      model: model(spec),
      now: "2026-11-27T10:00:00Z",
      missing: [],
      jobPods: [],
      pods: undefined,
    };
    const status = computeStatus({ ...base, plan: nodeCachePlan(), nodeCache: {} });
    assert.equal(status.storageMode, "NodeCache");
    assert.deepEqual(status.cache, { key, url });
  });

  it("the node cache's URL is its Service's ClusterIP and port, none for a headless one", () => {
    assert.equal(nodeCacheUrlOf("10.96.0.20"), url);
    assert.equal(nodeCacheUrlOf("fd00::20"), "http://[fd00::20]:8375");
    assert.equal(nodeCacheUrlOf("None"), undefined);
    assert.equal(nodeCacheUrlOf(undefined), undefined);
  });
});

describe("copies under way, summed over nodes", () => {
  const fill = (f: Partial<NonNullable<NodeCacheState["fills"]>[number]>) => ({
    key,
    kind: "pod" as const,
    bytesDone: 0,
    bytesTotal: 1000,
    bytesPerSecond: 0,
    startedAt: "2026-11-27T09:59:58Z",
    ...f,
  });
  const filling = [
    // node-a holds the entry and copies it into two pods; node-b copies it from node-a.
    {
      ...state("node-a", [{}]),
      fills: [fill({ bytesDone: 400, bytesPerSecond: 200 }), fill({ bytesDone: 100, bytesPerSecond: 50 })],
    },
    {
      ...state("node-b", []),
      fills: [
        fill({ kind: "peer", peer: "node-a", bytesDone: 300, bytesPerSecond: 150 }),
        fill({ key: "other", bytesDone: 7, bytesTotal: 9 }),
      ],
    },
    state("node-c", [{ source: "peer", peer: "node-a" }]),
  ];
  const now = Date.parse("2026-11-27T10:00:01Z");

  it("sums the copies of the key over the nodes, and says them in one line", () => {
    const fillStatus = fillOf(key, filling, now);
    assert.deepEqual(fillStatus, {
      nodes: 2,
      copies: 3,
      bytesDone: 800,
      bytesTotal: 3000,
      bytesPerSecond: 400,
    });
    assert.equal(fillProgressText(fillStatus!), "3 copies on 2 nodes: 26% 800B/2.9Ki 400B/s");
    assert.equal(
      fillProgressText({
        nodes: 1,
        copies: 1,
        bytesDone: 3 << 20,
        bytesTotal: 4 << 20,
        bytesPerSecond: 12 << 20,
      }),
      "1 copy on 1 node: 75% 3.0Mi/4.0Mi 12Mi/s",
    );
    const status = nodeCacheStatus(key, url, filling, now);
    assert.deepEqual(status.fill, fillStatus);
    assert.equal(status.progress, "3 copies on 2 nodes: 26% 800B/2.9Ki 400B/s");
    assert.equal(status.nodesCached, 2, "a copy under way is no node holding the key");
  });

  it("shows nothing when no copy of the key is under way, or only in states no running agent writes", () => {
    assert.equal(fillOf(key, [state("node-a", [{}])], now), undefined);
    assert.equal(fillOf("absent", filling, now), undefined);
    const status = nodeCacheStatus(key, url, [state("node-a", [{}])], now);
    assert.equal(status.fill, undefined);
    assert.equal(status.progress, undefined);
    // An agent copying writes its state every few seconds: one silent this long is not copying.
    const later = Date.parse("2026-11-27T10:00:00Z") + fillReportMaxAgeMs;
    assert.equal(fillOf(key, filling, later), undefined);
    assert.equal(fillOf(key, filling, later - 1)?.copies, 3);
  });

  it("a state's copies index it under their key and wake its models as their bytes move", () => {
    const cm = stateConfigMap(filling[1]!);
    assert.deepEqual(stateKeys(cm).sort(), [key, "other"].sort());
    const moved = structuredClone(filling[1]!);
    moved.fills![0]!.bytesDone = 600;
    moved.fills![0]!.bytesPerSecond = 300;
    const change = (next: NodeCacheState) => ({
      type: "update" as const,
      old: cm,
      object: stateConfigMap(next),
      initial: false,
    });
    assert.equal(stateShownChanged(change(moved)), true, "bytes moved");
    assert.equal(stateShownChanged(change({ ...filling[1]!, updatedAt: "2026-11-27T10:00:05Z" })), false);
  });

  it("a change of the copies alone is held like counts: at most one status write per settle time", () => {
    const statusAt = (now: string, states: NodeCacheState[]) =>
      computeStatus({
        model: model(spec),
        now,
        plan: nodeCachePlan(),
        missing: [],
        jobPods: [],
        pods: undefined,
        nodeCache: { states },
      });
    const before = statusAt("2026-11-27T10:00:01Z", filling);
    assert.ok(before.cache?.fill, "the copies are in status");
    const moved = structuredClone(filling);
    moved[0]!.fills![0]!.bytesDone = 900;
    const after = statusAt("2026-11-27T10:00:03Z", moved);
    assert.notDeepEqual(after.cache?.fill, before.cache?.fill);
    assert.equal(countsOnly(before, after), true);
    const held = structuredClone(moved);
    held[2] = state("node-c", []);
    const nodeGone = statusAt("2026-11-27T10:00:03Z", held);
    assert.equal(
      countsOnly(before, nodeGone),
      false,
      "a node that no longer holds the key is written at once",
    );
  });
});
