/**
 * spec.rollout.canary, normalised: the steps a canary runs and its limits. The one-percentage
 * form is one step held until `mlmodel promote` (100 promotes at once, so a Git edit to 100 is
 * a promotion); a step's pause is none (move on once its replicas are ready), timed, or
 * indefinite (until the user ends it). One place for these rules: the state machine, the
 * status and the docs read them from here.
 */
import type { CanarySpec, MLModelSpec } from "../../api/mlmodel.ts";
import { shortHash } from "../names.ts";

export type Pause = { kind: "none" } | { kind: "timed"; seconds: number } | { kind: "indefinite" };

export interface CanaryStep {
  trafficPercent: number;
  pause: Pause;
}

export interface GatewayRouting {
  parentRefs: NonNullable<NonNullable<CanarySpec["trafficRouting"]>["gatewayAPI"]>["parentRefs"];
  hostnames: string[];
}

export interface CanaryPlan {
  /** Empty: promote at once (trafficPercent 100). */
  steps: CanaryStep[];
  /** Changes when the steps change; a canary whose steps changed starts again from step 0. */
  stepsHash: string;
  maxRestarts: number;
  maxUnreadySeconds: number;
  /** Exact weights through an HTTPRoute; absent: the split is made by replica counts. */
  gateway?: GatewayRouting;
}

/** The schema's defaults for the health limits (the API server fills them in; tests may not). */
export const canaryDefaults = { maxRestarts: 2, maxUnreadySeconds: 60 } as const;

function pauseOf(pause: { durationSeconds?: number } | undefined): Pause {
  if (!pause) return { kind: "none" };
  return pause.durationSeconds === undefined
    ? { kind: "indefinite" }
    : { kind: "timed", seconds: pause.durationSeconds };
}

/** The canary of a spec, or undefined when new revisions roll out without one. */
export function canaryPlan(spec: Pick<MLModelSpec, "rollout">): CanaryPlan | undefined {
  const canary = spec.rollout?.canary;
  if (!canary) return undefined;
  let steps: CanaryStep[];
  if (canary.steps) {
    steps = canary.steps.map((s) => ({ trafficPercent: s.trafficPercent, pause: pauseOf(s.pause) }));
  } else {
    const percent = canary.trafficPercent ?? 100;
    steps = percent >= 100 ? [] : [{ trafficPercent: percent, pause: { kind: "indefinite" } }];
  }
  const gatewayAPI = canary.trafficRouting?.gatewayAPI;
  return {
    steps,
    stepsHash: shortHash(steps),
    maxRestarts: canary.maxRestarts ?? canaryDefaults.maxRestarts,
    maxUnreadySeconds: canary.maxUnreadySeconds ?? canaryDefaults.maxUnreadySeconds,
    ...(gatewayAPI
      ? { gateway: { parentRefs: gatewayAPI.parentRefs, hostnames: gatewayAPI.hostnames ?? [] } }
      : {}),
  };
}

/** "step 2/3" for people: steps count from 1 in words, from 0 in status.canary.step. */
export function stepLabel(index: number, plan: CanaryPlan): string {
  return `step ${index + 1}/${plan.steps.length}`;
}
