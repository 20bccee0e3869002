import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { ApiError } from "../../../src/runtime/errors.ts";
import {
  type Acquisition,
  LeaderElector,
  type Lease,
  type LeaseClient,
  microTime,
} from "../../../src/runtime/leader.ts";

/**
 * One Lease in memory with the one API rule leader election relies on (writes must carry
 * the current resourceVersion, else 409). Candidates in `cut` cannot reach it.
 */
class LeaseCell {
  lease: Lease | undefined;
  rv = 0;
  readonly cut = new Set<string>();
  /** Candidates whose requests never answer (a half-open connection); they do see aborts. */
  readonly hung = new Set<string>();
  /** Requests that were still in flight when their signal aborted. */
  aborted = 0;
  /** Writes that reached the lease, by whom and when, to find a write after a deadline. */
  readonly writes: { who: string; at: number }[] = [];
  readonly log: string[] = [];
  clock: FakeClock | undefined;

  client(who: string): LeaseClient {
    const check = async (signal?: AbortSignal) => {
      if (this.cut.has(who)) throw new Error(`${who}: connection refused`);
      if (!this.hung.has(who)) return;
      await new Promise<never>((_, reject) =>
        signal?.addEventListener("abort", () => {
          this.aborted++;
          reject(signal.reason);
        }),
      );
    };
    const store = (l: Lease) => {
      this.writes.push({ who, at: this.clock?.now() ?? 0 });
      this.lease = { ...structuredClone(l), metadata: { ...l.metadata, resourceVersion: String(++this.rv) } };
      return structuredClone(this.lease);
    };
    return {
      get: async (signal) => {
        await check(signal);
        return this.lease && structuredClone(this.lease);
      },
      create: async (l, signal) => {
        await check(signal);
        if (this.lease) throw new ApiError(409, "exists");
        return store(l);
      },
      update: async (l, signal) => {
        await check(signal);
        if (l.metadata.resourceVersion !== this.lease?.metadata.resourceVersion)
          throw new ApiError(409, "conflict");
        return store(l);
      },
    };
  }
}

function candidate(cell: LeaseCell, id: string, clock: FakeClock) {
  const elector = new LeaderElector(cell.client(id), { name: "l", namespace: "ns", identity: id }, clock);
  const state = {
    leading: false,
    result: undefined as string | undefined,
    acquisition: undefined as Acquisition | undefined,
  };
  const ac = new AbortController();
  const done = elector
    .run(ac.signal, {
      onStartedLeading: (s, acquisition) => {
        state.leading = true;
        state.acquisition = acquisition;
        cell.log.push(`${id} leads @${clock.now()}`);
        s.addEventListener("abort", () => {
          state.leading = false;
          cell.log.push(`${id} stops @${clock.now()}`);
        });
      },
    })
    .then((r) => {
      state.result = r;
    });
  return { elector, state, cancel: () => ac.abort(), done };
}

/** Advances the fake clock in small steps so every elector's timers interleave. */
async function run(clock: FakeClock, ms: number, until?: () => boolean): Promise<number> {
  const start = clock.now();
  while (clock.now() - start < ms && !until?.()) await clock.advance(100);
  return clock.now() - start;
}

/** Two candidates on one lease: a starts first (and so leads), b a moment later. */
async function pair(start: number) {
  const clock = new FakeClock(start);
  const cell = new LeaseCell();
  cell.clock = clock;
  const a = candidate(cell, "a", clock);
  await settle();
  const b = candidate(cell, "b", clock);
  return { clock, cell, a, b };
}

/** Cancels the candidates' runs and waits for them to end. */
async function stop(...candidates: ReturnType<typeof candidate>[]): Promise<void> {
  for (const c of candidates) c.cancel();
  await Promise.all(candidates.map((c) => c.done));
}

const LEASE = 15_000;
const RETRY = 2_000;

