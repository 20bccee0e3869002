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
import { canaryRequeue, withCanary } from "./canary.ts";
import type { Decision } from "./decide.ts";
import { lookGivenClaimMs } from "./download-pods.ts";
import type { Observation } from "./observe.ts";
import { modelDeployment, lookAgainMs as servingLookAgainMs } from "./serving-pods.ts";
import type { Synced } from "./sync.ts";

export interface Assessment {
  status: MLModelStatus;
  /** Reconcile again this soon: a failure was just recorded, the rollback follows. */
  requeueAfterMs?: number;
}

export function assess(o: Observation, d: Decision, s: Synced): Assessment {
  const observed = observedChildren(o, d, s);
  const assessed = assessObserved(o, d, s, observed);
  // A download pod waiting for its new claim's volume is reported as Downloading for a grace
  // period; if nothing else wakes the model by then, look again so a claim that never binds
  // is reported (no watch event would bring the end of a grace period). And a download Job
  // with no pod ready yet is looked at again: its pods are not watched (download-pods.ts), so
  // no event would say that one cannot pull its image or be scheduled. But seldom while the
  // claim is not bound: the claim is watched, and its binding wakes the model; not at all while
  // the pod says it waits for that binding (claimBinding). Looked at every 5 s instead, 300
  // download pods waiting for their volumes cost 1.4 to 3.2 lists per model, 0.75 to 0.8 at
  // 30 s (bench/README.md phase J).
  // The serving pods of a rollout that has not settled are looked at again too, for the same
  // reason: they are not watched either (serving-pods.ts).
  const graceLeft = claimBinding(observed);
  const lookAgain = earliest(
    earliest(
      graceLeft === undefined ? undefined : graceLeft + 100,
      lookGivenClaimMs(s.job, o.now, {
        bound: observed.storage?.status?.phase === "Bound",
        podWaitsForIt: graceLeft !== undefined,
      }),
    ),
    servingLookAgainMs(observed.deployment, o.model, o.now),
  );
  if (lookAgain === undefined) return assessed;
  return { ...assessed, requeueAfterMs: earliest(assessed.requeueAfterMs, lookAgain) };
}

/** The sooner of two optional delays. */
export function earliest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
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
      plan?.source.type === "download"
        ? o.children.claims.find((c) => c.metadata?.name === (plan.source as { claimName: string }).claimName)
        : undefined,
    job: s.job,
    jobPods: o.downloadPods.filter((p) => jobName && p.metadata?.labels?.["job-name"] === jobName),
    deployment: modelDeployment(model, s.serving.deployments),
    pods: o.pods?.filter((p) => p.metadata?.labels?.[labels.component] === "server"),
    service: s.serving.services.find((x) => x.metadata?.name === childNames.service(name)),
  };
}

function assessObserved(o: Observation, d: Decision, s: Synced, observed: Observed): Assessment {
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
    return withRequeue(rolledBack, canary && canaryRequeue(canary, model.status, rolledBack));
  }
  // A canary's failure is the state machine's to record (the stable revision serves meanwhile);
  // an ordinary rollout's, the status's (the spec's revision serves and failed).
  const failed =
    canary?.decision.failed ??
    (s.revision === d.specRevision
      ? failureToRecord(model, status, d.specRevision, s.revisions, now)
      : undefined);
  // Recorded first, served next: the next reconcile reads it back (writtenStatus) and rolls back.
  if (failed) return { status: { ...status, revision: { ...status.revision, failed } }, requeueAfterMs: 100 };
  return withRequeue(status, canary && canaryRequeue(canary, model.status, status));
}

function withRequeue(status: MLModelStatus, requeueAfterMs: number | undefined): Assessment {
  return requeueAfterMs === undefined ? { status } : { status, requeueAfterMs };
}
