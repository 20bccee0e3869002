/**
 * Backoff schedules as small pure objects, so each schedule is tested by itself.
 */

/** Per-item exponential backoff (controller-runtime's default: 5 ms doubling to 1000 s). */
export class ItemBackoff {
  readonly baseMs: number;
  readonly maxMs: number;
  #failures = new Map<string, number>();

  constructor(opts: { baseMs?: number; maxMs?: number } = {}) {
    this.baseMs = opts.baseMs ?? 5;
    this.maxMs = opts.maxMs ?? 1_000_000;
    if (!(this.baseMs > 0)) throw new RangeError(`ItemBackoff.baseMs must be > 0, got ${this.baseMs}`);
    if (!(this.maxMs >= this.baseMs)) {
      throw new RangeError(`ItemBackoff.maxMs must be >= baseMs (${this.baseMs}), got ${this.maxMs}`);
    }
  }

  /** Records one more failure of `key` and returns the delay before its next try. */
  next(key: string): number {
    const n = this.#failures.get(key) ?? 0;
    this.#failures.set(key, n + 1);
    // 2^n overflows to Infinity for large n; min() keeps the cap.
    return Math.min(this.maxMs, this.baseMs * 2 ** n);
  }

  failures(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  forget(key: string): void {
    this.#failures.delete(key);
  }
}

/**
 * Reconnect backoff for watches (kube-rs default: 0.8 s growing to 30 s, with jitter so many
 * watchers cut at once do not reconnect in lockstep).
 */
export class JitterBackoff {
  readonly minMs: number;
  readonly maxMs: number;
  readonly factor: number;
  readonly random: () => number;
  #attempt = 0;

  constructor(opts: { minMs?: number; maxMs?: number; factor?: number; random?: () => number } = {}) {
    this.minMs = opts.minMs ?? 800;
    this.maxMs = opts.maxMs ?? 30_000;
    this.factor = opts.factor ?? 2;
    this.random = opts.random ?? Math.random;
  }

  /** Next delay: min*factor^attempt, spread by +-25% jitter, always within [min, max]. */
  next(): number {
    const raw = Math.min(this.maxMs, this.minMs * this.factor ** this.#attempt);
    this.#attempt++;
    const jittered = raw * (0.75 + 0.5 * this.random());
    return Math.min(this.maxMs, Math.max(this.minMs, jittered));
  }

  reset(): void {
    this.#attempt = 0;
  }
}
