/**
 * The reconcile contract (level-based, controller-runtime style): a reconciler gets the key
 * of an object, reads the world from caches, writes with the client, and returns when to look
 * again. It does not get the event: events only say "look at this key".
 */
import type { Logger } from "pino";
import type { KubeClient } from "./client.ts";
import type { EventRecorder } from "./events.ts";
import type { ResourceKind } from "./kinds.ts";
import type { Store } from "./store.ts";
import type { KubeObject, Request } from "./types.ts";

export type { Logger };

export interface ReconcileResult {
  /** Reconcile this key again after this many ms (without counting it as a failure). */
  requeueAfterMs?: number;
  /**
   * This result replaces the key's requeue not yet due: whatever earlier results asked for
   * (requeueAfterMs), and a retry after a 429 or a failure's backoff, is withdrawn, and this
   * result's requeueAfterMs (or none) is the only one left. Without it an earlier, earlier-due
   * requeue still runs (the earliest pending time wins). For a level-based reconciler that
   * knows the reason for an earlier requeue has ended: its result must then ask for every
   * reason it still has to come back, since the queue cannot tell the reasons apart. A requeue
   * that fell due while this reconcile ran (the key queued again) still runs.
   */
  replacesRequeue?: boolean;
}

export interface ReconcileContext {
  request: Request;
  /** Unique per reconcile call; also in every log line of `log`. */
  reconcileId: string;
  /** Aborted when the manager shuts down past its drain deadline or loses leadership. */
  signal: AbortSignal;
  /** Logger with controller, namespace, name and reconcileId bound. */
  log: Logger;
  /** Writes go straight to the API server. */
  client: KubeClient;
  /** Reads: the shared cache of `kind` (registered via for/owns/watches or mgr.cache). */
  cache<T extends KubeObject = KubeObject>(kind: ResourceKind): Store<T>;
  /**
   * Whether the cluster serves `kind`: always true for a kind the controller needs, and for an
   * optional one (owns/watches with `optional: true`) true only while it is served and its
   * cache holds the full list (an empty cache then means "none", not "not installed").
   */
  served(kind: ResourceKind): boolean;
  recorder: EventRecorder;
}

/** Returns nothing (done), a requeue request, or throws (retried with backoff, unless TerminalError). */
// biome-ignore lint/suspicious/noConfusingVoidType: lets `async (ctx) => { ... }` without a return be a Reconciler.
export type Reconciler = (ctx: ReconcileContext) => Promise<ReconcileResult | undefined | void>;
