/**
 * Stage 4, status: the model's status as a pure function of what was observed, decided and
 * synced. computeStatus (status.ts) judges the children; here the canary (canary.ts), the
 * revision numbers and the automatic rollback are added: while rolled back the status says so,
 * and a newly failed revision (or an unhealthy canary) is recorded first (the status write is
 * the memory) and served back next.
 */
import type { MLModelStatus } from "../../api/mlmodel.ts";
import { childNames, labels } from "../names.ts";
import { withRevisionNumbers } from "../revisions.ts";
import { failureToRecord, withRollback } from "../rollback.ts";
import { claimBinding, computeStatus, type Observed } from "../status.ts";
import { canaryWakes, withCanary } from "./canary.ts";
import type { Decision } from "./decide.ts";
import { lookGivenClaimMs, lookNoLongerNeeded } from "./download-pods.ts";
import type { Observation } from "./observation.ts";
import {
  modelDeployment,
  lookAgainMs as servingLookAgainMs,
  servingLookNoLongerNeeded,
} from "./serving-pods.ts";
import type { Synced } from "./sync.ts";
import { failureRecordedWakeMs, type Waits, type Wake, type WakeReason, wakeAfter } from "./wake-up.ts";

export interface Assessment {
  status: MLModelStatus;
  /** What the status waits for that no watch brings (see assess). */
  waits: Waits;
}

/**
 * The status, and what it waits for that no watch event would bring:
 * - a failure just recorded: the rollback follows at once;
 * - a download pod waiting for its new claim's volume is reported as Downloading for a grace
 *   period, and the end of that grace is looked at, so a claim that never binds is reported;
 * - a download Job with no pod ready, and a rollout that has not settled: their pods are not
 *   watched, so the pods are read again (download-pods.ts, serving-pods.ts). The download
 *   pods seldom while the claim is not bound (its binding is watched and wakes the model), and
 *   not at all while the pod says it waits for that binding (claimBinding);
 * - a canary's pause, or its next step (canary.ts, canaryWakes).
 * Those looks are over once the Job has a pod ready or has ended, and once the Deployment has
 * settled: a look still pending would read nothing new.
 */
export function assess(o: Observation, d: Decision, s: Synced): Assessment {
  const observed = observedChildren(o, d, s);
  const now = Date.parse(o.now);
  const { status, wakes: statusWakes } = assessObserved(o, d, s, observed, now);
  const graceLeft = claimBinding(observed);
  const wakes = [
    ...statusWakes,
    ...wakeAfter("claim grace ends", now, graceLeft === undefined ? undefined : graceLeft + 100),
    ...wakeAfter(
      "download pods",
      now,
      lookGivenClaimMs(s.job, o.now, {
        // A NodeCache download has no claim to wait for.
        bound: observed.storage?.status?.phase === "Bound" || usesNodeCache(d.plan),
        podWaitsForIt: graceLeft !== undefined,
      }),
    ),
    ...wakeAfter("serving pods", now, servingLookAgainMs(observed.deployment, o.model, o.now)),
  ];
  const over: WakeReason[] = [
    ...(lookNoLongerNeeded(s.job, o.now) ? (["download pods"] as const) : []),
    ...(servingLookNoLongerNeeded(o.model, observed.deployment) ? (["serving pods"] as const) : []),
  ];
  return { status, waits: { wakes, over } };
}

function usesNodeCache(plan: Decision["plan"]): boolean {
  return plan?.source.type === "download" && plan.source.nodeCache !== undefined;
}

function observedChildren(o: Observation, d: Decision, s: Synced): Observed {
  const { model, now } = o;
  const name = model.metadata.name!;
  const plan = d.plan;
  const jobName = s.job?.metadata?.name;
  return {
    model,
    now,
    planFailure: d.planFailure,
    plan,
    ...(s.downloadPlan && s.downloadPlan !== plan ? { downloadPlan: s.downloadPlan } : {}),
    revision: s.revision,
    missing: d.missing,
    storage:
      plan?.source.type === "download" && !plan.source.nodeCache
        ? o.children.claims.find((c) => c.metadata?.name === (plan.source as { claimName: string }).claimName)
        : undefined,
    job: s.job,
    jobPods: o.downloadPods.filter((p) => jobName && p.metadata?.labels?.["job-name"] === jobName),
    deployment: modelDeployment(model, s.serving.deployments),
    pods: o.pods?.filter((p) => p.metadata?.labels?.[labels.component] === "server"),
    ...(o.crashWords ? { crashWords: o.crashWords } : {}),
    service: s.serving.services.find((x) => x.metadata?.name === childNames.service(name)),
    ...(o.nodeCache ? { nodeCache: o.nodeCache.states ? { states: o.nodeCache.states } : {} } : {}),
  };
}

/** The status, and the wakes it asks for: the rollback after a failure recorded, the canary's. */
function assessObserved(
  o: Observation,
  d: Decision,
  s: Synced,
  observed: Observed,
  nowMs: number,
): { status: MLModelStatus; wakes: Wake[] } {
  const { model, now } = o;
  const computed = computeStatus(observed);
  const canary = d.canary;
  const withItsCanary =
    canary && d.specRevision
      ? withCanary(computed, o, canary, s, d.specRevision, d.rollback !== undefined)
      : computed;
  const status = withRevisionNumbers(withItsCanary, s.revisions);
  const generation = model.metadata.generation ?? 0;
  if (d.rollback) {
    const { failed, target } = d.rollback;
    const rolledBack = withRollback(status, model.status, failed, target, generation, now);
    return { status: rolledBack, wakes: canary ? canaryWakes(canary, model.status, rolledBack, nowMs) : [] };
  }
  // A canary's failure is the state machine's to record (the stable revision serves meanwhile);
  // an ordinary rollout's, the status's (the spec's revision serves and failed).
  const failed =
    canary?.decision.failed ??
    (s.revision === d.specRevision
      ? failureToRecord(model, status, d.specRevision, s.revisions, now)
      : undefined);
  // Recorded first, served next: the next reconcile reads it back (ModelMemory.written) and rolls back.
  if (failed)
    return {
      status: { ...status, revision: { ...status.revision, failed } },
      wakes: wakeAfter("failure recorded", nowMs, failureRecordedWakeMs),
    };
  return { status, wakes: canary ? canaryWakes(canary, model.status, status, nowMs) : [] };
}
