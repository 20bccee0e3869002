// The agent's Kubernetes side without a cluster: peers read from EndpointSlice objects, and the
// state writer's throttling (a write only when the state changed), over the runtime's FakeClient.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { NodeCacheState } from "../../../src/nodecache/contract.ts";
import { nodeCacheStateConfigMap, nodeCacheStateKey } from "../../../src/nodecache/contract.ts";
import { peersFromSlices, StateWriter } from "../../../src/nodecache/kube.ts";
import { builtinKinds } from "../../../src/runtime/index.ts";
import { FakeClient } from "../../../src/runtime/testing.ts";

describe("peersFromSlices", () => {
  it("keeps ready endpoints on other nodes, one per node, with the slice's port", () => {
    const peers = peersFromSlices(
      [
        {
          ports: [{ name: "http", port: 9000 }],
          endpoints: [
            { addresses: ["10.0.0.2"], nodeName: "b", conditions: { ready: true } },
            { addresses: ["10.0.0.1"], nodeName: "self" },
            { addresses: ["10.0.0.3"], nodeName: "c", conditions: { ready: false } },
            { addresses: ["10.0.0.4"] },
            { addresses: ["fd00::5"], nodeName: "d" },
          ],
        },
        {
          ports: null,
          endpoints: [
            { addresses: ["10.0.1.2"], nodeName: "a" },
            { addresses: ["10.0.1.9"], nodeName: "b" },
          ],
        },
      ],
      "self",
    );
    assert.deepEqual(peers, [
      { node: "a", url: "http://10.0.1.2:8375" },
      { node: "b", url: "http://10.0.0.2:9000" },
      { node: "d", url: "http://[fd00::5]:9000" },
    ]);
  });
});

describe("StateWriter", () => {
  const state = (entries: number, updatedAt: string): NodeCacheState => ({
    node: "n1",
    budgetBytes: 100,
    usedBytes: entries * 10,
    bytesFromPeers: 0,
    bytesFromOrigin: 0,
    evictions: 0,
    entries: [],
    updatedAt,
  });

  it("applies the ConfigMap, and again only when something besides updatedAt changed", async () => {
    const client = new FakeClient();
    let current = state(1, "t1");
    const writer = new StateWriter(client, "ns", () => current, { minIntervalMs: 5000, log: () => {} });
    await writer.flush();
    current = state(1, "t2");
    await writer.flush();
    assert.equal(writer.writes, 1, "a new updatedAt alone is not a change");
    current = state(2, "t3");
    await writer.flush();
    assert.equal(writer.writes, 2);
    const cm = (await client.get(builtinKinds.ConfigMap, {
      namespace: "ns",
      name: nodeCacheStateConfigMap("n1"),
    })) as unknown as {
      data: Record<string, string>;
    };
    assert.equal((JSON.parse(cm.data[nodeCacheStateKey]!) as NodeCacheState).usedBytes, 20);
    assert.equal(client.requests.filter((r) => r.verb === "apply").length, 2);
  });
});
