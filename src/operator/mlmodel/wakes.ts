/**
 * What of a child wakes its model: the parts the reconcile reads, compared by value on each
 * update (selectedChangedPredicate). The cluster updates a model's children many times that
 * change none of them: a download pod's Job-tracking finalizer removed, its IP and start time
 * set, a Job's `ready` and `terminating` counts, the timestamps of a condition whose status did
 * not change. Each would be a reconcile that writes nothing, several per downloaded model.
 *
 * What is read, and so kept here: the labels and annotations of ours (an edit or removal of
 * one is drift; other managers' are not), the deletion mark and the owners, the spec (by
 * generation where the kind has one: every spec change bumps it; else by value), and per kind
 * the status fields status.ts, canary/ and the syncers look at. Adds and deletes always wake,
 * but the add that is the echo of the operator's own create (OwnWrites, below).
 */
import type { V1ContainerStatus, V1PodCondition } from "@kubernetes/client-node";
import {
  type KubeObject,
  keyString,
  kindName,
  objectKey,
  type Predicate,
  type ResourceKind,
  selectedChangedPredicate,
} from "../../runtime/index.ts";
import { TtlMap } from "../ttl-map.ts";
import type { ModelClient } from "./context.ts";

/** Our own label and annotation keys (serving.mlmodel.dev/...) and the standard app ones we set. */
function ours(record: Readonly<Record<string, string>> | undefined): Record<string, string> | undefined {
  if (!record) return undefined;
  const kept: Record<string, string> = {};
  for (const [k, v] of Object.entries(record))
    if (k.startsWith("serving.mlmodel.dev/") || k.startsWith("app.kubernetes.io/")) kept[k] = v;
  return kept;
}

interface Child extends KubeObject {
  spec?: unknown;
  status?: Record<string, unknown>;
}

function metadataRead(o: Readonly<Child>): unknown {
  const m = o.metadata;
  return [ours(m.labels), ours(m.annotations), m.deletionTimestamp, m.ownerReferences, m.generation];
}

interface ConditionLike {
  type?: string;
  status?: string;
  reason?: string;
  message?: string;
}

/** Conditions without their timestamps (lastUpdateTime moves with every progress report). */
function conditionsRead(conditions: unknown): unknown {
  return (conditions as ConditionLike[] | undefined)?.map((c) => [c.type, c.status, c.reason, c.message]);
}

interface DeploymentStatusLike {
  observedGeneration?: number;
  replicas?: number;
  updatedReplicas?: number;
  readyReplicas?: number;
  availableReplicas?: number;
  conditions?: ConditionLike[];
}

/**
 * What of a Deployment's status the reconcile reads: whether its rollout is complete, as
 * status.ts judges it (every desired replica updated and available, for the generation) and
 * as a canary's split does (canary/desired.ts, splitView: updated, none of an older revision
 * left); whether its progress deadline passed (status.ts, canary/health.ts); and the counts of
 * its pods: the model's serving pods are not watched (serving-pods.ts), so these counts are
 * what says a pod was created, turned ready or stopped being ready, and whether the Deployment
 * has settled (its counts are then the model's, and its pods are not read). Not its
 * conditions' times, nor `availableReplicas` apart from the rollout, nor `unavailableReplicas`
 * (they follow the counts read). The desired count is the spec's (a change of it bumps the
 * generation).
 */
function deploymentStatusRead(o: Readonly<Child>): unknown {
  const s = (o.status ?? {}) as DeploymentStatusLike;
  const desired = (o.spec as { replicas?: number } | undefined)?.replicas ?? 1;
  const observed = (s.observedGeneration ?? 0) >= (o.metadata.generation ?? 0);
  const updated = (s.updatedReplicas ?? 0) >= desired;
  const noneOlder = (s.replicas ?? 0) === (s.updatedReplicas ?? 0);
  const progressing = s.conditions?.find((c) => c.type === "Progressing");
  return [
    observed && updated && noneOlder && (s.availableReplicas ?? 0) >= desired,
    observed && updated && noneOlder,
    progressing?.status === "False" && progressing.reason === "ProgressDeadlineExceeded",
    s.replicas ?? 0,
    s.updatedReplicas ?? 0,
    s.readyReplicas ?? 0,
  ];
}

