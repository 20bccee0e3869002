/**
 * "The API server answers again": one signal shared by the watchers of one Manager (one
 * client, one API server), so that when any of them hears from the server after an outage the
 * others stop sleeping off their connection failures and reconnect at once.
 *
 *   watcher A: ECONNREFUSED ─▶ wait(≤ 4 s) ─────────────────────────▶ woken ─▶ retry now
 *   watcher B: ECONNREFUSED ─▶ wait(≤ 4 s) ─▶ retry ─▶ answer ─▶ answered() ──┘
 *
 * Only waits after a connection-level failure (no HTTP answer at all) are wakeable: a watcher
 * waiting out a 429's Retry-After, a 5xx or a 403 was told something by the server, and an
 * answer to someone else changes nothing about that. A 404 for a missing CRD is never woken
 * either, so a busy cache cannot make a broken one poll on every event.
 *
 * Sharp edges: an answer that comes while a watcher's failing request is still in flight does
 * not shorten the wait it starts afterwards (that wait is capped at a few seconds anyway); and
 * every woken watcher reconnects at once (they resume watches, which is cheap; API Priority
 * and Fairness answers 429 if it is not).
 */
import type { Clock } from "./clock.ts";

export type WaitOutcome = "elapsed" | "woken";

export class Reachability {
  readonly #waiters = new Set<() => void>();
  readonly #onWake: ((woken: number) => void) | undefined;
  #wakes = 0;

  /** `onWake`: told how many waits one answer cut short (for a log line). */
  constructor(opts: { onWake?: (woken: number) => void } = {}) {
    this.#onWake = opts.onWake;
  }

  /** The API server answered (any HTTP status, a watch event): wakes every waiter. */
  answered(): void {
    if (this.#waiters.size === 0) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    this.#wakes += waiters.length;
    for (const wake of waiters) wake();
    this.#onWake?.(waiters.length);
  }

  /**
   * Waits `ms` on `clock`, or until answered() is called, whichever comes first. Rejects with
   * the signal's reason when `signal` aborts.
   */
  wait(clock: Clock, ms: number, signal?: AbortSignal): Promise<WaitOutcome> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const finish = () => {
        this.#waiters.delete(wake);
        signal?.removeEventListener("abort", onAbort);
        timer.cancel();
      };
      const wake = () => {
        finish();
        resolve("woken");
      };
      const onAbort = () => {
        finish();
        reject(signal?.reason);
      };
      const timer = clock.setTimer(ms, () => {
        finish();
        resolve("elapsed");
      });
      this.#waiters.add(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Watchers waiting now. */
  get waiting(): number {
    return this.#waiters.size;
  }

  /** Waits cut short by answered() so far. */
  get wakes(): number {
    return this.#wakes;
  }
}
