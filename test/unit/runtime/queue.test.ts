import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ItemBackoff } from "../../../src/runtime/backoff.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { WorkQueue } from "../../../src/runtime/queue.ts";

/** Pops every ready key without waiting (get() on a non-empty queue resolves at once). */
async function drainReady(q: WorkQueue): Promise<string[]> {
  const out: string[] = [];
  while (q.length > 0) {
    const key = await q.get();
    if (key === undefined) break;
    out.push(key);
  }
  return out;
}

describe("WorkQueue", () => {
  it("deduplicates keys waiting in the queue", async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add("a");
    q.add("b");
    q.add("a");
    q.add("a");
    assert.equal(q.length, 2);
    assert.deepEqual(await drainReady(q), ["a", "b"]);
  });

  it("never hands out a key that is processing; a re-add runs once more after done()", async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add("a");
    const first = await q.get();
    assert.equal(first, "a");
    q.add("a");
    q.add("a");
    assert.equal(q.length, 0, "a processing key is not queued again");
    let second: string | undefined;
    void q.get().then((k) => {
      second = k;
    });
    await settle();
    assert.equal(second, undefined, "get() waits while the only key is processing");
    q.done("a");
    await settle();
    assert.equal(second, "a", "the dirty key runs again after done()");
    q.done("a");
    assert.equal(q.length, 0);
    assert.equal(q.processing, 0);
  });

  it("with many workers, two gets never return the same key at once", async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    const running = new Set<string>();
    let overlaps = 0;
    let runs = 0;
    const worker = async () => {
      for (;;) {
        const key = await q.get();
        if (key === undefined) return;
        if (running.has(key)) overlaps++;
        running.add(key);
        runs++;
        await settle();
        // Re-add while processing: must not produce a parallel run.
        if (runs < 200) q.add(key);
        running.delete(key);
        q.done(key);
      }
    };
    for (const k of ["a", "b", "c"]) q.add(k);
    const workers = Array.from({ length: 5 }, worker);
    while (runs < 200) await settle();
    await q.shutdown();
    await Promise.all(workers);
    assert.equal(overlaps, 0);
    assert.ok(runs >= 200);
  });

  it("backs off per key: 5ms doubling, capped, reset by forget()", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock, backoff: new ItemBackoff({ baseMs: 5, maxMs: 1_000_000 }) });
    const delays: number[] = [];
    for (let i = 0; i < 20; i++) {
      const before = clock.now();
      q.addRateLimited("k");
      assert.equal(q.length, 0, "not ready before its delay");
      await clock.advance(clock.nextTimerAt()! - clock.now());
      assert.equal(q.length, 1);
      delays.push(clock.now() - before);
      const key = await q.get();
      q.done(key!);
    }
    assert.deepEqual(delays.slice(0, 5), [5, 10, 20, 40, 80]);
    assert.equal(delays[17], 655_360);
    assert.equal(delays[19], 1_000_000, "capped at 1000 s");
    q.forget("k");
    q.addRateLimited("k");
    assert.equal(clock.nextTimerAt()! - clock.now(), 5, "forget() resets to the base delay");
  });

  it("addAfter delays a key; the earliest of two delays wins", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter("a", 1000);
    q.addAfter("a", 300);
    q.addAfter("a", 2000);
    await clock.advance(299);
    assert.equal(q.length, 0);
    await clock.advance(1);
    assert.equal(q.length, 1);
    assert.equal(q.delayed, 0);
    assert.equal(clock.pendingTimers, 0, "no timer left once nothing waits");
  });

  it("cancelAfter withdraws a key's pending delay (whatever asked for it), and only that key's", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter("a", 300);
    q.addAfter("b", 1000);
    assert.equal(q.cancelAfter("a"), true);
    assert.equal(q.cancelAfter("a"), false, "nothing left to withdraw");
    assert.equal(q.delayed, 1);
    assert.equal(clock.nextTimerAt(), 1000, "the timer moved to the next key's time");
    assert.equal(clock.pendingTimers, 1);
    await clock.advance(1000);
    assert.deepEqual(await drainReady(q), ["b"]);
    q.done("b");
    // A backoff retry is a delay too; a later addAfter may be set once it is withdrawn.
    q.addRateLimited("c");
    q.cancelAfter("c");
    q.addAfter("c", 5000);
    await clock.advance(4999);
    assert.equal(q.length, 0);
    await clock.advance(1);
    assert.deepEqual(await drainReady(q), ["c"]);
    assert.equal(clock.pendingTimers, 0);
  });

  it("cancelAfter leaves a key that is queued or processing (and its dirty re-run) alone", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.addAfter("a", 10);
    await clock.advance(10);
    assert.equal(q.cancelAfter("a"), false, "fallen due: queued, not waiting");
    assert.equal(q.length, 1);
    assert.equal(await q.get(), "a");
    q.addAfter("a", 10);
    await clock.advance(10);
    assert.equal(q.cancelAfter("a"), false, "fallen due while processing: dirty");
    q.done("a");
    assert.deepEqual(await drainReady(q), ["a"]);
  });

  it("many delayed keys come out in time order", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    for (let i = 100; i > 0; i--) q.addAfter(`k${i}`, i * 10);
    await clock.advance(1000);
    const order = await drainReady(q);
    assert.equal(order.length, 100);
    assert.deepEqual(order.slice(0, 3), ["k1", "k2", "k3"]);
  });

  it("serves live (high) keys before initial-sync (low) keys without starving the low lane", async () => {
    const q = new WorkQueue({ clock: new FakeClock(), lowLaneEvery: 3 });
    for (let i = 0; i < 10; i++) q.add(`init${i}`, "low");
    for (let i = 0; i < 6; i++) q.add(`live${i}`, "high");
    const order = await drainReady(q);
    assert.deepEqual(order.slice(0, 8), [
      "live0",
      "live1",
      "live2",
      "init0",
      "live3",
      "live4",
      "live5",
      "init1",
    ]);
    assert.equal(order.length, 16);
  });

  it("promotes a waiting low key when a live event for it arrives", async () => {
    const q = new WorkQueue({ clock: new FakeClock() });
    q.add("x", "low");
    q.add("y", "low");
    q.add("y", "high");
    assert.deepEqual(await drainReady(q), ["y", "x"]);
  });

  it("shutdown drops waiting keys, wakes getters with undefined and waits for processing keys", async () => {
    const clock = new FakeClock();
    const q = new WorkQueue({ clock });
    q.add("a");
    q.add("b");
    q.addAfter("c", 10);
    const a = await q.get();
    let done = false;
    const shut = q.shutdown().then(() => {
      done = true;
    });
    await settle();
    assert.equal(done, false, "waits for the processing key");
    assert.equal(await q.get(), undefined);
    q.add("d");
    assert.equal(q.length, 0, "adds after shutdown are ignored");
    q.done(a!);
    await shut;
    assert.equal(done, true);
    assert.equal(clock.pendingTimers, 0);
  });

  it("reports metrics: adds, depth, retries, queue and work durations", async () => {
    const clock = new FakeClock();
    const seen = { adds: 0, depth: [] as number[], retries: 0, queued: [] as number[], work: [] as number[] };
    const q = new WorkQueue({
      clock,
      metrics: {
        add: () => seen.adds++,
        depth: (n) => seen.depth.push(n),
        retry: () => seen.retries++,
        queueDuration: (s) => seen.queued.push(s),
        workDuration: (s) => seen.work.push(s),
      },
    });
    q.add("a");
    q.add("a");
    await clock.advance(2000);
    const key = await q.get();
    await clock.advance(500);
    q.done(key!);
    q.addRateLimited("a");
    assert.equal(seen.adds, 1, "a deduplicated add is not counted");
    assert.equal(seen.retries, 1);
    assert.deepEqual(seen.queued, [2]);
    assert.deepEqual(seen.work, [0.5]);
    assert.deepEqual(seen.depth, [1, 0]);
  });

  it("rejects a bad lowLaneEvery with the value in the message", () => {
    assert.throws(() => new WorkQueue({ lowLaneEvery: 0 }), /lowLaneEvery must be >= 1, got 0/);
  });
});
