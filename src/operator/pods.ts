/**
 * What is wrong with a set of pods, in words a person can act on. Pure: reads pod status as
 * the kubelet (or kwok) reports it.
 */
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { redactText } from "../downloader/redact.ts";

export interface PodProblem {
  reason:
    | "ImagePullBackOff"
    | "ModelLoadFailed"
    | "CrashLoopBackOff"
    | "CreateContainerConfigError"
    | "Unschedulable";
  message: string;
  /** For a crash loop: the container that crashes, so that its own words can be added. */
  crash?: CrashedContainer;
}

/** One container in a crash loop, as its pod's status says. */
export interface CrashedContainer {
  pod: string;
  /** What identifies one crash: the pod (its uid, else its name), the container, its restarts. */
  key: string;
  container: string;
  restarts: number;
  exitCode?: number;
  exitReason?: string;
  /** The container's own termination message (/dev/termination-log), when it wrote one. */
  terminationMessage?: string;
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
  "ModelLoadFailed",
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
        const crash = crashedContainer(pod, cs);
        const words = crash.terminationMessage ? `: ${runtimeWords(crash.terminationMessage)}` : "";
        const exit =
          crash.exitCode === undefined
            ? ""
            : `; last exit code ${crash.exitCode}${crash.exitReason ? ` (${crash.exitReason})` : ""}${words}`;
        found.push({
          reason: "CrashLoopBackOff",
          message: `container ${cs.name} of pod ${name} keeps crashing (${cs.restartCount} restarts)${exit}; see ${previousLogs(crash)}`,
          crash,
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

function crashedContainer(pod: V1Pod, cs: V1ContainerStatus): CrashedContainer {
  const last = cs.lastState?.terminated;
  const name = pod.metadata?.name ?? "?";
  const message = last?.message?.trim();
  return {
    pod: name,
    key: `${pod.metadata?.uid ?? name}/${cs.name}/${cs.restartCount}`,
    container: cs.name,
    restarts: cs.restartCount,
    ...(last ? { exitCode: last.exitCode } : {}),
    ...(last?.reason ? { exitReason: last.reason } : {}),
    ...(message ? { terminationMessage: message } : {}),
  };
}

function previousLogs(crash: CrashedContainer): string {
  return `\`kubectl logs ${crash.pod} -c ${crash.container} --previous\``;
}

/**
 * Whether a crashed container ended itself (it exited, whatever its code) rather than being
 * killed (by the OOM killer or a signal: exit codes from 128 up). A runtime that cannot load
 * its model exits; one killed while loading is told apart by its kill (OOMKilled says what to
 * change), so it stays a crash loop.
 */
export function endedItself(crash: CrashedContainer): boolean {
  return crash.exitCode !== undefined && crash.exitCode < 128 && crash.exitReason !== "OOMKilled";
}

/**
 * A crash loop told as what it is when the revision never served: the runtime gave up loading
 * the model. In its own words, from its termination message, else from `logWords` (the last
 * relevant lines of its previous log, runtimeWords); a command to read the whole log either way.
 */
export function loadFailure(crash: CrashedContainer, logWords: string | undefined): PodProblem {
  const words = crash.terminationMessage ? runtimeWords(crash.terminationMessage) : logWords;
  // "Completed" and "Error" only repeat what the code says; "exit code 0" is the surprise.
  const why =
    crash.exitReason && !["Completed", "Error"].includes(crash.exitReason) ? ` (${crash.exitReason})` : "";
  return {
    reason: "ModelLoadFailed",
    message: `the runtime cannot load the model: container ${crash.container} of pod ${crash.pod} stops before it serves (${crash.restarts} restarts, last exit code ${crash.exitCode}${why})${words ? `, saying: ${words}` : ""}; the whole log: ${previousLogs(crash)}`,
    crash,
  };
}

/**
 * How many characters of a runtime's own words status quotes: an exception and the line that
 * names the model fit; with the sentence around them it stays within an Event's message (1 KiB).
 */
export const runtimeWordsMaxChars = 600;
/** How many relevant lines at most: the exception, its cause, the runtime's own error lines. */
const runtimeWordsMaxLines = 6;

// Terminal colours and a leading timestamp say nothing a reader of status needs.
// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI escapes start with ESC.
const ansiEscape = /\u001b\[[0-9;?]*[A-Za-z]/g;
const leadingTimestamp = /^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*/;
// A Python traceback's frames (indented), its header (alone, or after a log level as uvicorn
// prints it: `ERROR:    Traceback (most recent call last):`) and the lines that chain two.
const tracebackFrame =
  /^(?:\s|The above exception was the direct cause|During handling of the above exception)|Traceback \(most recent call last\):$/;
// The line that ends a Python traceback: `ValueError: ...`, `mlserver.errors.ModelLoadError: ...`.
const exceptionLine = /^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::|$)/;
// An HTTP server's access log line (`"GET /v2/models/m/ready HTTP/1.1" 404 Not Found`): the
// kubelet's probes, never why the runtime stopped.
const accessLogLine = /"[A-Z]+ \S+ HTTP\/[\d.]+" \d{3}\b/;
const errorWords =
  /\b(?:error|errors|exception|fatal|critical|panic|failed|failure|cannot|can't|couldn't|could not|unable|not found|no such file|invalid|denied|refused|missing)\b/i;

/**
 * The lines of a log (or termination message) that say why a runtime stopped, as one line to
 * quote in status: its error lines and the exceptions that end its tracebacks, the last
 * `runtimeWordsMaxLines` of them, joined by " | ", without frames, access log lines (probes),
 * colours or timestamps;
 * without any error line, its last three lines (a custom image's plain message). Redacted
 * (redactText: URIs with credentials, tokens) and at most `maxChars` long, the later lines
 * kept first (the last words are the cause); "" for an empty log.
 */
export function runtimeWords(log: string, maxChars = runtimeWordsMaxChars): string {
  const lines = log
    .split(/\r?\n/)
    .map((line) => line.replace(ansiEscape, "").replace(leadingTimestamp, "").trimEnd())
    .filter((line) => line.trim() !== "");
  const told = lines.filter((line) => !tracebackFrame.test(line) && !accessLogLine.test(line));
  const relevant = told.filter((line) => exceptionLine.test(line) || errorWords.test(line));
  const picked = relevant.length > 0 ? relevant : (told.length > 0 ? told : lines).slice(-3);
  const unique = picked.filter((line, i) => picked.indexOf(line) === i);
  const quoted = unique
    .slice(-runtimeWordsMaxLines)
    .map((line) => redactText(line.trim().replace(/\s+/g, " ")));
  while (quoted.length > 1 && quoted.join(" | ").length > maxChars) quoted.shift();
  const joined = quoted.join(" | ");
  return joined.length > maxChars ? `${joined.slice(0, maxChars - 1)}…` : joined;
}
