import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, it } from "node:test";
import { FakeClock } from "../../../src/runtime/clock.ts";
import { type Activity, type Heap, HeapReclaimer, reclaimDue } from "../../../src/runtime/heap-reclaim.ts";

const MiB = 2 ** 20;

/** A heap whose held bytes the test sets; a reclaim brings them down to `afterReclaim`. */
function fakeHeap(held: number, afterReclaim: number): Heap & { held: number; reclaims: number } {
  const heap = {
    held,
    reclaims: 0,
    heldBytes: () => heap.held,
    reclaim: () => {
      heap.reclaims++;
      heap.held = afterReclaim;
    },
  };
  return heap;
}

function reclaimer(heap: Heap, activity: Activity, clock = new FakeClock()) {
  const freed: number[] = [];
  const r = new HeapReclaimer(
    { intervalMs: 1000, growthBytes: 16 * MiB, heap },
    { activity: () => ({ ...activity }), clock, onReclaim: (b) => freed.push(b) },
  );
  return { r, freed, clock };
}

describe("reclaimDue", () => {
  it("is due only when work is quiet and the heap grew by the threshold since the last reclaim", () => {
    assert.equal(reclaimDue(40 * MiB, 20 * MiB, true, 16 * MiB), true);
    assert.equal(reclaimDue(36 * MiB, 20 * MiB, true, 16 * MiB), true, "exactly the threshold");
    assert.equal(reclaimDue(35 * MiB, 20 * MiB, true, 16 * MiB), false, "grew less");
    assert.equal(reclaimDue(90 * MiB, 20 * MiB, false, 16 * MiB), false, "work is not quiet");
    assert.equal(reclaimDue(10 * MiB, 20 * MiB, true, 16 * MiB), false, "shrank");
  });
});

describe("HeapReclaimer", () => {
  it("waits for a look with no reconcile since the previous one and nothing pending", () => {
    const heap = fakeHeap(20 * MiB, 20 * MiB);
    const activity = { done: 0, pending: 5 };
    const { r } = reclaimer(heap, activity);
    r.start();
    heap.held = 150 * MiB;
    assert.equal(r.look(), false, "keys pending");
    activity.pending = 0;
    activity.done = 10;
    assert.equal(r.look(), false, "reconciles finished since the last look");
    assert.equal(r.look(), true, "quiet: no reconcile since the last look, nothing pending");
    assert.equal(heap.reclaims, 1);
  });

  it("reclaims once per burst: the next reclaim needs the heap to grow again from where the last left it", () => {
    const heap = fakeHeap(20 * MiB, 60 * MiB);
    const { r, freed } = reclaimer(heap, { done: 0, pending: 0 });
    r.start();
    r.look();
    heap.held = 150 * MiB;
    assert.equal(r.look(), true);
    assert.deepEqual(freed, [90 * MiB]);
    assert.equal(r.look(), false, "held 60 MiB after the reclaim: not grown since");
    heap.held = 70 * MiB;
    assert.equal(r.look(), false, "grew 10 MiB: under the threshold");
    heap.held = 80 * MiB;
    assert.equal(r.look(), true, "grew 20 MiB since the last reclaim");
    assert.equal(heap.reclaims, 2);
  });

  it("never reclaims a heap that did not grow from its size at start", () => {
    const heap = fakeHeap(200 * MiB, 50 * MiB);
    const { r } = reclaimer(heap, { done: 0, pending: 0 });
    r.start();
    for (let i = 0; i < 5; i++) assert.equal(r.look(), false);
    assert.equal(heap.reclaims, 0);
  });

  it("looks every interval from start until stop", async () => {
    const heap = fakeHeap(20 * MiB, 20 * MiB);
    const { r, clock } = reclaimer(heap, { done: 0, pending: 0 });
    r.start();
    heap.held = 100 * MiB;
    await clock.advance(999);
    assert.equal(heap.reclaims, 0, "no look before the first interval");
    await clock.advance(1);
    assert.equal(heap.reclaims, 0, "the first look sets the reconcile count it compares with");
    await clock.advance(1000);
    assert.equal(heap.reclaims, 1);
    r.stop();
    heap.held = 200 * MiB;
    await clock.advance(10_000);
    assert.equal(heap.reclaims, 1, "stopped");
    assert.equal(clock.pendingTimers, 0);
  });
});

describe("HeapReclaimer failures", () => {
  it("stops looking, and does not throw, when the collection fails", async () => {
    const clock = new FakeClock();
    let tries = 0;
    const heap: Heap = {
      heldBytes: () => 100 * MiB * (tries + 1),
      reclaim: () => {
        tries++;
        throw new Error("unknown option");
      },
    };
    const r = new HeapReclaimer(
      { intervalMs: 1000, growthBytes: 0, heap },
      { activity: () => ({ done: 0, pending: 0 }), clock },
    );
    r.start();
    await clock.advance(10_000);
    assert.equal(tries, 1);
    assert.equal(clock.pendingTimers, 0);
  });
});

describe("v8Heap", () => {
  // In a child process: the collection and the flag it sets are process-wide.
  const heapModule = new URL("../../../src/runtime/heap-reclaim.ts", import.meta.url).href;
  const script = `
    import { getHeapSpaceStatistics } from "node:v8";
    import { runInNewContext } from "node:vm";
    const { v8Heap } = await import(${JSON.stringify(heapModule)});
    const heap = v8Heap();
    const oldHeld = () => getHeapSpaceStatistics().find((s) => s.space_name === "old_space").space_size;
    // A burst: what is kept (the cache) allocated between garbage that stays reachable until
    // the burst ends, so every page V8 fills holds both.
    const cache = new Map();
    const garbage = [];
    for (let i = 0; i < 30000; i++) {
      const text = JSON.stringify({ metadata: { name: "m" + i, uid: i + "-uid" }, status: { message: "x".repeat(80) } });
      cache.set("ns/m" + i, JSON.parse(text));
      for (let g = 0; g < 4; g++) garbage.push(JSON.parse(text));
    }
    const before = { held: heap.heldBytes(), old: oldHeld() };
    garbage.length = 0;
    heap.reclaim();
    const after = { held: heap.heldBytes(), old: oldHeld() };
    console.log(JSON.stringify({ before, after, cached: cache.size, gcVisible: typeof globalThis.gc, gcInNewContexts: runInNewContext("typeof gc") }));
  `;

  it("gives back the pages a burst filled, and leaves no gc function behind", () => {
    const out = execFileSync(
      process.execPath,
      ["--max-semi-space-size=2", "--input-type=module", "-e", script],
      {
        encoding: "utf8",
      },
    );
    const r = JSON.parse(out) as {
      before: { held: number; old: number };
      after: { held: number; old: number };
      cached: number;
      gcVisible: string;
      gcInNewContexts: string;
    };
    assert.equal(r.cached, 30000);
    assert.ok(
      r.after.old < r.before.old * 0.5,
      `old space held: ${(r.before.old / MiB).toFixed(1)} MiB before, ${(r.after.old / MiB).toFixed(1)} MiB after`,
    );
    assert.ok(r.after.held < r.before.held, "V8 holds less in all");
    assert.deepEqual([r.gcVisible, r.gcInNewContexts], ["undefined", "undefined"]);
  });
});
