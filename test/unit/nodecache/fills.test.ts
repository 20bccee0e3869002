// The copies an agent reports under way in its state: the tracker on a fake clock, then two
// agents on loopback, where a peer copy and a pod's copy (AgentClient.copyEntry, as
// `mlmodel cache-copy` runs it) show their bytes so far while they run, and nothing once done.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { NodeCacheAgent, type Peer } from "../../../src/nodecache/agent.ts";
import { AgentClient } from "../../../src/nodecache/client.ts";
import { cacheKey, type NodeCacheFill, type NodeCacheState } from "../../../src/nodecache/contract.ts";
import { FillTracker } from "../../../src/nodecache/fills.ts";
import { ContentStore } from "../../../src/nodecache/store.ts";

describe("FillTracker", () => {
  it("reports each copy's bytes so far, total and average rate, until it reaches its total", () => {
    let now = 1_000_000;
    const fills = new FillTracker(() => now);
    fills.start("a", { key: "k1", kind: "peer", peer: "node-a", bytesTotal: 1000 });
    fills.start("b", { key: "k1", kind: "pod", bytesTotal: 1000 });
    now += 2000;
    fills.add("a", 600);
    fills.add("b", 100);
    assert.deepEqual(fills.report(), [
      {
        key: "k1",
        kind: "peer",
        peer: "node-a",
        bytesDone: 600,
        bytesTotal: 1000,
        bytesPerSecond: 300,
        startedAt: new Date(1_000_000).toISOString(),
      },
      {
        key: "k1",
        kind: "pod",
        bytesDone: 100,
        bytesTotal: 1000,
        bytesPerSecond: 50,
        startedAt: new Date(1_000_000).toISOString(),
      },
    ]);
    fills.add("a", 400);
    assert.deepEqual(
      fills.report().map((f) => f.kind),
      ["pod"],
      "a copy that reached its total is over",
    );
    fills.start("b", { key: "k1", kind: "pod", bytesTotal: 1000 });
    assert.equal(fills.report()[0]!.bytesDone, 100, "a copy id seen again goes on");
  });

  it("drops a copy that moved nothing for the idle time, and says so once", () => {
    let now = 0;
    const fills = new FillTracker(() => now);
    fills.start("a", { key: "k1", kind: "pod", bytesTotal: 10 });
    now = 59_999;
    assert.equal(fills.dropIdle(60_000), false);
    now = 60_000;
    assert.equal(fills.dropIdle(60_000), true);
    assert.equal(fills.dropIdle(60_000), false);
    assert.deepEqual(fills.report(), []);
  });
});

describe("agents report the copies under way", () => {
  const root = mkdtempSync(join(tmpdir(), "nodecache-fills-"));
  const agents: NodeCacheAgent[] = [];
  after(async () => {
    for (const a of agents) await a.close();
    rmSync(root, { recursive: true, force: true });
  });

  /** An agent that records the copies its state shows each time it says something changed. */
  async function start(node: string, peers: Peer[]) {
    const seen: NodeCacheFill[][] = [];
    const store = await ContentStore.open(join(root, node), 1 << 30);
    let agent: NodeCacheAgent | undefined;
    agent = new NodeCacheAgent({
      store,
      node,
      peers: async () => peers,
      inUseKeys: async () => new Set(),
      onChange: () => {
        const fills = agent?.state().fills;
        if (fills) seen.push(fills);
      },
    });
    agents.push(agent);
    return { agent, store, seen, url: await agent.listen(0, "127.0.0.1") };
  }

  it("a peer copy and a pod's copy, with bytes between none and all while they run", async () => {
    const uri = "https://origin.example/fills";
    const key = cacheKey(uri, undefined);
    const bytes = randomBytes(4 << 20);
    const a = await start("node-a", []);
    const src = mkdtempSync(join(root, "tree-"));
    writeFileSync(join(src, "model.bin"), bytes);
    const client = (url: string) =>
      new AgentClient(url, {
        deadline: Date.now() + 60_000,
        idleTimeoutMs: 20_000,
        parallel: 2,
        log: () => {},
      });
    await client(a.url).upload(key, uri, src, new Set());

    const b = await start("node-b", [{ node: "node-a", url: a.url }]);
    const manifest = await client(b.url).ensure(key);
    assert.equal(manifest?.size, bytes.length);
    const peerCopies = b.seen.flat().filter((f) => f.key === key && f.kind === "peer");
    assert.ok(
      peerCopies.some((f) => f.bytesDone > 0 && f.bytesDone < f.bytesTotal),
      "the peer copy's bytes were reported while it ran",
    );
    assert.ok(peerCopies.every((f) => f.peer === "node-a" && f.bytesTotal === bytes.length));
    assert.equal(b.agent.state().fills, undefined, "nothing under way once the copy is done");

    const dest = join(root, "pod");
    mkdirSync(dest);
    const bad = await client(b.url).copyEntry(manifest!, dest, () => {});
    assert.deepEqual(bad, []);
    const podCopies = b.seen.flat().filter((f) => f.kind === "pod");
    assert.ok(
      podCopies.some((f) => f.bytesDone > 0 && f.bytesDone < f.bytesTotal),
      "the pod's copy was reported while it ran",
    );
    assert.ok(podCopies.every((f) => f.key === key && f.bytesTotal === bytes.length));
    assert.equal(b.agent.state().fills, undefined, "the pod's copy is over once every byte went out");
    assert.equal(a.agent.state().fills?.length ?? 0, 0, "serving a peer is no copy into a pod");
    assert.equal(
      createHash("sha256").update(bytes).digest("hex"),
      manifest!.files[0]!.sha256,
      "the copies moved the model's bytes",
    );
    const state: NodeCacheState = b.agent.state();
    assert.equal(state.entries.length, 1);
  });
});
