/**
 * The canary's part of the MLModel status: the Canary condition, one Event per transition,
 * each revision serving with its replicas and share of the traffic, and the per-revision URLs.
 * Pure functions of status.canary and what the operator observed.
 */
import type { CanaryStatus, Condition, ServingRevision } from "../../api/mlmodel.ts";
import { canaryNames } from "./desired.ts";
import { isRunning } from "./state.ts";

export const canaryConditionType = "Canary";

/**
 * Canary: True while a canary runs, False once it ended; the reason is the phase (Waiting,
 * Progressing, Paused, Promoting, Aborting, Promoted, Aborted) and status.canary.reason says
 * why (e.g. StepPaused, CrashLoopBackOff). Absent before the first canary.
 */
export function canaryCondition(
  canary: CanaryStatus | undefined,
  previous: readonly Condition[] | undefined,
  generation: number,
  now: string,
): Condition | undefined {
  if (!canary?.phase) return undefined;
  const status = isRunning(canary) ? "True" : "False";
  const before = previous?.find((c) => c.type === canaryConditionType);
  return {
    type: canaryConditionType,
    status,
    reason: canary.phase,
    message: canary.message ?? "",
    observedGeneration: generation,
    lastTransitionTime: before && before.status === status ? before.lastTransitionTime : now,
  };
}

export interface CanaryEvent {
  type: "Normal" | "Warning";
  reason: string;
  message: string;
}

/** One Event per change a person should hear about: start, each step, pause, promotion, abort. */
export function canaryEvent(
  before: CanaryStatus | undefined,
  after: CanaryStatus | undefined,
): CanaryEvent | undefined {
  if (!after?.phase) return undefined;
  const message = after.message ?? "";
  const isNew = before?.revision !== after.revision || before?.startedAt !== after.startedAt;
  if (
    !isNew &&
    before?.phase === after.phase &&
    before?.step === after.step &&
    before?.reason === after.reason
  ) {
    return undefined;
  }
  switch (after.phase) {
    case "Waiting":
      return before?.phase === "Waiting" && !isNew
        ? undefined
        : { type: "Warning", reason: "CanaryWaiting", message };
    case "Progressing":
      if (isNew || before?.phase === "Waiting")
        return {
          type: "Normal",
          reason: after.reason === "Replaced" ? "CanaryReplaced" : "CanaryStarted",
          message,
        };
      if (after.reason === "StepsChanged" && before?.reason !== "StepsChanged")
        return { type: "Normal", reason: "CanaryRestarted", message };
      if (before?.step !== after.step) return { type: "Normal", reason: "CanaryStep", message };
      return undefined;
    case "Paused": {
      const unhealthy = !["StepPaused", "WaitingForPromotion"].includes(after.reason ?? "");
      if (before?.phase === "Paused" && before.step === after.step && !unhealthy) return undefined;
      return unhealthy
        ? { type: "Warning", reason: "CanaryUnhealthy", message }
        : { type: "Normal", reason: "CanaryPaused", message };
    }
    case "Promoting":
      return before?.phase === "Promoting"
        ? undefined
        : { type: "Normal", reason: "CanaryPromoting", message };
    case "Promoted":
      return before?.phase === "Promoted" ? undefined : { type: "Normal", reason: "CanaryPromoted", message };
    case "Aborting":
      return before?.phase === "Aborting"
        ? undefined
        : { type: "Warning", reason: "CanaryAborting", message };
    case "Aborted":
      return before?.phase === "Aborted" ? undefined : { type: "Warning", reason: "CanaryAborted", message };
  }
}

export interface ObservedRevision {
  revision: string;
  number?: number;
  replicas: number;
  readyReplicas: number;
}

/** status.revision.serving: the stable revision, and the canary while one serves. */
export function servingRevisions(
  stable: ObservedRevision | undefined,
  canary: ObservedRevision | undefined,
  shares: { stable: number; canary: number },
): ServingRevision[] {
  const entry = (
    o: ObservedRevision,
    role: "Stable" | "Canary",
    trafficPercent: number,
  ): ServingRevision => ({
    revision: o.revision,
    ...(o.number !== undefined ? { number: o.number } : {}),
    role,
    replicas: o.replicas,
    readyReplicas: o.readyReplicas,
    trafficPercent,
  });
  const out: ServingRevision[] = [];
  if (stable) out.push(entry(stable, "Stable", canary ? shares.stable : stable.readyReplicas > 0 ? 100 : 0));
  if (canary) out.push(entry(canary, "Canary", shares.canary));
  return out;
}

/** URLs that reach one revision alone (its Service), while a canary runs. */
export function canaryUrls(
  model: string,
  namespace: string,
  ports: { restPort?: number; grpcPort?: number },
): { stableURL?: string; canaryURL?: string } {
  const url = (service: string) => {
    const host = `${service}.${namespace}.svc`;
    if (ports.restPort) return `http://${host}:${ports.restPort}`;
    return ports.grpcPort ? `${host}:${ports.grpcPort}` : undefined;
  };
  const stableURL = url(canaryNames.stableService(model));
  const canaryURL = url(canaryNames.canaryService(model));
  return { ...(stableURL ? { stableURL } : {}), ...(canaryURL ? { canaryURL } : {}) };
}
