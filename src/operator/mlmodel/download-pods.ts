/**
 * A model's download pods, read from the API server only while one of its download Jobs needs
 * explaining. They are not watched (caches.ts, watchedPodSelector): watched, each download
 * would bring about 6 pod events (created, scheduled, running, succeeded, its Job's finalizer
 * removed, ...), a quarter of a downloaded model's events and about 3 ms of the operator's
 * CPU per model. The Job's own status (watched) counts its
 * pods: ready (a download that runs), succeeded, failed. Two states need the pods themselves:
 * - a Job that failed: its newest pod's termination message is the downloader's error;
 * - a Job with no ready pod: its pod may wait for a node, a volume or an image, or be unable
 *   to start (pods.ts, podProblem; status.ts, claimBinding), which no Job status shows. No
 *   event says when that changes, so the model is looked at again (lookAgainMs) while it lasts.
 */
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { builtinKinds, type KubeObject } from "../../runtime/index.ts";
import { labels } from "../names.ts";
import { jobEnd, jobState } from "../status.ts";
import type { ModelClient } from "./context.ts";

/**
 * Whether the status needs the Job's pods: it failed, or it runs with no pod ready
 * (waitsForPod) and is at least as old as the first look. A younger one's pod has hardly had
 * time to show a problem, and that look comes (lookAgainMs): so the reconciles right after the
 * Job's create make no list (its echo wakes the model when it comes before the create's
 * answer, wakes.ts: in an update wave, a list per model).
 */
export function needsItsPods(job: V1Job, now: string): boolean {
  if (jobState(job) === "Failed") return true;
  return waitsForPod(job) && !(ageMs(job, now) < lookAgainBoundsMs.min);
}

/** Since the Job was created; NaN when it says no time. */
function ageMs(job: V1Job, now: string): number {
  return Date.parse(now) - Date.parse(String(job.metadata?.creationTimestamp ?? ""));
}

/**
 * A Job not ended, with no pod ready and none succeeded: its pod may be stuck, which only the
 * pod shows. Not once a pod succeeded (counted, or not yet: uncountedTerminatedPods): its
 * Complete follows, and that one pod ending is why none is ready any more. (A cluster whose
 * Jobs do not count ready pods, before Kubernetes 1.24, has its running downloads looked at
 * too: the same status, at the cost of a list each time.)
 */
function waitsForPod(job: V1Job): boolean {
  const s = job.status;
  const succeeded = (s?.succeeded ?? 0) + (s?.uncountedTerminatedPods?.succeeded?.length ?? 0);
  return jobState(job) === "Active" && (s?.ready ?? 0) === 0 && succeeded === 0;
}

/**
 * The download pods of `model` (every download Job's) when one of its download Jobs needs
 * them; else none, unread. `jobs` are all the model's Jobs: a prune Job's pods (prune.ts) are
 * serving-cache pods, never read here.
 */
export async function readDownloadPods(
  client: Pick<ModelClient, "list">,
  model: { namespace: string; name: string },
  jobs: readonly V1Job[],
  now: string,
  signal: AbortSignal,
): Promise<readonly V1Pod[]> {
  const downloads = jobs.filter((j) => j.metadata?.labels?.[labels.component] === "download");
  if (!downloads.some((job) => needsItsPods(job, now))) return [];
  const { items } = await client.list<KubeObject & V1Pod>(builtinKinds.Pod, {
    namespace: model.namespace,
    labelSelector: `${labels.model}=${model.name},${labels.component}=download`,
    withoutManagedFields: true,
    signal,
  });
  return items;
}

/** The shortest and longest wait before a Job with no ready pod is looked at again. */
export const lookAgainBoundsMs = { min: 5_000, max: 60_000 } as const;

/**
 * The shortest wait while the model's claim is not bound (mlmodel/assess.ts): its binding
 * wakes the model, so a look is needed only for a pod that cannot be scheduled for another
 * reason (with WaitForFirstConsumer storage the claim binds only once the pod is scheduled).
 */
export const lookWhileClaimPendingMs = 30_000;

/**
 * When to look again at a Job that runs with no pod ready: after a quarter of its age, between
 * 5 s and 60 s. A pod that cannot pull its image is reported within seconds of the kubelet
 * saying so while the Job is new, and a Job stuck for long (a volume that never comes, 1,000
 * models at once) costs one list a minute, not one every 5 s. Undefined for any other Job.
 */
export function lookAgainMs(job: V1Job | undefined, now: string): number | undefined {
  if (!job || !waitsForPod(job)) return undefined;
  return lookAfter(ageMs(job, now));
}

/**
 * After a quarter of how long a wait has lasted, between lookAgainBoundsMs (the shortest when
 * its age is unknown, NaN): soon while it is new, once a minute when it is old. Also the
 * serving pods' looks (serving-pods.ts).
 */
export function lookAfter(ageMs: number): number {
  if (Number.isNaN(ageMs)) return lookAgainBoundsMs.min;
  return Math.min(lookAgainBoundsMs.max, Math.max(lookAgainBoundsMs.min, Math.round(ageMs / 4)));
}

/**
 * lookAgainMs, given the model's claim: while it is not bound, at least lookWhileClaimPendingMs
 * (its binding wakes the model), and no look at all while the pod says it waits for that
 * binding (status.ts, claimBinding: the end of its grace is looked at instead).
 */
export function lookGivenClaimMs(
  job: V1Job | undefined,
  now: string,
  claim: { bound: boolean; podWaitsForIt: boolean },
): number | undefined {
  const look = lookAgainMs(job, now);
  if (look === undefined || claim.bound) return look;
  return claim.podWaitsForIt ? undefined : Math.max(look, lookWhileClaimPendingMs);
}

/**
 * Whether a look that lookAgainMs asked for may still be pending, though it would read nothing
 * new: the Job has a pod ready or succeeded now, or ended within the longest wait. The
 * reconcile that sees this withdraws it (reconcile.ts, replacesRequeue).
 */
export function lookNoLongerNeeded(job: V1Job | undefined, now: string): boolean {
  if (!job) return false;
  if (jobState(job) === "Active") return !waitsForPod(job);
  const ended = Date.parse(String(jobEnd(job)?.lastTransitionTime ?? ""));
  return Date.parse(now) - ended < lookAgainBoundsMs.max;
}
