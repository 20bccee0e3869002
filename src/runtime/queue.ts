/**
 * WorkQueue: keys, not events (controller-runtime's workqueue semantics).
 *
 * - Dedup: a key waiting in the queue is held once, however often it is added.
 * - Exclusivity: a key handed out by get() is "processing" until done(); adding it meanwhile
 *   marks it dirty and it is queued again at done(), so the reconcile sees the latest state
 *   and two reconciles of one key never overlap.
 * - Two lanes: keys from an informer's first list go to the low lane, live events (and a
 *   relist's differences, which are changes too) to the high lane, so thousands of startup
 *   keys do not delay a user's change. The low lane still gets one of every `lowLaneEvery`
 *   gets, so it cannot starve either.
 * - Delays: addAfter (requeueAfter) and addRateLimited (per-key exponential backoff) park the
 *   key until its time, on an injected Clock. The earliest pending time of a key wins;
 *   cancelAfter withdraws it.
 *
 * Invariant: a key is in at most one of {lanes, processing}; `dirty` holds keys in a lane
 * plus processing keys that must run again.
 */
import { ItemBackoff } from "./backoff.ts";
import { type Clock, realClock, type Timer } from "./clock.ts";
import { MinHeap } from "./heap.ts";

export type Priority = "high" | "low";

/** Hooks for metrics; all optional. Durations in seconds (Prometheus convention). */
export interface QueueMetrics {
  depth?(n: number): void;
  add?(): void;
  queueDuration?(seconds: number): void;
  workDuration?(seconds: number): void;
  retry?(): void;
}

export interface WorkQueueOptions {
  clock?: Clock;
  backoff?: ItemBackoff;
  metrics?: QueueMetrics;
  /** Serve one low-lane key after this many high-lane keys when both wait (default 10). */
  lowLaneEvery?: number;
}

export class WorkQueue {
  readonly #clock: Clock;
  readonly #backoff: ItemBackoff;
  readonly #metrics: QueueMetrics;
  readonly #lowLaneEvery: number;
  // Sets keep insertion order: FIFO with O(1) removal (for promotion low -> high).
  readonly #high = new Set<string>();
  readonly #low = new Set<string>();
  readonly #dirty = new Map<string, Priority>();
  readonly #processing = new Map<string, number>();
  readonly #addedAt = new Map<string, number>();
  // Delayed keys: the map holds each key's earliest time; the heap orders them (stale heap
  // entries, superseded by an earlier time, are skipped when popped).
  readonly #waiting = new Map<string, { at: number; priority: Priority }>();
  readonly #heap = new MinHeap();
  #seq = 0;
  readonly #waiters: ((key: string | undefined) => void)[] = [];
  #timer: { at: number; handle: Timer } | undefined;
  #highStreak = 0;
  #shuttingDown = false;
  #drained: (() => void)[] = [];