/**
 * Deployments, HPAs, PDBs: spec by generation; of a Deployment's status, what the reconcile
 * reads of it (deploymentStatusRead); of the others' (and of anything without a pod template,
 * should a Deployment ever come without one), the whole status but the conditions' timestamps.
 */
export const statusWakes: Predicate = selectedChangedPredicate<Child>((o) => [
  metadataRead(o),
  (o.spec as { template?: unknown } | undefined)?.template !== undefined
    ? deploymentStatusRead(o)
    : o.status && { ...o.status, conditions: conditionsRead(o.status.conditions) },
]);

/**
 * A claim's spec but its volumeName: the volume binder sets it a moment before the claim's
 * phase says Bound (the update that is read); no desired claim sets it, so drift never reads it,
 * and its update alone would be a reconcile that writes nothing.
 */
function specRead(o: Readonly<Child>): unknown {
  const spec = o.spec as { volumeName?: string } | undefined;
  if (o.kind !== "PersistentVolumeClaim" || spec?.volumeName === undefined) return spec;
  const { volumeName: _bound, ...rest } = spec;
  return rest;
}

/** Services, claims, revisions (no generation): spec by value (specRead); of a claim's status, its phase. */
export const specWakes: Predicate = selectedChangedPredicate<Child & { data?: unknown; revision?: number }>(
  (o) => [metadataRead(o), specRead(o), o.data, o.revision, o.status?.["phase"]],
);

/**
 * Jobs: what status.ts (downloadStep) and canary.ts read: the count of ready pods (a download
 * that runs: its pods are not watched, caches.ts), the counts of pods that ended and how the
 * Job ended (its Complete or Failed condition). Not the active and terminating counts, nor the
 * conditions that only precede the end (SuccessCriteriaMet, FailureTarget). Of the pods that
 * ended but are not counted yet (uncountedTerminatedPods) only the failed ones: a download Job
 * runs one pod to completion, so a succeeded pod is always followed by the Job's Complete,
 * which wakes (and is read with its count). The Job's start and its success criteria met
 * would each be a reconcile that writes nothing.
 */
export const jobWakes: Predicate = selectedChangedPredicate<Child>((o) => {
  const s = o.status ?? {};
  const uncounted = s["uncountedTerminatedPods"] as { failed?: unknown[] } | undefined;
  const ends = ((s["conditions"] as ConditionLike[] | undefined) ?? []).filter(
    (c) => c.type === "Complete" || c.type === "Failed",
  );
  return [
    metadataRead(o),
    s["ready"],
    s["succeeded"],
    s["failed"],
    uncounted?.failed?.length ?? 0,
    conditionsRead(ends),
  ];
});

function containerRead(c: V1ContainerStatus): unknown {
  const waiting = c.state?.waiting;
  const terminated = c.state?.terminated ?? c.lastState?.terminated;
  return [
    c.name,
    c.image,
    c.ready,
    // Whether its startup probe passed: a canary's unready time counts only from then (canary/health.ts).
    c.started,
    c.restartCount,
    waiting && [waiting.reason, waiting.message],
    c.state?.terminated ? "ended" : c.state?.running ? "running" : undefined,
    terminated && [terminated.exitCode, terminated.reason, terminated.message],
  ];
}

/**
 * A pod's conditions as they are read: Ready with its time (a canary's unready time is counted
 * from it), and PodScheduled only when it says Unschedulable (pods.ts; a scheduled pod's
 * PodScheduled True is not read, nor Initialized, ContainersReady and the rest).
 */
function podConditionsRead(conditions: readonly V1PodCondition[] | undefined): unknown {
  return (conditions ?? []).flatMap((c) =>
    c.type === "Ready"
      ? [[c.type, c.status, c.reason, c.message, c.lastTransitionTime]]
      : c.type === "PodScheduled" && c.status === "False" && c.reason === "Unschedulable"
        ? [[c.type, c.status, c.reason, c.message]]
        : [],
  );
}

/**
 * Pods (a canary's: no other pod is watched, caches.ts): an update that changed what is read
 * of them: labels, deletion, phase, the conditions read (podConditionsRead), and each
 * container's state as pods.ts judges it.
 */
