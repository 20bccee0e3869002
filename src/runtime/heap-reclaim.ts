/**
 * Gives the heap a burst grew back to the system once the controllers are quiet.
 *
 * Why: a burst of watch events (10,000 objects created at once) interleaves the objects a
 * cache keeps with the garbage of handling them, so the cached objects end up scattered over
 * old-space pages that were mostly garbage. V8 frees the garbage but keeps every page that
 * still holds one live object, and its memory reducer did not run in an operator woken every
 * few seconds by leader election and watch bookmarks: caching 10,000 models, 56 MiB of heap
 * in use held 157 MiB, and 257 MiB RSS, idle, minutes later.
 * One compacting collection when the work is done moves the live objects together and
 * returns the empty pages.
 *
 * When: at a look every `intervalMs`, if V8 holds `growthBytes` more heap than after the last
 * reclaim (or than at start) and the work is quiet: the Manager reports quiet when every cache
 * has synced, no cache changed and nothing was reconciled since the previous look, and nothing
 * is queued or running. So a quiet controller never collects, a burst costs one collection
 * after it (0.2 s with 10,000 cached models, on the main thread), and work is never
 * paused by it.
 *
 * Sharp edge: the collection is V8's "last resort" one, asked for through the `gc` function
 * V8 gives when `--expose-gc` is set; the flag is set for the moment it takes to get that
 * function and unset again, so no script sees a global `gc` it did not ask for. It blocks the
 * event loop while it runs, which is why it waits for quiet.
 */
import type { Logger } from "pino";
import type { Clock, Timer } from "./clock.ts";

export interface HeapReclaimOptions {
  /** How often to look (default 5 s). */
  intervalMs?: number;
  /** Reclaim once V8 holds this much more than after the last reclaim (default 16 MiB). */
  growthBytes?: number;
  /** The heap to watch and reclaim (default V8's, `v8Heap()`; tests give their own). */
  heap?: Heap;
}

export const defaultHeapReclaim: Required<Omit<HeapReclaimOptions, "heap">> = {
  intervalMs: 5_000,
  growthBytes: 16 * 2 ** 20,
};

/** What the reclaimer reads and does to the heap: V8's in production, a fake in tests. */
export interface Heap {
  /** Bytes V8 holds for its heap, in use or not (total_heap_size). */
  heldBytes(): number;
  /** A full collection that compacts and returns empty pages; blocks until done. */
  reclaim(): void;
}

/** What the work reports at each look. */
export interface Activity {
  /** A count that grows with work: reconciles finished and cache changes so far. */
  done: number;
  /** Keys queued or being reconciled now. */
  pending: number;
}

/** Whether a look reclaims: the heap grew enough since the last reclaim, and work is quiet. */
export function reclaimDue(
  heldBytes: number,
  heldAfterLastReclaim: number,
  quiet: boolean,
  growthBytes: number,
): boolean {
  return quiet && heldBytes - heldAfterLastReclaim >= growthBytes;
}

export class HeapReclaimer {
  readonly #opts: Required<Omit<HeapReclaimOptions, "heap">>;
  readonly #activity: () => Activity;
  readonly #heap: Heap;
  readonly #clock: Clock;
  readonly #log: Logger | undefined;
  readonly #onReclaim: ((freedBytes: number) => void) | undefined;
  #heldAfterLast = 0;
  #doneAtLastLook = -1;
  #timer: Timer | undefined;

  constructor(
    opts: HeapReclaimOptions,
    deps: {
      activity: () => Activity;
      clock: Clock;
      log?: Logger;
      /** Called after each reclaim with the bytes V8 gave back (metrics). */
      onReclaim?: (freedBytes: number) => void;
    },
  ) {
    const { heap, ...rest } = opts;
    this.#opts = { ...defaultHeapReclaim, ...rest };
    this.#activity = deps.activity;
    this.#heap = heap ?? v8Heap();
    this.#clock = deps.clock;
    this.#log = deps.log;
    this.#onReclaim = deps.onReclaim;
  }

  start(): void {
    this.#heldAfterLast = this.#heap.heldBytes();
    this.#schedule();
  }

  stop(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  /** One look (exposed for tests): reclaims if due; returns whether it did. */
  look(): boolean {
    const { done, pending } = this.#activity();
    const quiet = pending === 0 && done === this.#doneAtLastLook;
    this.#doneAtLastLook = done;
    const held = this.#heap.heldBytes();
    if (!reclaimDue(held, this.#heldAfterLast, quiet, this.#opts.growthBytes)) return false;
    const started = this.#clock.now();
    this.#heap.reclaim();
    this.#heldAfterLast = this.#heap.heldBytes();
    const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
    this.#log?.info(
      { heldMiB: mib(held), afterMiB: mib(this.#heldAfterLast), ms: this.#clock.now() - started },
      "work is quiet: gave back the heap the last burst grew",
    );
    this.#onReclaim?.(Math.max(0, held - this.#heldAfterLast));
    return true;
  }

  #schedule(): void {
    this.#timer = this.#clock.setTimer(this.#opts.intervalMs, () => {
      try {
        this.look();
      } catch (err) {
        // A V8 that refuses the collection (a flag or option it does not know) costs the
        // memory, never the process: stop looking.
        this.#log?.warn({ err }, "heap reclaim failed; not trying again");
        this.#timer = undefined;
      }
      if (this.#timer) this.#schedule();
    });
  }
}

/** V8's heap: its statistics, and its last-resort collection through `gc` (see the header). */
export function v8Heap(): Heap {
  const v8 = process.getBuiltinModule("node:v8");
  let gc: ((options: object) => void) | undefined;
  return {
    heldBytes: () => v8.getHeapStatistics().total_heap_size,
    reclaim: () => {
      gc ??= exposedGc(v8);
      gc({ type: "major", execution: "sync", flavor: "last-resort" });
    },
  };
}

function exposedGc(v8: typeof import("node:v8")): (options: object) => void {
  const existing = (globalThis as { gc?: (options: object) => void }).gc;
  if (existing) return existing;
  v8.setFlagsFromString("--expose-gc");
  try {
    return process.getBuiltinModule("node:vm").runInNewContext("gc") as (options: object) => void;
  } finally {
    v8.setFlagsFromString("--no-expose-gc");
  }
}
