/**
 * What of a child wakes its model: the parts the reconcile reads, compared by value on each
 * update (selectedChangedPredicate). The cluster updates a model's children many times that
 * change none of them: a download pod's Job-tracking finalizer removed, its IP and start time
 * set, a Job's `ready` and `terminating` counts, the timestamps of a condition whose status did
 * not change. Each was a reconcile that wrote nothing (issue 15: 10 to 21 reconciles per
 * downloaded model; bench/README.md has the profile and the counts).
 *
 * What is read, and so kept here: the labels and annotations of ours (an edit or removal of
 * one is drift; other managers' are not), the deletion mark and the owners, the spec (by
 * generation where the kind has one: every spec change bumps it; else by value), and per kind
 * the status fields status.ts, canary/ and the syncers look at. Adds and deletes always wake.
 */
import type { V1ContainerStatus, V1PodCondition } from "@kubernetes/client-node";
import { type KubeObject, type Predicate, selectedChangedPredicate } from "../../runtime/index.ts";

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

/** Deployments, HPAs, PDBs: spec by generation, status whole but the conditions' timestamps. */
export const statusWakes: Predicate = selectedChangedPredicate<Child>((o) => [
  metadataRead(o),
  o.status && { ...o.status, conditions: conditionsRead(o.status.conditions) },
]);

/** Services, claims, revisions (no generation): spec by value; of a claim's status, its phase. */
export const specWakes: Predicate = selectedChangedPredicate<Child & { data?: unknown; revision?: number }>(
  (o) => [metadataRead(o), o.spec, o.data, o.revision, o.status?.["phase"]],
);

/** Jobs: how many pods ran and how they ended (status.ts, downloadStep), and their end. */
export const jobWakes: Predicate = selectedChangedPredicate<Child>((o) => {
  const s = o.status ?? {};
  return [
    metadataRead(o),
    s["active"],
    s["succeeded"],
    s["failed"],
    s["uncountedTerminatedPods"],
    conditionsRead(s["conditions"]),
  ];
});

function containerRead(c: V1ContainerStatus): unknown {
  const waiting = c.state?.waiting;
  const terminated = c.state?.terminated ?? c.lastState?.terminated;
  return [
    c.name,
    c.image,
    c.ready,
    c.restartCount,
    waiting && [waiting.reason, waiting.message],
    c.state?.terminated ? "ended" : c.state?.running ? "running" : undefined,
    terminated && [terminated.exitCode, terminated.reason, terminated.message],
  ];
}

/**
 * Pods: labels, deletion, phase, conditions (the Ready one with its time: a canary's unready
 * time is counted from it), and each container's state as pods.ts judges it.
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
    s?.conditions?.map((c) => [
      c.type,
      c.status,
      c.reason,
      c.message,
      c.type === "Ready" && c.lastTransitionTime,
    ]),
    s?.containerStatuses?.map(containerRead),
    s?.initContainerStatuses?.map(containerRead),
  ];
});
