/**
 * What one MLModel reconcile may use. The runtime's ReconcileContext is one (its KubeClient has
 * these verbs); the recording fake of the unit tests (test/unit/operator/reconcile-harness.ts)
 * is another. Only the observe stage gets the caches; the stages that write get the client.
 */
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
 * URI Secret: RBAC grants no patch). No child's answer is parsed whole. And the reads that are
 * not a cache's: lists of pods (a download Job's when the Job needs explaining,
 * download-pods.ts; the serving pods of a rollout that has not settled, serving-pods.ts; the
 * node cache agents' and the download pods while a succeeded download's key may be held by
 * no node, observe.ts), and
 * the previous log of a crashed serving container, once per crash (crash-logs.ts).
 */
export type ModelClient = Pick<
  KubeClient,
  | "applyDiscardingAnswer"
  | "applyForVersion"
  | "applyStatus"
  | "patch"
  | "delete"
  | "create"
  | "list"
  | "getText"
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
  client: Pick<ModelClient, "list" | "getText">;
  signal: AbortSignal;
  cache<T extends KubeObject = KubeObject>(kind: ResourceKind): Store<T>;
  /** Whether an optional kind (HTTPRoute) is served and its cache fully listed. */
  served(kind: ResourceKind): boolean;
}

/** A reconcile's whole context: its client is the writing stages' (observe lists with it). */
export interface MLModelContext extends Omit<ReadContext, "client">, WriteContext {
  recorder: EventRecorder;
}
