/**
 * What is wrong with a set of pods, in words a person can act on. Pure: reads pod status as
 * the kubelet (or kwok) reports it.
 */
import type { V1Pod } from "@kubernetes/client-node";

export interface PodProblem {
  reason: "ImagePullBackOff" | "CrashLoopBackOff" | "CreateContainerConfigError" | "Unschedulable";
  message: string;
}

const imagePullReasons = new Set([
  "ImagePullBackOff",
  "ErrImagePull",
  "InvalidImageName",
  "ErrImageNeverPull",
]);

// The order is the order of what to fix first: an image that cannot be pulled hides every
// later problem, and a pod that never got scheduled has no containers at all.
const severity: PodProblem["reason"][] = [
  "ImagePullBackOff",
  "CreateContainerConfigError",
  "CrashLoopBackOff",
  "Unschedulable",
];

/**
 * The scheduler's reasons from its message "0/3 nodes are available: <reasons>. <note>", without
 * the note its preemption step appends ("preemption: ... not helpful", or "not found").
 */
function schedulerReasons(message: string | undefined): string {
  return message?.split(/\.(?:\s|$)/)[0]?.trim() || "no node fits";
}

export function podProblem(pods: readonly V1Pod[]): PodProblem | undefined {
  const found: PodProblem[] = [];
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const name = pod.metadata?.name ?? "?";
    const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
    for (const cs of statuses) {
      const waiting = cs.state?.waiting;
      if (!waiting?.reason) continue;
      if (imagePullReasons.has(waiting.reason)) {
        found.push({
          reason: "ImagePullBackOff",
          message: `pod ${name}: cannot pull image "${cs.image}" (${waiting.reason}${waiting.message ? `: ${waiting.message}` : ""}); check the image name and tag, and imagePullSecrets for a private registry`,
        });
      } else if (waiting.reason === "CrashLoopBackOff") {
        const last = cs.lastState?.terminated;
        const exit = last
          ? `; last exit code ${last.exitCode}${last.reason ? ` (${last.reason})` : ""}${last.message ? `: ${last.message.trim()}` : ""}`
          : "";
        found.push({
          reason: "CrashLoopBackOff",
          message: `container ${cs.name} of pod ${name} keeps crashing (${cs.restartCount} restarts)${exit}; see \`kubectl logs ${name} -c ${cs.name} --previous\``,
        });
      } else if (waiting.reason === "CreateContainerConfigError") {
        found.push({
          reason: "CreateContainerConfigError",
          message: `pod ${name}: ${waiting.message ?? "the container's configuration is invalid"}`,
        });
      }
    }
    const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
    if (scheduled?.status === "False" && scheduled.reason === "Unschedulable") {
      const why = schedulerReasons(scheduled.message);
      const hint = /PersistentVolumeClaim/.test(why)
        ? "the model's claim has no volume, so the cluster needs a StorageClass that provisions volumes (spec.storage.storageClassName) or a matching PersistentVolume"
        : "free or add capacity (e.g. GPUs), or relax resources and placement";
      found.push({ reason: "Unschedulable", message: `pod ${name} cannot be scheduled (${why}): ${hint}` });
    }
  }
  found.sort((a, b) => severity.indexOf(a.reason) - severity.indexOf(b.reason));
  return found[0];
}

export function isPodReady(pod: V1Pod): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

/** The termination message of a failed container: what the downloader said went wrong. */
export function terminationMessage(pod: V1Pod, container: string): string | undefined {
  const cs = pod.status?.containerStatuses?.find((c) => c.name === container);
  const terminated = cs?.state?.terminated ?? cs?.lastState?.terminated;
  if (!terminated || terminated.exitCode === 0) return undefined;
  return terminated.message?.trim() || terminated.reason || `exit code ${terminated.exitCode}`;
}