describe("LeaderElector", () => {
  it("exactly one of two candidates leads; after the leader dies the other leads within lease + 1 retry", async () => {
    const { clock, cell, a, b } = await pair(1_000_000);
    await run(clock, 60_000);
    assert.equal(a.state.leading, true);
    assert.equal(b.state.leading, false);
    assert.equal(cell.lease?.spec?.holderIdentity, "a");
    assert.deepEqual(cell.log, ["a leads @1000000"]);
    cell.cut.add("a"); // a's process is gone: it renews no more
    const took = await run(clock, 60_000, () => b.state.leading);
    assert.equal(b.state.leading, true);
    assert.ok(took > LEASE - RETRY, `b waited for the lease to expire (took ${took} ms)`);
    // The fake clock advances in 100 ms steps: a deadline is seen up to one step late.
    assert.ok(took <= LEASE + RETRY + 100, `b took over within lease + 1 retry (took ${took} ms)`);
    assert.equal(cell.lease?.spec?.leaseTransitions, 1);
    await stop(a, b);
  });

  // b polls out of step with a's renewals (it starts `phase` ms after a) and a dies `cut` ms into
  // one of its periods: b sees a's last renewal up to one retry late, and must not add a second
  // retry by polling past the expiry.
  const outOfStep: [phase: number, cut: number][] = [
    [1900, 0],
    [1500, 0],
    [1100, 100],
    [900, 700],
    [300, 0],
  ];
  for (const [phase, cut] of outOfStep)
    it(`a takeover stays within lease + 1 retry (b ${phase} ms out of step, a dies ${cut} ms into a period)`, async () => {
      const clock = new FakeClock(0);
      const cell = new LeaseCell();
      cell.clock = clock;
      const a = candidate(cell, "a", clock);
      await run(clock, phase);
      const b = candidate(cell, "b", clock);
      await run(clock, 20_000 - phase + cut);
      cell.cut.add("a");
      const took = await run(clock, 60_000, () => b.state.leading);
      assert.equal(b.state.leading, true);
      assert.ok(took <= LEASE + RETRY, `b took over within lease + 1 retry (took ${took} ms)`);
      await stop(a, b);
    });

  it("says how it won: the record it waited out, when that expired, and how late its timer woke", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 10_000);
    assert.deepEqual(
      a.state.acquisition,
      {
        from: "",
        attemptAt: 0,
        wakeLateMs: 0,
        attempts: [{ at: 0, wakeLateMs: 0, readMs: 0, outcome: "won" }],
      },
      "a created the lease",
    );
    const lastRenewal = cell.writes.filter((w) => w.who === "a").at(-1)!.at;
    cell.cut.add("a");
    await run(clock, 60_000, () => b.state.leading);
    const { from, observedAt, expiredAt, attemptAt, wakeLateMs } = b.state.acquisition!;
    assert.equal(from, "a");
    assert.ok(
      observedAt! >= lastRenewal && observedAt! <= lastRenewal + RETRY,
      `b saw a's last renewal (written at ${lastRenewal}) within a retry period: at ${observedAt}`,
    );
    assert.equal(expiredAt, observedAt! + LEASE);
    // The fake clock advances in 100 ms steps: a timer fires up to one step late.
    assert.ok(
      attemptAt >= expiredAt! && attemptAt <= expiredAt! + 100,
      `attempt ${attemptAt}, expiry ${expiredAt}`,
    );
    assert.ok(wakeLateMs >= 0 && wakeLateMs < 100, `woke ${wakeLateMs} ms late`);
    assert.equal(cell.lease?.spec?.acquireTime, microTime(attemptAt), "attemptAt is the acquireTime written");
    // Its account of the campaign: the attempt that saw the last renewal, those that waited it
    // out, the winning one; each a retry period after the one before, but the last.
    const { attempts } = b.state.acquisition!;
    assert.equal(attempts.length, 12, "the last twelve attempts");
    assert.deepEqual(attempts.at(-1), { at: attemptAt, wakeLateMs, readMs: 0, outcome: "won" });
    const sawIt = attempts.findIndex((attempt) => attempt.at === observedAt);
    assert.equal(attempts[sawIt]?.outcome, "new record", "the attempt that saw the last renewal");
    assert.deepEqual(
      attempts.slice(sawIt + 1, -1).map((attempt) => attempt.outcome),
      Array(attempts.length - sawIt - 2).fill("held"),
      "the attempts that waited it out saw it unchanged",
    );
    assert.deepEqual(
      attempts.slice(0, sawIt).map((attempt) => attempt.outcome),
      Array(sawIt).fill("new record"),
      "before, each saw a renewal",
    );
    for (const [i, attempt] of attempts.slice(1, -1).entries())
      assert.equal(
        attempt.at - attempts[i]!.at,
        RETRY + attempt.wakeLateMs,
        `attempt ${i + 1} a period after`,
      );
    await stop(a, b);
  });

  it("counts a failed read and a read that never answers among its attempts", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 4_000);
    cell.cut.add("b");
    await run(clock, 3_000);
    cell.cut.delete("b");
    cell.hung.add("b");
    await run(clock, 11_000);
    cell.hung.delete("b");
    cell.cut.add("a");
    await run(clock, 60_000, () => b.state.leading);
    const outcomes = b.state.acquisition!.attempts.map((attempt) => attempt.outcome);
    assert.ok(outcomes.includes("failed") && outcomes.includes("timed out"), outcomes.join(", "));
    for (const attempt of b.state.acquisition!.attempts.filter((x) =>
      ["failed", "timed out"].includes(x.outcome),
    ))
      assert.equal(attempt.readMs, undefined, `${attempt.outcome}: no read to time`);
    await stop(a, b);
  });

  it("a leader that cannot renew stops before anyone else may lead (renewDeadline < lease)", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 10_000);
    cell.cut.add("a"); // partitioned, but alive
    await run(clock, 60_000, () => b.state.leading);
    await a.done;
    assert.equal(a.state.result, "lost");
    const stops = cell.log.findIndex((l) => l.startsWith("a stops"));
    const leads = cell.log.findIndex((l) => l.startsWith("b leads"));
    assert.ok(stops >= 0 && leads > stops, `a stopped before b led: ${cell.log.join(", ")}`);
    b.cancel();
    await b.done;
  });

  it("a renewal that hangs is abandoned at the renew deadline: the leader stops before the other leads", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 10_000);
    assert.equal(a.state.leading, true);
    const lastWrite = cell.writes.filter((w) => w.who === "a").at(-1)?.at ?? 0;
    cell.hung.add("a"); // its connection stays open and never answers
    await run(clock, 60_000, () => b.state.leading);
    await a.done;
    assert.equal(a.state.result, "lost", "the hung leader gave up instead of waiting for ever");
    assert.ok(cell.aborted > 0, "the hung request was aborted, not left open");
    const stops = cell.log.findIndex((l) => l.startsWith("a stops"));
    const leads = cell.log.findIndex((l) => l.startsWith("b leads"));
    assert.ok(stops >= 0 && leads > stops, `a stopped before b led: ${cell.log.join(", ")}`);
    const aStopped = Number(cell.log[stops]?.split("@")[1]);
    assert.ok(
      aStopped <= lastWrite + 10_000 + RETRY,
      `a stopped by its renew deadline (at ${aStopped}, last renewal ${lastWrite})`,
    );
    const bLed = Number(cell.log[leads]?.split("@")[1]);
    assert.ok(
      bLed - aStopped >= LEASE - 10_000 - RETRY,
      `a gap between the two leaderships (${aStopped} -> ${bLed})`,
    );
    assert.deepEqual(
      cell.writes.filter((w) => w.who === "a" && w.at > aStopped),
      [],
      "no write from a after it stopped",
    );
    b.cancel();
    await b.done;
  });

  it("a release that hangs on cancel does not hold the shutdown", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 10_000);
    cell.hung.add("a");
    a.cancel();
    await run(clock, 20_000, () => a.state.result !== undefined);
    assert.equal(a.state.result, "cancelled");
    b.cancel();
    await b.done;
  });

  it("releases the lease on cancel so a successor leads at its next retry, not after the lease", async () => {
    const { clock, cell, a, b } = await pair(0);
    await run(clock, 10_000);
    a.cancel();
    await a.done;
    assert.equal(a.state.result, "cancelled");
    assert.equal(cell.lease?.spec?.holderIdentity, null);
    const took = await run(clock, 60_000, () => b.state.leading);
    assert.ok(took <= RETRY + 100, `b led ${took} ms after the release`);
    assert.equal(b.state.acquisition?.from, "", "a released lease has no holder to wait out");
    assert.equal(b.state.acquisition?.observedAt, undefined);
    b.cancel();
    await b.done;
  });

  it("rejects inconsistent durations and formats MicroTime with 6 digits", () => {
    assert.throws(
      () =>
        new LeaderElector(new LeaseCell().client("x"), { name: "l", namespace: "n", leaseDurationMs: 5000 }),
      /leaseDurationMs \(5000\) must be greater than renewDeadlineMs \(10000\)/,
    );
    assert.equal(microTime(Date.UTC(2026, 0, 2, 3, 4, 5, 678)), "2026-01-02T03:04:05.678000Z");
  });
});
