/**
 * Is the canary healthy? A pure reading of its pods, its Deployment and its download. Unhealthy
 * is what a person would not want serving users: a failed download, pods that cannot pull
 * their image or start, crash loops, more restarts than spec.rollout.canary.maxRestarts, a
 * started replica failing its readiness probe for longer than maxUnreadySeconds, or a
 * Deployment past its progress deadline. Unschedulable pods are not unhealthy: they wait for
 * capacity, and the progress deadline bounds the wait.
 */
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import { podProblem } from "../pods.ts";

export type CanaryHealth = { healthy: true } | { healthy: false; reason: string; message: string };

export interface CanaryHealthInput {
  /** The canary Deployment's pods. */
  pods: readonly V1Pod[];
  deployment?: V1Deployment;
  /** The canary's model download failed (its Job's final verdict). */
  downloadFailure?: string;
  maxRestarts: number;
  maxUnreadySeconds: number;
  /** ISO time. */
  now: string;
}

const healthy: CanaryHealth = { healthy: true };

function restarts(pods: readonly V1Pod[]): number {
  return pods
    .flatMap((p) => p.status?.containerStatuses ?? [])
    .reduce((sum, cs) => sum + (cs.restartCount ?? 0), 0);
}

/**
 * A pod whose containers all started (the startup probe passed) but that is not Ready: its
 * readiness probe fails. Unready since its Ready condition last changed.
 */
function unreadyForSeconds(pod: V1Pod, now: number): number | undefined {
  if (pod.metadata?.deletionTimestamp) return undefined;
  const statuses = pod.status?.containerStatuses ?? [];
  if (statuses.length === 0 || !statuses.every((cs) => cs.started === true && cs.state?.running))
    return undefined;
  const ready = pod.status?.conditions?.find((c) => c.type === "Ready");
  if (!ready || ready.status === "True" || !ready.lastTransitionTime) return undefined;
  return (now - new Date(ready.lastTransitionTime).getTime()) / 1000;
}

export function canaryHealth(input: CanaryHealthInput): CanaryHealth {
  if (input.downloadFailure) {
    return {
      healthy: false,
      reason: "DownloadFailed",
      message: `the canary's model download failed: ${input.downloadFailure}`,
    };
  }
  const pods = input.pods.filter((p) => !p.metadata?.deletionTimestamp);
  const problem = podProblem(pods);
  if (problem && problem.reason !== "Unschedulable") {
    return { healthy: false, reason: problem.reason, message: `canary ${problem.message}` };
  }
  const restarted = restarts(pods);
  if (restarted > input.maxRestarts) {
    return {
      healthy: false,
      reason: "TooManyRestarts",
      message: `the canary's containers restarted ${restarted} times (spec.rollout.canary.maxRestarts is ${input.maxRestarts})`,
    };
  }
  const now = new Date(input.now).getTime();
  for (const pod of pods) {
    const seconds = unreadyForSeconds(pod, now);
    if (seconds !== undefined && seconds > input.maxUnreadySeconds) {
      return {
        healthy: false,
        reason: "ReadinessProbeFailing",
        message: `canary pod ${pod.metadata?.name} has failed its readiness probe for ${Math.round(seconds)}s (spec.rollout.canary.maxUnreadySeconds is ${input.maxUnreadySeconds})`,
      };
    }
  }
  const progressing = input.deployment?.status?.conditions?.find((c) => c.type === "Progressing");
  if (progressing?.status === "False" && progressing.reason === "ProgressDeadlineExceeded") {
    return {
      healthy: false,
      reason: "ProgressDeadlineExceeded",
      message: `canary Deployment ${input.deployment?.metadata?.name} made no progress within ${input.deployment?.spec?.progressDeadlineSeconds}s${problem ? `: ${problem.message}` : ""}`,
    };
  }
  return healthy;
}