export const podWakes: Predicate = selectedChangedPredicate<
  Child & {
    status?: {
      phase?: string;
      conditions?: V1PodCondition[];
      containerStatuses?: V1ContainerStatus[];
      initContainerStatuses?: V1ContainerStatus[];
    };
  }
>((pod) => {
  const s = pod.status;
  return [
    pod.metadata.labels,
    pod.metadata.deletionTimestamp,
    s?.phase,
    podConditionsRead(s?.conditions),
    s?.containerStatuses?.map(containerRead),
    s?.initContainerStatuses?.map(containerRead),
  ];
});

/**
 * The echoes of the operator's own child creates, which wake nobody. Every child the reconcile
 * creates comes back through its watch as an add; its model was just reconciled with that
 * child in view (the syncers return what they applied), so the add alone would only reconcile
 * it again to write nothing: a revision, a Deployment and a Service per model, each a wake
 * that would put its model at the back of the queue again.
 *
 * `client` wraps a reconcile's client: a child applied with applyForVersion whose apply
 * created it (HTTP 201) is remembered by kind, key and the resourceVersion answered. The watch
 * event carrying exactly that version, live (not a relist), is its echo and is dropped by
 * `predicate`; any other event wakes as before. Why that is safe:
 * - only creates are remembered: the object at a created resourceVersion is this write's
 *   alone. An apply that changed an existing object (200) may have been a no-op answering
 *   another writer's newer version, not yet seen by the watch: dropping that event would lose
 *   its wake-up. So updates are not remembered (a spec update still echoes, once per model).
 * - every later change (kube-controller-manager's status, pod readiness, a user's edit, a
 *   delete) has another resourceVersion and wakes; a relisted object (initial) always does.
 * - an echo that arrives before its answer was read is not known yet and wakes:
 *   a missed echo costs a reconcile, never a lost wake-up. Remembered versions are forgotten
 *   once matched, and after `ttlMs` when their echo never came (the watch missed it and a
 *   relist brought the object instead).
 */
export class OwnWrites {
  /** The resourceVersion of each create whose echo has not come (yet), by kind and key. */
  readonly #echoes: TtlMap<string, string>;
  readonly #now: () => number;
  readonly ttlMs: number;
  /** Echoes dropped so far (for tests and a debug log). */
  dropped = 0;

  constructor(opts: { ttlMs?: number; now?: () => number } = {}) {
    this.ttlMs = opts.ttlMs ?? 60_000;
    this.#now = opts.now ?? Date.now;
    this.#echoes = new TtlMap({ ttlMs: this.ttlMs });
  }

  /** `client` with its applyForVersion answers remembered; every other verb passed through. */
  client(client: ModelClient): ModelClient {
    return {
      applyDiscardingAnswer: (kind, obj, opts) => client.applyDiscardingAnswer(kind, obj, opts),
      applyForVersion: async (kind, obj, opts) => {
        const answer = await client.applyForVersion(kind, obj, opts);
        if (answer.created && answer.resourceVersion) this.remember(kind, obj, answer.resourceVersion);
        return answer;
      },
      applyStatus: (kind, obj, opts) => client.applyStatus(kind, obj, opts),
      patch: (kind, key, patch, type, opts) => client.patch(kind, key, patch, type, opts),
      delete: (kind, key, opts) => client.delete(kind, key, opts),
      create: (kind, obj, opts) => client.create(kind, obj, opts),
      list: (kind, opts) => client.list(kind, opts),
    };
  }

  /** The predicate for one owned kind: false for the echo of a create of ours, true for everything else. */
  predicate(kind: ResourceKind): Predicate {
    const prefix = `${kindName(kind)}/`;
    return (change) => {
      if (change.initial || change.type === "delete") return true;
      const key = prefix + keyString(objectKey(change.object));
      const echo = this.#echoes.get(key);
      if (echo === undefined || echo !== change.object.metadata.resourceVersion) return true;
      this.#echoes.delete(key);
      this.dropped++;
      return false;
    };
  }

  /** How many creates are remembered whose echo has not come (yet). */
  get size(): number {
    return this.#echoes.size;
  }

  remember(kind: ResourceKind, obj: KubeObject, resourceVersion: string): void {
    this.#echoes.set(`${kindName(kind)}/${keyString(objectKey(obj))}`, resourceVersion, this.#now());
  }
}
