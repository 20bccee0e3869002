/**
 * What one MLModel reconcile may use. The runtime's ReconcileContext is one (its KubeClient has
 * these verbs); the recording fake of the unit tests (test/unit/operator/reconcile-harness.ts)
 * is another. Only the observe stage gets the caches; the stages that write get the client.
 */
import type { MLModelStatus } from "../../api/mlmodel.ts";
import type {
  EventRecorder,
  KubeClient,
  KubeObject,
  Logger,
  Request,
  ResourceKind,
  Store,
} from "../../runtime/index.ts";

/**
 * The writes the MLModel reconciler makes, nothing more: server-side apply of children (the
 * answer unread, or only its uid and version read: applyForVersion, so that a create's echo
 * wakes nobody, wakes.ts) and of the status, a merge patch of the status (clearing the
 * downloader's fields), delete, and create for the one kind it may create but never change (a
 * URI Secret: RBAC grants no patch). No child's answer is parsed whole. And one read that is
 * not a cache's: the list of a download Job's pods, when the Job needs explaining
 * (download-pods.ts).
 */
export type ModelClient = Pick<
  KubeClient,
  "applyDiscardingAnswer" | "applyForVersion" | "applyStatus" | "patch" | "delete" | "create" | "list"
>;

/** What a stage that writes needs. */
export interface WriteContext {
  client: ModelClient;
  log: Logger;
  signal: AbortSignal;
}

/**
 * What the observe stage needs: the request, the shared caches, and a client to list what is
 * not cached (a download Job's pods, download-pods.ts). Reads only.
 */
export interface ReadContext {
  request: Request;
  client: Pick<ModelClient, "list">;
  signal: AbortSignal;
  cache<T extends KubeObject = KubeObject>(kind: ResourceKind): Store<T>;
  /** Whether an optional kind (HTTPRoute) is served and its cache fully listed. */
  served(kind: ResourceKind): boolean;
}

/** A reconcile's whole context: its client is the writing stages' (observe lists with it). */
export interface MLModelContext extends Omit<ReadContext, "client">, WriteContext {
  recorder: EventRecorder;
}

/**
 * The last status this controller wrote per model ("namespace/name"): the resourceVersion of
 * the model it was computed from, and the one the write produced. A reconcile that runs before
 * the cache has seen that write (a child changed in between) compares against it instead of
 * the cache's older status, so it neither writes the same status twice nor records the same
 * transition Event twice, and a canary's memory (status.canary) never steps back: the cache may
 * lag by more than one write, so any cached version older than the one written is behind.
 */
export type WrittenStatuses = Map<
  string,
  {
    fromResourceVersion: string | undefined;
    resourceVersion?: string | undefined;
    status: MLModelStatus;
    /** When it was written (ms since the epoch). */
    at?: number;
    /** Since when a change of counts alone has been held back (report.ts, countsSettleMs). */
    countsSince?: number | undefined;
  }
>;

/**
 * A cache shows a write within milliseconds to seconds; an entry this old has long been seen
 * (a cache a minute behind has a broken watch, which its informer reports on /readyz after its
 * grace period and lists again).
 * Without an end, the map held the last status of every model the operator ever wrote (a
 * model nothing wakes again is not reconciled again to drop it): about 1 KiB per model.
 */
export const writtenStatusTtlMs = 60_000;

/** Remembers the status just written for `key`, and forgets those written before the TTL, oldest first. */
export function rememberWritten(
  written: WrittenStatuses,
  key: string,
  entry: Omit<NonNullable<ReturnType<WrittenStatuses["get"]>>, "at" | "countsSince">,
  now: number,
): void {
  written.delete(key); // re-inserted last: the map stays in order of writing
  written.set(key, { ...entry, at: now });
  forgetExpired(written, now);
}

/** Forgets the statuses written before the TTL, oldest first (the map is in order of writing). */
export function forgetExpired(written: WrittenStatuses, now: number): void {
  for (const [k, e] of written) {
    if (now - (e.at ?? now) < writtenStatusTtlMs) break;
    written.delete(k);
  }
}

/**
 * URI Secrets this controller created that its cache had not shown yet ("namespace/name" -> until
 * when, in ms since the epoch, to wait for them). The next reconcile often runs before the watch
 * delivers a new Secret and would create it again (a 409): expectations, as Kubernetes' own
 * controllers keep them for the pods they create.
 */
export type CreatedSecrets = Map<string, number>;
