import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JitterBackoff } from "../../../src/runtime/backoff.ts";
import type { ListResult, WatchOptions } from "../../../src/runtime/client.ts";
import { WatchInactivityError } from "../../../src/runtime/client.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { ApiError } from "../../../src/runtime/errors.ts";
import type { KubeObject, WatchEvent } from "../../../src/runtime/types.ts";
import {
  nextStateAfterError,
  retryDelay,
  type WatcherEvent,
  type WatcherState,
  type WatchSource,
  watchErrorLog,
  watcher,
} from "../../../src/runtime/watcher.ts";

const obj = (name: string, rv: string): KubeObject => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { namespace: "ns", name, resourceVersion: rv },
});

type ListStep = ListResult<KubeObject> | ApiError;
type WatchStep = (WatchEvent | Error)[];

/**
 * A scripted list/watch source: each call takes the next scripted answer and records its
 * arguments. Not an API server: it only replays what a test tells it.
 */
function scripted(lists: ListStep[], watches: WatchStep[]) {
  const calls = { lists: [] as { continue?: string }[], watches: [] as WatchOptions[] };
  const source: WatchSource = {
    async list(opts) {
      calls.lists.push(opts.continue ? { continue: opts.continue } : {});
      const step = lists.shift();
      if (!step) throw new Error("script: no more lists");
      if (step instanceof Error) throw step;
      return step;
    },
    async *watch(opts, signal) {
      calls.watches.push(opts);
      const step = watches.shift();
      if (!step) {
        // Out of script: hang until aborted, like an idle watch.
        await new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason)));
        return;
      }
      for (const e of step) {
        if (e instanceof Error) throw e;
        yield e;
      }
    },
  };
  return { source, calls };
}

async function take(gen: AsyncGenerator<WatcherEvent>, n: number, clock?: FakeClock): Promise<string[]> {
  const out: string[] = [];
  const it = gen[Symbol.asyncIterator]();
  while (out.length < n) {
    const p = it.next();
    // Let backoff timers on the fake clock fire while waiting.
    let settled = false;
    void p.finally(() => {
      settled = true;
    });
    for (let spins = 0; !settled && clock; spins++) {
      if (spins > 1000) throw new Error(`watcher produced only ${out.length} of ${n} events`);
      await settle();
      if (!settled && clock.nextTimerAt() !== undefined)
        await clock.advance(clock.nextTimerAt()! - clock.now());
    }
    const r = await p;
    if (r.done) break;
    const e = r.value;
    out.push(
      "object" in e
        ? `${e.type}:${e.object.metadata.name}@${e.object.metadata.resourceVersion}`
        : e.type === "initDone"
          ? `initDone@${e.resourceVersion}`
          : e.type,
    );
  }
  return out;
}

const noJitter = () => new JitterBackoff({ random: () => 0.5 });

