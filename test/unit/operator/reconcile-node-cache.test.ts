/**
 * The reconcile with a node cache installed (the operator's config has its URL): which mode a
 * model gets, what it writes, and status.cache from the agents' state ConfigMaps in the cache.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Job } from "@kubernetes/client-node";
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  cacheKey,
  nodeCacheComponentLabels,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../../src/nodecache/contract.ts";
import { childNames } from "../../../src/operator/names.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { modelWorld, type World } from "./reconcile-harness.ts";

const url = "http://10.96.0.20:8375";
const uri = "s3://bucket/resnet/";
const spec: MLModelSpec = { model: { uri, format: "tensorflow" }, replicas: 2 };

function withNodeCache(w: World): World {
  Object.assign(w.config, { nodeCacheUrl: url, nodeCacheNamespace: "mlmodel-system" });
  return w;
}

function applied(w: World, kind: string) {
  return w.client.writes.filter((x) => x.verb === "apply" && x.kind.kind === kind);
}

function stateConfigMap(node: string, namespace = "mlmodel-system"): KubeObject {
  const state = {
    node,
    budgetBytes: 1e9,
    usedBytes: 10,
    bytesFromPeers: 0,
    bytesFromOrigin: 10,
    evictions: 0,
    updatedAt: "2026-01-01T00:00:00Z",
    entries: [
      {
        key: cacheKey(uri),
        uri,
        size: 10,
        files: 1,
        source: "origin",
        completedAt: "2026-01-01T00:00:00Z",
        lastUsedAt: "2026-01-01T00:00:00Z",
        inUse: false,
      },
    ],
  };
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: nodeCacheStateConfigMap(node), namespace, labels: { ...nodeCacheComponentLabels } },
    data: { [nodeCacheStateKey]: JSON.stringify(state) },
  } as KubeObject;
}

describe("reconcile with a node cache installed", () => {
  it("a new downloaded model uses it: no claim, the Job asks the agents first", async () => {
    const w = withNodeCache(modelWorld(spec));
    await w.reconcile();
    assert.equal(applied(w, "PersistentVolumeClaim").length, 0);
    const job = applied(w, "Job")[0]?.body as V1Job;
    const args = job.spec!.template.spec!.containers[0]!.args!;
    assert.deepEqual(args.slice(-4), ["--cache", url, "--cache-key", cacheKey(uri)]);
    assert.equal(w.lastStatus()?.storageMode, "NodeCache");
    assert.equal(w.lastStatus()?.cache?.key, cacheKey(uri));
  });

  it("a model its claim serves keeps it: an upgrade moves nothing", async () => {
    const claim = {
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: {
        name: childNames.storage("resnet"),
        namespace: "ml",
        ownerReferences: [
          {
            apiVersion: "serving.mlmodel.dev/v1alpha1",
            kind: "MLModel",
            name: "resnet",
            uid: "uid-resnet",
            controller: true,
          },
        ],
      },
    } as KubeObject;
    const w = withNodeCache(modelWorld(spec, [builtinKinds.PersistentVolumeClaim, claim]));
    await w.reconcile();
    const job = applied(w, "Job")[0]?.body as V1Job;
    assert.ok(!job.spec!.template.spec!.containers[0]!.args!.includes("--cache"));
    assert.equal(w.lastStatus()?.storageMode, "Claim");
    assert.equal(w.lastStatus()?.cache, undefined);
  });

  it("shows the nodes whose agents hold the key, from their state ConfigMaps in the operator's namespace only", async () => {
    const w = withNodeCache(
      modelWorld(
        spec,
        [builtinKinds.ConfigMap, stateConfigMap("node-a")],
        // The same labels in a user's namespace are not an agent's word.
        [builtinKinds.ConfigMap, stateConfigMap("node-x", "ml")],
      ),
    );
    await w.reconcile();
    const cache = w.lastStatus()?.cache;
    assert.deepEqual(
      cache?.nodes?.map((n) => [n.node, n.source, n.size]),
      [["node-a", "Origin", 10]],
    );
    assert.equal(cache?.bytesFromOrigin, 10);
  });

  it("an operator that does not watch the agents' namespace lists no node rather than none", async () => {
    const w = withNodeCache(modelWorld(spec, [builtinKinds.ConfigMap, stateConfigMap("node-a")]));
    Object.assign(w.config, { nodeCacheStatesWatched: false });
    await w.reconcile();
    assert.deepEqual(w.lastStatus()?.cache, { key: cacheKey(uri), url });
  });

  it("NodeCache asked without a node cache fails the model with a StorageReady condition that says what to do", async () => {
    const w = modelWorld({ ...spec, storage: { mode: "NodeCache" } });
    await w.reconcile();
    const status = w.lastStatus();
    assert.equal(status?.phase, "Failed");
    assert.equal(status?.reason, "NodeCacheNotInstalled");
    const storage = status?.conditions?.find((c) => c.type === "StorageReady");
    assert.equal(storage?.status, "False");
    assert.match(
      storage?.message ?? "",
      /spec\.storage\.mode is NodeCache.*set spec\.storage\.mode to Auto or Claim/,
    );
    assert.equal(applied(w, "Job").length, 0, "nothing is downloaded");
  });
});
