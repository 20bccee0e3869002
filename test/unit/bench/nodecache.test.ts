import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { podsOnEach, podsPerNode } from "../../../bench/lib/cluster.ts";
import {
  agentStateConfigMap,
  placementOf,
  servingPod,
  splitStatusWrites,
} from "../../../bench/operator/nodecache.ts";
import {
  isNodeCacheState,
  nodeCacheStateOf,
  stateKeys,
  stateShownChanged,
} from "../../../src/operator/node-cache.ts";

describe("the nodecache path's placement", () => {
  it("counts serving pods per node and the models whose replicas share a node", () => {
    const p = placementOf([
      { model: "a", node: "n1" },
      { model: "a", node: "n2" },
      { model: "a", node: "n3" },
      { model: "b", node: "n1" },
      { model: "b", node: "n1" },
      { model: "c", node: undefined, initContainers: 1, initCompleted: 0 },
      { model: "d", node: "n2", initContainers: 1, initCompleted: 1, readyAfter: 4 },
    ]);
    assert.deepEqual(p.podsByNode, { "-": 1, n1: 3, n2: 2, n3: 1 });
    assert.equal(p.nodes, 3);
    assert.equal(p.minPerNode, 1);
    assert.equal(p.maxPerNode, 3);
    assert.equal(p.modelsOnDistinctNodes, 3);
    assert.equal(p.modelsSharingANode, 1);
    assert.equal(p.podsWithInitContainers, 2);
    assert.equal(p.podsInitCompleted, 1);
    assert.deepEqual(p.readyAfter, { p50: 4, p90: 4, max: 4 });
  });

  it("takes a ReplicaSet's pod and leaves a download Job's out", () => {
    const label = "serving.mlmodel.dev/model";
    const pod = (kind: string) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: "p",
        labels: { [label]: "m-1" },
        ownerReferences: [{ kind, name: "o" }],
        creationTimestamp: "2026-11-28T00:00:01Z",
      },
      spec: { nodeName: "kwok-node-2", initContainers: [{ name: "cache-copy" }] },
      status: {
        initContainerStatuses: [{ state: { terminated: { reason: "Completed", exitCode: 0 } } }],
        conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2026-11-28T00:00:04Z" }],
      },
    });
    assert.deepEqual(servingPod(pod("ReplicaSet") as never, label), {
      model: "m-1",
      node: "kwok-node-2",
      initContainers: 1,
      initCompleted: 1,
      readyAfter: 3,
    });
    assert.equal(servingPod(pod("Job") as never, label), undefined);
  });
});

describe("a hand-made agent state", () => {
  it("is read by the operator as an agent's state listing every key, origin on one node, peers elsewhere", () => {
    const keys = ["aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"];
    const make = (node: string) =>
      agentStateConfigMap({
        node,
        namespace: "mlmodel-system",
        keys,
        originNode: "kwok-node-0",
        inUse: (key) => key === keys[0],
        size: 10,
        now: "2026-11-28T00:00:00.000Z",
      });
    const origin = make("kwok-node-0");
    const peer = make("kwok-node-1");
    assert.ok(isNodeCacheState(origin));
    assert.deepEqual(stateKeys(peer), keys);
    const state = nodeCacheStateOf(peer)!;
    assert.equal(state.node, "kwok-node-1");
    assert.deepEqual(
      state.entries.map((e) => [e.source, e.peer, e.inUse]),
      [
        ["peer", "kwok-node-0", true],
        ["peer", "kwok-node-0", false],
      ],
    );
    assert.equal(state.bytesFromPeers, 20);
    assert.deepEqual(
      nodeCacheStateOf(origin)!.entries.map((e) => e.source),
      ["origin", "origin"],
    );
    assert.equal(nodeCacheStateOf(origin)!.bytesFromOrigin, 20);
  });
});

describe("a hand-made routine report", () => {
  it("moves only the times, so the operator's predicate wakes no model for it", () => {
    const make = (now: string, inUse: boolean) =>
      agentStateConfigMap({
        node: "kwok-node-3",
        namespace: "mlmodel-system",
        keys: ["aaaaaaaaaaaaaaaaaaaa"],
        originNode: "kwok-node-0",
        inUse: () => inUse,
        size: 10,
        completedAt: "2026-11-28T00:00:00.000Z",
        now,
      });
    const first = make("2026-11-28T00:00:00.000Z", true);
    const routine = make("2026-11-28T00:01:00.000Z", true);
    assert.equal(nodeCacheStateOf(routine)!.entries[0]!.completedAt, "2026-11-28T00:00:00.000Z");
    assert.notEqual(nodeCacheStateOf(routine)!.updatedAt, nodeCacheStateOf(first)!.updatedAt);
    assert.equal(stateShownChanged({ type: "update", old: first, object: routine, initial: false }), false);
    // A change status shows (a pod left the node) does wake: the comparison above is not vacuous.
    const notInUse = make("2026-11-28T00:01:00.000Z", false);
    assert.equal(stateShownChanged({ type: "update", old: first, object: notInUse, initial: false }), true);
  });
});

describe("audit writes split", () => {
  it("separates the models' status writes from everything else", () => {
    assert.deepEqual(
      splitStatusWrites({ "apply mlmodels/status": 7, "patch mlmodels/status": 1, "create events": 2 }),
      { status: 8, other: { "create events": 2 } },
    );
  });
});

describe("pods on each of a fixed number of nodes", () => {
  it("gives each node its share with a tenth to spare, never less than a default node", () => {
    assert.equal(podsOnEach(2000, 10), 220);
    assert.equal(podsOnEach(100, 10), podsPerNode);
  });
});
