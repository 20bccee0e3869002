/**
 * Time, injected. The queue, backoff, leader election and event aggregation read time only
 * through a Clock so tests can drive them with FakeClock instead of waiting.
 */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds, monotonic enough for durations (Date.now in RealClock). */
  now(): number;
  setTimer(ms: number, fn: () => void): Timer;
}

export const realClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const handle = setTimeout(fn, Math.max(0, ms));
    return { cancel: () => clearTimeout(handle) };
  },
};

/** Resolves after `ms` on `clock`, or rejects with the signal's reason when aborted. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      timer.cancel();
      reject(signal?.reason);
    };
    const timer = clock.setTimer(ms, () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    });
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

interface FakeTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/** A clock that moves only when told to. Timers fire in time order during advance(). */
export class FakeClock implements Clock {
  #now: number;
  #seq = 0;
  #timers: FakeTimer[] = [];

  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimer(ms: number, fn: () => void): Timer {
    const timer: FakeTimer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn, cancelled: false };
    this.#timers.push(timer);
    return {
      cancel: () => {
        timer.cancelled = true;
      },
    };
  }

  /** Number of timers not yet fired or cancelled. */
  get pendingTimers(): number {
    return this.#timers.filter((t) => !t.cancelled).length;
  }

  /** Time of the next pending timer, if any. */
  nextTimerAt(): number | undefined {
    let best: number | undefined;
    for (const t of this.#timers) if (!t.cancelled && (best === undefined || t.at < best)) best = t.at;
    return best;
  }

  /**
   * Moves time forward by `ms`, firing due timers in order. Awaits a macrotask turn after each
   * timer so promise chains started by it settle before the next fires.
   */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      const next = this.#popDue(target);
      if (!next) break;
      this.#now = next.at;
      next.fn();
      await settle();
    }
    this.#now = target;
    await settle();
  }

  #popDue(target: number): FakeTimer | undefined {
    let best: FakeTimer | undefined;
    for (const t of this.#timers) {
      if (t.cancelled || t.at > target) continue;
      if (!best || t.at < best.at || (t.at === best.at && t.seq < best.seq)) best = t;
    }
    if (best) this.#timers = this.#timers.filter((t) => t !== best);
    return best;
  }
}

/** Lets pending promise callbacks run (one macrotask turn). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