  constructor(opts: WorkQueueOptions = {}) {
    this.#clock = opts.clock ?? realClock;
    this.#backoff = opts.backoff ?? new ItemBackoff();
    this.#metrics = opts.metrics ?? {};
    this.#lowLaneEvery = opts.lowLaneEvery ?? 10;
    if (!(this.#lowLaneEvery >= 1)) {
      throw new RangeError(`WorkQueue lowLaneEvery must be >= 1, got ${opts.lowLaneEvery}`);
    }
  }

  /** Keys ready to be handed out. */
  get length(): number {
    return this.#high.size + this.#low.size;
  }
  /** Keys being processed now. */
  get processing(): number {
    return this.#processing.size;
  }
  /** Keys parked until a later time. */
  get delayed(): number {
    return this.#waiting.size;
  }
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  add(key: string, priority: Priority = "high"): void {
    if (this.#shuttingDown) return;
    const queued = this.#dirty.get(key);
    if (queued !== undefined) {
      // Already waiting: only promote a low key that now has a live reason to run.
      if (queued === "low" && priority === "high") {
        this.#dirty.set(key, "high");
        if (this.#low.delete(key)) this.#high.add(key);
      }
      return;
    }
    this.#metrics.add?.();
    this.#dirty.set(key, priority);
    if (this.#processing.has(key)) return; // re-queued by done()
    this.#enqueue(key, priority);
  }

  /** Adds `key` after `ms` (requeueAfter). */
  addAfter(key: string, ms: number, priority: Priority = "high"): void {
    if (this.#shuttingDown) return;
    if (!(ms > 0)) {
      this.add(key, priority);
      return;
    }
    const at = this.#clock.now() + ms;
    const existing = this.#waiting.get(key);
    if (existing && existing.at <= at) return;
    this.#waiting.set(key, { at, priority });
    this.#heap.push({ at, seq: this.#seq++, key });
    this.#schedule();
  }

  /**
   * Withdraws the delayed add of `key` (addAfter, addRateLimited) that is not due yet; true if
   * there was one. A key has one pending time whatever asked for it (the earliest), so every
   * reason to come back is withdrawn at once. A key already queued or processing, or queued
   * again while processing (dirty; its delay may have just fallen due), is not affected.
   */
  cancelAfter(key: string): boolean {
    if (!this.#waiting.delete(key)) return false;
    // Its heap entry is stale now (skipped when it comes up); the timer may have been its.
    this.#dropStale();
    if (this.#timer && this.#timer.at !== this.#heap.peek()?.at) {
      this.#timer.handle.cancel();
      this.#timer = undefined;
      this.#schedule();
    }
    return true;
  }

  /** Adds `key` after its next backoff delay (a failed reconcile). */
  addRateLimited(key: string): void {
    if (this.#shuttingDown) return;
    this.#metrics.retry?.();
    this.addAfter(key, this.#backoff.next(key));
  }

  /** Resets the backoff of `key` (a successful reconcile). */
  forget(key: string): void {
    this.#backoff.forget(key);
  }

  failures(key: string): number {
    return this.#backoff.failures(key);
  }

  /**
   * Next key to process, waiting if none is ready. Resolves undefined once the queue is shut
   * down and empty. The caller must call done(key) when finished.
   */
  get(): Promise<string | undefined> {
    const key = this.#pop();
    if (key !== undefined) return Promise.resolve(key);
    if (this.#shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  done(key: string): void {
    const started = this.#processing.get(key);
    if (started === undefined) return;
    this.#processing.delete(key);
    this.#metrics.workDuration?.((this.#clock.now() - started) / 1000);
    const priority = this.#dirty.get(key);
    if (priority !== undefined && !this.#shuttingDown) this.#enqueue(key, priority);
    else this.#dirty.delete(key);
    if (this.#processing.size === 0) for (const fn of this.#drained.splice(0)) fn();
  }

  /**
   * Stops the queue: no more adds, waiting getters get undefined, delayed keys are dropped.
   * Keys already queued are dropped too: a restarted controller relists and finds them.
   * Resolves when every processing key is done().
   */
  shutdown(): Promise<void> {
    this.#shuttingDown = true;
    this.#timer?.handle.cancel();
    this.#timer = undefined;
    this.#waiting.clear();
    this.#heap.clear();
    this.#high.clear();
    this.#low.clear();
    for (const key of [...this.#dirty.keys()]) if (!this.#processing.has(key)) this.#dirty.delete(key);
    this.#publishDepth();
    for (const w of this.#waiters.splice(0)) w(undefined);
    if (this.#processing.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  #enqueue(key: string, priority: Priority): void {
    (priority === "high" ? this.#high : this.#low).add(key);
    this.#addedAt.set(key, this.#clock.now());
    this.#publishDepth();
    const waiter = this.#waiters.shift();
    if (waiter) {
      const next = this.#pop();
      // #pop cannot fail: we just queued a key and nobody else popped in between.
      waiter(next);
    }
  }

  #pop(): string | undefined {
    const lane = this.#pickLane();
    if (!lane) return undefined;
    const key = lane.values().next().value as string;
    lane.delete(key);
    this.#dirty.delete(key);
    const now = this.#clock.now();
    this.#processing.set(key, now);
    const added = this.#addedAt.get(key);
    this.#addedAt.delete(key);
    if (added !== undefined) this.#metrics.queueDuration?.((now - added) / 1000);
    this.#publishDepth();
    return key;
  }

  #pickLane(): Set<string> | undefined {
    if (this.#high.size > 0 && (this.#low.size === 0 || this.#highStreak < this.#lowLaneEvery)) {
      this.#highStreak++;
      return this.#high;
    }
    if (this.#low.size > 0) {
      this.#highStreak = 0;
      return this.#low;
    }
    return undefined;
  }

  #schedule(): void {
    this.#dropStale();
    const earliest = this.#heap.peek()?.at;
    if (earliest === undefined) return;
    if (this.#timer && this.#timer.at <= earliest) return;
    this.#timer?.handle.cancel();
    const handle = this.#clock.setTimer(earliest - this.#clock.now(), () => this.#fire());
    this.#timer = { at: earliest, handle };
  }

  #fire(): void {
    this.#timer = undefined;
    const now = this.#clock.now();
    for (;;) {
      this.#dropStale();
      const top = this.#heap.peek();
      if (!top || top.at > now) break;
      this.#heap.pop();
      const w = this.#waiting.get(top.key)!;
      this.#waiting.delete(top.key);
      this.add(top.key, w.priority);
    }
    this.#schedule();
  }

  /** Pops heap entries whose key is no longer waiting at that time. */
  #dropStale(): void {
    for (;;) {
      const top = this.#heap.peek();
      if (!top || this.#waiting.get(top.key)?.at === top.at) return;
      this.#heap.pop();
    }
  }

  #publishDepth(): void {
    this.#metrics.depth?.(this.length);
  }
}
