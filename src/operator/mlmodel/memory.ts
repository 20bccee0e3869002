/**
 * What the MLModel reconcile remembers between reconciles, per model ("namespace/name"), in
 * one object the controller keeps. Everything else a reconcile needs it reads afresh; these
 * are what the caches cannot say yet (a write they have not shown) or what time alone ends (a
 * status held back). Each map forgets on its own (TtlMap): a model nothing wakes again is not
 * reconciled again to drop its entries.
 */
import type { MLModelStatus } from "../../api/mlmodel.ts";
import { TtlMap } from "../ttl-map.ts";

/**
 * The last status this controller wrote for a model: the resourceVersion of the model it was
 * computed from, and the one the write produced. A reconcile that runs before the cache has
 * seen that write (a child changed in between) compares against it instead of the cache's
 * older status, so it neither writes the same status twice nor records the same transition
 * Event twice, and a canary's memory (status.canary) never steps back: the cache may lag by
 * more than one write, so any cached version older than the one written is behind.
 */
export interface WrittenStatus {
  fromResourceVersion: string | undefined;
  resourceVersion?: string | undefined;
  status: MLModelStatus;
  /** Since when a change of counts alone has been held back (report.ts, countsSettleMs). */
  countsSince?: number | undefined;
}

/**
 * Since when a new generation's first Deploying status has been held back (report.ts,
 * startsRollout), and for which generation.
 */
export interface HeldRollout {
  generation: number | undefined;
  since: number;
}

/**
 * A cache shows a write within milliseconds to seconds; an entry this old has long been seen
 * (a cache a minute behind has a broken watch, which its informer reports on /readyz after its
 * grace period and lists again). A held rollout is written within seconds, and a created
 * Secret shows in the cache as fast as a status.
 */
export const memoryTtlMs = 60_000;

export class ModelMemory {
  /** The last status written, per model (WrittenStatus). */
  readonly written: TtlMap<string, WrittenStatus>;
  /** The new generations whose first Deploying is held back, per model (HeldRollout). */
  readonly heldRollouts: TtlMap<string, HeldRollout>;
  /**
   * URI Secrets created that the cache has not shown yet ("namespace/name" -> until when, in ms
   * since the epoch, to wait for them). The next reconcile often runs before the watch delivers
   * a new Secret and would create it again (a 409): expectations, as Kubernetes' own
   * controllers keep them for the pods they create.
   */
  readonly createdSecrets: TtlMap<string, number>;

  /** `expireWhileIdle`: also forget by the wall clock while no reconcile runs (the controller's). */
  constructor(options: { expireWhileIdle?: boolean } = {}) {
    const maps = { ttlMs: memoryTtlMs, expireWhileIdle: options.expireWhileIdle === true };
    this.written = new TtlMap(maps);
    this.heldRollouts = new TtlMap(maps);
    this.createdSecrets = new TtlMap(maps);
  }

  /** Forgets a deleted model. */
  forget(key: string): void {
    this.written.delete(key);
    this.heldRollouts.delete(key);
  }
}
