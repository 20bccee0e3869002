import assert from "node:assert/strict";
import { createServer } from "node:net";
import { describe, it } from "node:test";
import { JitterBackoff } from "../../../src/runtime/backoff.ts";
import { WatchInactivityError } from "../../../src/runtime/client.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { ApiError, isUnreachable } from "../../../src/runtime/errors.ts";
import { Reachability } from "../../../src/runtime/reachability.ts";
import {
  defaultUnreachableMaxMs,
  retryDelay,
  type WatchSource,
  watcher,
} from "../../../src/runtime/watcher.ts";

/** A real undici error for a refused connection: fetch to a port nobody listens on. */
async function refusedError(): Promise<unknown> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return fetch(`http://127.0.0.1:${port}/`).then(
    () => assert.fail("a closed port answered"),
    (err: unknown) => err,
  );
}

/** A real undici error for a connection cut in the middle of a streamed body (a stopped server). */
async function cutMidStreamError(): Promise<unknown> {
  const server = createServer((socket) => {
    socket.once("data", () => {
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
      setImmediate(() => socket.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  try {
    const res = await fetch(`http://127.0.0.1:${port}/`);
    for await (const _ of res.body ?? []) {
      // drain until the cut
    }
    return assert.fail("the body ended cleanly");
  } catch (err) {
    return err;
  } finally {
    server.close();
  }
}

describe("isUnreachable", () => {
  it("is true for real refused and cut connections, false for answers and other errors", async () => {
    assert.equal(isUnreachable(await refusedError()), true, "fetch failed (ECONNREFUSED)");
    assert.equal(isUnreachable(await cutMidStreamError()), true, "terminated (other side closed)");
    assert.equal(
      isUnreachable(new ApiError(429, "storage is (re)initializing", { retryAfterSeconds: 1 })),
      false,
    );
    assert.equal(isUnreachable(new ApiError(503, "unavailable")), false);
    assert.equal(isUnreachable(new WatchInactivityError(1000)), false);
    assert.equal(isUnreachable(new Error("x")), false);
    assert.equal(isUnreachable("ECONNREFUSED"), false);
  });
});

describe("retryDelay by cause", () => {
  it("connection failures cap at a few seconds on their own counter; answered errors keep the 30 s cap", async () => {
    const refused = await refusedError();
    const answered = new JitterBackoff({ random: () => 0.5 });
    const unreachable = new JitterBackoff({ maxMs: defaultUnreachableMaxMs, random: () => 0.5 });
    const away = Array.from({ length: 8 }, () => retryDelay(refused, answered, unreachable));
    assert.deepEqual(away, [800, 1600, 3200, 4000, 4000, 4000, 4000, 4000]);
    // The long outage did not grow the backoff for errors the server answers: the first 5xx
    // after it starts at 0.8 s.
    const after = Array.from({ length: 7 }, () => retryDelay(new ApiError(503, "x"), answered, unreachable));
    assert.deepEqual(after, [800, 1600, 3200, 6400, 12800, 25600, 30000]);
  });

  it("429 waits exactly Retry-After (1 s while storage is (re)initializing), never 0, else backs off", () => {
    const b = new JitterBackoff({ random: () => 0.5 });
    const init = new ApiError(429, "storage is (re)initializing", { retryAfterSeconds: 1 });
    assert.deepEqual(
      Array.from({ length: 5 }, () => retryDelay(init, b)),
      [1000, 1000, 1000, 1000, 1000],
      "honoured every time, and it does not grow the backoff",
    );
    assert.equal(retryDelay(new ApiError(429, "x", { retryAfterSeconds: 0 }), b), 800, "no spin on 0");
    assert.equal(retryDelay(new ApiError(429, "x"), b), 800, "no Retry-After: the backoff");
    assert.equal(retryDelay(new ApiError(429, "x"), b), 1600);
  });
});

describe("Reachability", () => {
  it("a wait ends at its time, or when answered() comes first; aborts reject", async () => {
    const clock = new FakeClock();
    const told: number[] = [];
    const r = new Reachability({ onWake: (n) => told.push(n) });
    r.answered(); // nobody waiting: nothing happens, nothing is remembered
    const outcomes: string[] = [];
    void r.wait(clock, 1000).then((o) => outcomes.push(`a:${o}`));
    void r.wait(clock, 3000).then((o) => outcomes.push(`b:${o}`));
    const ac = new AbortController();
    const c = r.wait(clock, 3000, ac.signal).catch(() => outcomes.push("c:aborted"));
    assert.equal(r.waiting, 3);
    await clock.advance(1000);
    assert.deepEqual(outcomes, ["a:elapsed"]);
    ac.abort();
    await c;
    assert.equal(r.waiting, 1);
    r.answered();
    await settle();
    assert.deepEqual(outcomes, ["a:elapsed", "c:aborted", "b:woken"]);
    assert.equal(r.wakes, 1);
    assert.deepEqual(told, [1], "onWake only when a wait was cut short");
    assert.equal(clock.pendingTimers, 0, "woken and aborted waits cancel their timers");
    await assert.rejects(r.wait(clock, 10, AbortSignal.abort(new Error("gone"))), /gone/);
  });
});

/**
 * A list source whose answers a test flips between "refused" (a real refused-connection error)
 * and "answering"; it counts list calls. Watches hang until aborted.
 */
function switchable(refused: unknown) {
  const s = { up: false, lists: 0 };
  const source: WatchSource = {
    async list() {
      s.lists++;
      if (!s.up) throw refused;
      return { items: [], resourceVersion: "1" };
    },
    async *watch(_opts, signal) {
      await new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason)));
    },
  };
  return { s, source };
}

/** Lets the watchers' async chains run without moving the fake clock. */
async function spin(n = 20): Promise<void> {
  for (let i = 0; i < n; i++) await settle();
}

describe("watchers sharing a Reachability", () => {
  it("after a long refusal, one watcher's answer makes the others retry at once, not at their timers", async () => {
    const clock = new FakeClock();
    const reachability = new Reachability();
    const refused = await refusedError();
    const ac = new AbortController();
    const a = switchable(refused);
    const b = switchable(refused);
    const waits: Record<string, number[]> = { a: [], b: [] };
    const synced: string[] = [];
    const run = async (name: "a" | "b", source: WatchSource, random: number) => {
      const opts = {
        signal: ac.signal,
        clock,
        reachability,
        unreachableBackoff: new JitterBackoff({ maxMs: defaultUnreachableMaxMs, random: () => random }),
        onError: (_e: unknown, _s: unknown, wait: number) => waits[name]!.push(wait),
      };
      for await (const e of watcher(source, opts)) if (e.type === "initDone") synced.push(name);
    };
    const runs = [run("a", a.source, 0), run("b", b.source, 0.999)];
    // 60 s of refused connections: the waits never exceed the 4 s cap.
    for (let t = 0; t < 60_000; t += 500) {
      await spin();
      await clock.advance(500);
    }
    for (const w of [...waits["a"]!, ...waits["b"]!]) assert.ok(w <= defaultUnreachableMaxMs, `wait ${w}`);
    assert.ok(waits["a"]!.length >= 15 && waits["b"]!.length >= 15, JSON.stringify(waits));
    // The server comes back. The first watcher whose timer fires gets through; the other must
    // follow at once (woken by that answer), not when its own timer fires up to 4 s later.
    a.s.up = true;
    b.s.up = true;
    const before = { a: a.s.lists, b: b.s.lists };
    const firstAt = clock.nextTimerAt()!;
    await clock.advance(firstAt - clock.now());
    await spin();
    assert.deepEqual(synced.sort(), ["a", "b"], "both listed");
    assert.deepEqual({ a: a.s.lists, b: b.s.lists }, { a: before.a + 1, b: before.b + 1 }, "one try each");
    assert.equal(clock.now(), firstAt, "no time passed after the first answer");
    assert.ok(reachability.wakes >= 1);
    ac.abort();
    await Promise.allSettled(runs);
  });

  it("a watcher waiting out a 429 Retry-After or a 5xx is not woken by another's answer", async () => {
    const clock = new FakeClock();
    const reachability = new Reachability();
    const ac = new AbortController();
    let calls = 0;
    const throttled: WatchSource = {
      async list() {
        calls++;
        throw calls === 1 ? new ApiError(429, "slow down", { retryAfterSeconds: 5 }) : new ApiError(503, "x");
      },
      async *watch() {},
    };
    const it = watcher(throttled, { signal: ac.signal, clock, reachability })[Symbol.asyncIterator]();
    await it.next(); // init
    const pending = it.next();
    await spin();
    assert.equal(calls, 1);
    reachability.answered();
    await spin();
    assert.equal(calls, 1, "still waiting the 5 s the server asked for");
    await clock.advance(5000);
    await spin();
    assert.equal(calls, 2, "retried when Retry-After passed");
    reachability.answered();
    await spin();
    assert.equal(calls, 2, "a 5xx backoff is not cut short either");
    assert.equal(reachability.wakes, 0);
    ac.abort();
    await pending.catch(() => {});
  });
});
