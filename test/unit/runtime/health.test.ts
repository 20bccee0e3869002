import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JitterBackoff } from "../../../src/runtime/backoff.ts";
import type { ListResult, WatchOptions } from "../../../src/runtime/client.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { ApiError } from "../../../src/runtime/errors.ts";
import { describeError, WatchHealth, watchHealthCheck } from "../../../src/runtime/health.ts";
import { Informer } from "../../../src/runtime/informer.ts";
import { builtinKinds } from "../../../src/runtime/kinds.ts";
import type { KubeObject, WatchEvent } from "../../../src/runtime/types.ts";
import { type WatchSource, watcher } from "../../../src/runtime/watcher.ts";
import { obj } from "./scripted-source.ts";

/** What undici throws when nothing listens on the API server's port. */
function refused(): Error {
  return new TypeError("fetch failed", {
    cause: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6443"), { code: "ECONNREFUSED" }),
  });
}

describe("WatchHealth", () => {
  it("turns unhealthy only once errors went on for the grace period, and recovers at once", async () => {
    const clock = new FakeClock(1_000);
    const h = new WatchHealth(clock, 10_000);
    assert.deepEqual(h.status(), { healthy: true });
    h.failed(refused());
    await clock.advance(9_999);
    h.failed(refused());
    assert.deepEqual(h.status(), { healthy: true }, "inside the grace period");
    await clock.advance(1);
    assert.deepEqual(h.status(), {
      healthy: false,
      failingForMs: 10_000,
      errors: 2,
      lastError: "fetch failed (ECONNREFUSED)",
    });
    h.progress();
    assert.deepEqual(h.status(), { healthy: true }, "one answer from the API server is enough");
  });

  it("a quiet watch stays healthy: only errors start the clock, at the first error", async () => {
    const clock = new FakeClock();
    const h = new WatchHealth(clock, 10_000);
    h.progress();
    await clock.advance(600_000); // ten quiet minutes
    assert.equal(h.status().healthy, true);
    h.failed(new ApiError(503, "unavailable"));
    assert.equal(h.status().healthy, true, "the grace period starts at the first error, not the last answer");
    await clock.advance(5_000);
    assert.equal(h.status().healthy, true);
    await clock.advance(5_000);
    assert.equal(h.status().healthy, false);
  });

  it("an answer between errors restarts the grace period (errors then count from 1)", async () => {
    const clock = new FakeClock();
    const h = new WatchHealth(clock, 10_000);
    h.failed(refused());
    await clock.advance(8_000);
    h.progress();
    h.failed(new ApiError(500, "boom"));
    await clock.advance(8_000);
    assert.equal(h.status().healthy, true);
    await clock.advance(2_000);
    const s = h.status();
    assert.ok(!s.healthy);
    assert.equal(s.errors, 1);
    assert.equal(s.lastError, "boom");
    assert.equal(s.failingForMs, 10_000);
  });

  it("Infinity never reports; a negative or NaN grace period is refused", async () => {
    const clock = new FakeClock();
    const h = new WatchHealth(clock, Number.POSITIVE_INFINITY);
    h.failed(refused());
    await clock.advance(1e9);
    assert.equal(h.status().healthy, true);
    assert.throws(() => new WatchHealth(clock, -1), RangeError);
    assert.throws(() => new WatchHealth(clock, Number.NaN), RangeError);
  });
});

describe("describeError", () => {
  it("adds the socket error code undici hides behind 'fetch failed'", () => {
    assert.equal(describeError(refused()), "fetch failed (ECONNREFUSED)");
    assert.equal(describeError(new Error("first line\nsecond")), "first line");
    assert.equal(describeError("plain"), "plain");
  });
});

describe("watchHealthCheck", () => {
  it("passes when all are healthy, else names every failing informer with its last error", () => {
    const healthy = { name: "ConfigMap.v1", health: () => ({ healthy: true }) as const };
    assert.deepEqual(watchHealthCheck([healthy]), { ok: true });
    const failing = {
      name: "MLModel.v1alpha1.serving.mlmodel.dev ns=a",
      health: () =>
        ({
          healthy: false,
          failingForMs: 12_345,
          errors: 4,
          lastError: "fetch failed (ECONNREFUSED)",
        }) as const,
    };
    const r = watchHealthCheck([healthy, failing]);
    assert.ok(!r.ok);
    assert.match(
      r.reason,
      /MLModel\.v1alpha1\.serving\.mlmodel\.dev ns=a: 4 list\/watch errors in 12\.3 s, last: fetch failed \(ECONNREFUSED\)/,
    );
    assert.doesNotMatch(r.reason, /ConfigMap/);
  });
});

/**
 * A source whose API server can be switched off: while down, every list and watch throws
 * ECONNREFUSED, and going down drops the open watch (ECONNRESET); while up, the list returns
 * one object and a watch opens (onOpen) and idles. Not an API server: it replays a switch.
 */