describe("watcher", () => {
  it("pages the initial list, then watches from its resourceVersion with bookmarks", async () => {
    const { source, calls } = scripted(
      [
        { items: [obj("a", "1"), obj("b", "2")], resourceVersion: "", continue: "tok" },
        { items: [obj("c", "3")], resourceVersion: "10" },
      ],
      [
        [
          { type: "ADDED", object: obj("d", "11") },
          { type: "BOOKMARK", object: obj("", "15") },
        ],
      ],
    );
    const ac = new AbortController();
    const events = await take(watcher(source, { signal: ac.signal, pageSize: 2 }), 6);
    ac.abort();
    assert.deepEqual(events, [
      "init",
      "initApply:a@1",
      "initApply:b@2",
      "initApply:c@3",
      "initDone@10",
      "apply:d@11",
    ]);
    assert.deepEqual(calls.lists, [{}, { continue: "tok" }]);
    assert.equal(calls.watches[0]?.resourceVersion, "10");
    assert.equal(calls.watches[0]?.allowWatchBookmarks, true);
  });

  it("resumes from the last seen resourceVersion (bookmark included) after the stream ends or drops", async () => {
    const clock = new FakeClock();
    const { source, calls } = scripted(
      [{ items: [], resourceVersion: "5" }],
      [
        [
          { type: "ADDED", object: obj("a", "6") },
          { type: "BOOKMARK", object: obj("", "9") },
        ],
        [{ type: "MODIFIED", object: obj("a", "12") }, new Error("ECONNRESET")],
        [new WatchInactivityError(1000)],
        [{ type: "DELETED", object: obj("a", "13") }],
      ],
    );
    const ac = new AbortController();
    const types: string[] = [];
    const onEvent = (type: string) => types.push(type);
    const events = await take(
      watcher(source, { signal: ac.signal, clock, backoff: noJitter(), onEvent }),
      5,
      clock,
    );
    ac.abort();
    assert.deepEqual(events, ["init", "initDone@5", "apply:a@6", "apply:a@12", "delete:a@13"]);
    assert.deepEqual(
      types,
      ["ADDED", "BOOKMARK", "MODIFIED", "DELETED"],
      "onEvent: every watch event, bookmarks too",
    );
    assert.deepEqual(
      calls.watches.map((w) => w.resourceVersion),
      ["5", "9", "12", "12"],
    );
    assert.equal(calls.lists.length, 1, "no relist for drops");
  });

  it("relists on 410 Gone, from a watch ERROR event or a list with an expired continue token", async () => {
    const gone = new ApiError(410, "too old resource version", { reason: "Expired" });
    const { source, calls } = scripted(
      [
        { items: [obj("a", "1")], resourceVersion: "", continue: "t1" },
        gone,
        { items: [obj("a", "1")], resourceVersion: "3" },
        { items: [obj("b", "30")], resourceVersion: "31" },
      ],
      [[{ type: "ADDED", object: obj("x", "4") }, gone]],
    );
    const ac = new AbortController();
    const events = await take(watcher(source, { signal: ac.signal }), 9);
    ac.abort();
    assert.deepEqual(events, [
      "init",
      "initApply:a@1",
      "init",
      "initApply:a@1",
      "initDone@3",
      "apply:x@4",
      "init",
      "initApply:b@30",
      "initDone@31",
    ]);
    assert.deepEqual(calls.lists, [{}, { continue: "t1" }, {}, {}]);
  });

  it("waits Retry-After on 429 and backs off with growing delays on other errors", async () => {
    const clock = new FakeClock();
    const errors: { state: string; wait: number }[] = [];
    const { source } = scripted(
      [
        new ApiError(429, "slow down", { retryAfterSeconds: 7 }),
        new ApiError(500, "boom"),
        new ApiError(503, "boom"),
        { items: [], resourceVersion: "1" },
      ],
      [],
    );
    const ac = new AbortController();
    const events = await take(
      watcher(source, {
        signal: ac.signal,
        clock,
        backoff: noJitter(),
        onError: (_e, s: WatcherState, wait) => errors.push({ state: s.kind, wait }),
      }),
      2,
      clock,
    );
    ac.abort();
    assert.deepEqual(events, ["init", "initDone@1"]);
    assert.deepEqual(errors, [
      { state: "listing", wait: 7000 },
      { state: "listing", wait: 800 },
      { state: "listing", wait: 1600 },
    ]);
    assert.equal(clock.now(), 7000 + 800 + 1600);
  });

  it("stops when aborted, also while waiting", async () => {
    const clock = new FakeClock();
    const { source } = scripted([new ApiError(500, "x")], []);
    const ac = new AbortController();
    const gen = watcher(source, { signal: ac.signal, clock });
    assert.equal((await gen.next()).value?.type, "init");
    const next = gen.next();
    await settle();
    ac.abort();
    assert.equal((await next).done, true);
  });
});

describe("watcher state transitions", () => {
  it("410 always relists; other errors keep or resume the state", () => {
    const gone = new ApiError(410, "gone");
    assert.deepEqual(nextStateAfterError({ kind: "watching", resourceVersion: "5" }, gone), {
      kind: "empty",
    });
    assert.deepEqual(nextStateAfterError({ kind: "listing", continue: "t" }, gone), { kind: "empty" });
    assert.deepEqual(nextStateAfterError({ kind: "watching", resourceVersion: "5" }, new Error("x")), {
      kind: "listed",
      resourceVersion: "5",
    });
    assert.deepEqual(nextStateAfterError({ kind: "listing", continue: "t" }, new Error("x")), {
      kind: "listing",
      continue: "t",
    });
  });

  it("reconnect delays grow from 0.8 s to a 30 s cap, with jitter inside those bounds", () => {
    const b = new JitterBackoff({ random: () => 0.5 });
    const seq = Array.from({ length: 8 }, () => retryDelay(new Error("x"), b));
    assert.deepEqual(seq, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    for (const r of [0, 0.999]) {
      const j = new JitterBackoff({ random: () => r });
      for (let i = 0; i < 10; i++) {
        const d = j.next();
        assert.ok(d >= 800 && d <= 30000, `delay ${d} within [800, 30000]`);
      }
    }
    assert.equal(retryDelay(new WatchInactivityError(5), b), 0);
    assert.equal(retryDelay(new ApiError(410, "gone"), b), 0);
  });

  it("logs a 410 expiry at debug, a silent watch or a 429 with Retry-After at info, every other error as a warning", () => {
    const expired = new ApiError(410, "watch /api/v1/pods: 410 Expired too old resource version", {
      reason: "Expired",
    });
    assert.equal(watchErrorLog(expired).level, "debug");
    assert.match(watchErrorLog(expired).message, /relisting/);
    assert.equal(watchErrorLog(new WatchInactivityError(150_000)).level, "info");
    const initializing = new ApiError(429, "storage is (re)initializing", { retryAfterSeconds: 1 });
    assert.equal(watchErrorLog(initializing).level, "info");
    for (const err of [
      new ApiError(403, "forbidden"),
      new ApiError(500, "boom"),
      new ApiError(429, "too many requests, no Retry-After"),
      new Error("ECONNREFUSED"),
    ]) {
      assert.equal(watchErrorLog(err).level, "warn", String(err));
    }
  });
});