class SwitchableSource implements WatchSource {
  down = false;
  lists = 0;
  #drop: ((err: Error) => void) | undefined;
  goDown(): void {
    this.down = true;
    this.#drop?.(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
  }
  async list(): Promise<ListResult<KubeObject>> {
    this.lists++;
    if (this.down) throw refused();
    return { items: [obj("ConfigMap", "a", "x", "1")], resourceVersion: "1" };
  }
  async *watch(opts: WatchOptions, signal: AbortSignal): AsyncGenerator<WatchEvent> {
    if (this.down) throw refused();
    opts.onOpen?.();
    await new Promise<void>((resolve, reject) => {
      this.#drop = reject;
      signal.addEventListener("abort", () => resolve(), { once: true });
    });
  }
}

/** Advances the fake clock in 100 ms steps, letting the watcher's promises settle between. */
async function run(clock: FakeClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 100) await clock.advance(100);
}

describe("Informer health, driven by the watcher", () => {
  it("an API server outage longer than the grace period makes it unhealthy; the next answer heals it", async () => {
    const clock = new FakeClock();
    const source = new SwitchableSource();
    source.down = true;
    const informer = new Informer(source, builtinKinds.ConfigMap, {
      healthGracePeriodMs: 10_000,
      watcher: { clock, backoff: new JitterBackoff({ random: () => 0.5 }) },
    });
    const ac = new AbortController();
    const done = informer.run(ac.signal);
    await run(clock, 9_000);
    assert.equal(informer.health().healthy, true, "9 s of refused lists: still inside the grace period");
    assert.ok(source.lists >= 3, `the watcher kept retrying (${source.lists} lists)`);
    await run(clock, 2_000);
    const h = informer.health();
    assert.ok(!h.healthy, "11 s of refused lists");
    assert.equal(h.lastError, "fetch failed (ECONNREFUSED)");
    assert.equal(informer.hasSynced(), false);

    source.down = false;
    // Backoff is at most 30 s; the first list after it heals the informer.
    for (let i = 0; i < 400 && !informer.hasSynced(); i++) await run(clock, 100);
    assert.equal(informer.hasSynced(), true);
    assert.equal(informer.health().healthy, true, "healthy again with the first successful list");

    // Synced and watching; the API server goes away again: the watch drops, resumes are refused.
    await run(clock, 60_000);
    assert.equal(informer.health().healthy, true, "a quiet open watch stays healthy");
    source.goDown();
    await run(clock, 9_000);
    assert.equal(informer.health().healthy, true);
    await run(clock, 2_000);
    assert.equal(informer.health().healthy, false, "11 s of refused watches");
    assert.equal(informer.hasSynced(), true, "still synced: that flag alone never showed the outage");
    const listsBefore = source.lists;
    source.down = false;
    for (let i = 0; i < 400 && !informer.health().healthy; i++) await run(clock, 100);
    assert.equal(informer.health().healthy, true, "the resumed watch opened: healthy, no relist needed");
    assert.equal(source.lists, listsBefore);
    ac.abort();
    await done;
  });

  it("a watch that opens counts as an answer even before any event (a quiet cluster recovers)", async () => {
    const clock = new FakeClock();
    let watchFails = 0;
    let opened = 0;
    const source: WatchSource = {
      list: async () => ({ items: [], resourceVersion: "5" }),
      async *watch(opts, signal) {
        if (watchFails > 0) {
          watchFails--;
          throw refused();
        }
        opened++;
        opts.onOpen?.();
        await new Promise<void>((resolve) =>
          signal.addEventListener("abort", () => resolve(), { once: true }),
        );
      },
    };
    watchFails = 8; // 0.8+1.6+3.2+6.4+12.8 s ... of backoff: well past 10 s
    const errors: string[] = [];
    const progress: number[] = [];
    const ac = new AbortController();
    const health = new WatchHealth(clock, 10_000);
    const events = watcher(source, {
      signal: ac.signal,
      clock,
      backoff: new JitterBackoff({ random: () => 0.5 }),
      onError: (err) => {
        errors.push(describeError(err));
        health.failed(err);
      },
      onProgress: () => {
        progress.push(clock.now());
        health.progress();
      },
    });
    const consume = (async () => {
      for await (const _ of events);
    })();
    let sawUnhealthy = false;
    for (let i = 0; i < 2_000 && opened === 0; i++) {
      await run(clock, 100);
      if (!health.status().healthy) sawUnhealthy = true;
    }
    await settle();
    assert.equal(opened, 1);
    assert.equal(errors.length, 8);
    assert.ok(sawUnhealthy, "unhealthy while the watch kept being refused");
    assert.equal(health.status().healthy, true, "the opened watch healed it, with no event at all");
    assert.equal(progress.length, 2, "one answer for the list page, one for the opened watch");
    ac.abort();
    await consume;
  });
});
