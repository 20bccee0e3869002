/**
 * The canary state machine: a pure function from what the operator observes (the spec's
 * revision, the stable revision, the last status.canary, health, the split's readiness, user
 * commands, the time) to what to serve and the next status.canary. Level-based: status.canary
 * is the only memory (step, when the step's pause started), and it is re-derived on every
 * reconcile, so an operator restart at any point resumes where the status says.
 *
 *                      spec revision X != stable S, S ready, rollout.canary set
 *   (no canary) ───────────────────────────────────────────────────────────────▶ Progressing(0)
 *        ▲                                                                           │ step's split ready
 *        │ X == S                                                                     ▼
 *   Promoted ◀── S := X ── Promoting ◀── last step done / promote / canary removed ── Paused(i)
 *                              ▲                                        pause over ──┘  └─▶ Progressing(i+1)
 *   Aborted ◀── canary gone ── Aborting ◀── unhealthy (autoRollback) / spec back to S (rollback)
 *
 *   Waiting: the Gateway API route cannot exist yet (CRD missing); the stable serves alone.
 *   A spec edit to a third revision Y replaces the canary (Progressing(0) for Y); an edit of the
 *   steps restarts it at step 0; scaling edits change only the replica split.
 */
import type { CanaryStatus } from "../../api/mlmodel.ts";
import type { FailedRevision } from "../rollback.ts";
import type { CanaryCommands } from "./commands.ts";
import type { CanaryHealth } from "./health.ts";
import { type CanaryPlan, stepLabel } from "./steps.ts";

export type CanaryPhase = NonNullable<CanaryStatus["phase"]>;

/** What the Deployments serve, for the sync stage. */
export type Serve =
  /** One revision, no canary: the stable Deployment runs it; no canary Deployment. */
  | { kind: "single"; revision: string }
  /** Both: the stable Deployment runs `stable`, the canary Deployment `canary`, split at percent. */
  | { kind: "split"; stable: string; canary: string; percent: number }
  /**
   * The stable Deployment rolls to `canary` with all replicas (a rolling update: no downtime);
   * the canary Deployment keeps its replicas until that is done, then goes.
   */
  | { kind: "promoting"; stable: string; canary: string }
  /** The stable Deployment takes every replica back; the canary goes once it has (or is not serving). */
  | { kind: "aborting"; stable: string; canary: string };

/** What the split of a step gives, as the sync stage computes it from the replica counts. */
export interface SplitView {
  effectivePercent: number;
  exact: boolean;
  note?: string;
  /** The canary's replicas for this percent are ready (and the route carries its weight). */
  ready: boolean;
}

export interface CanaryInput {
  /** ISO time. */
  now: string;
  /** Revision of the spec as written. */
  specRevision: string;
  /** The last ready revision, when its spec is recorded (a ControllerRevision): the stable one. */
  stableRevision?: string;
  /** spec.rollout.canary, normalised; undefined when new revisions roll out without a canary. */
  plan?: CanaryPlan;
  /** status.canary as last written. */
  previous?: CanaryStatus;
  /** status.revision.failed: an automatic rollback (abort) recorded for a revision. */
  failed?: FailedRevision;
  autoRollback: boolean;
  /** Whether the cluster serves HTTPRoutes (matters only with trafficRouting.gatewayAPI). */
  gatewayServed: boolean;
  commands: CanaryCommands;
  health: CanaryHealth;
  /** The split a percentage gives and whether it is in place, for the current replicas. */
  split(percent: number): SplitView;
  /** Whether the canary Deployment is gone (or never existed). */
  canaryGone: boolean;
  /** Revision numbers (mlmodel history), for messages. */
  numberOf?(revision: string): number | undefined;
}

export interface CanaryDecision {
  serve: Serve;
  /** The next status.canary; undefined when there never was one. */
  status?: CanaryStatus;
  /** An automatic abort to record in status.revision.failed (the auto-rollback record). */
  failed?: FailedRevision;
  /** When to look again (a timed pause ends). */
  requeueAfterMs?: number;
}

const running: ReadonlySet<string> = new Set(["Waiting", "Progressing", "Paused", "Promoting", "Aborting"]);

export function isRunning(status: CanaryStatus | undefined): boolean {
  return running.has(status?.phase ?? "");
}

function rev(input: CanaryInput, revision: string | undefined): string {
  const n = revision ? input.numberOf?.(revision) : undefined;
  return n !== undefined ? `revision ${n} (${revision})` : `revision ${revision ?? "?"}`;
}

function shortRev(input: CanaryInput, revision: string | undefined): string {
  const n = revision ? input.numberOf?.(revision) : undefined;
  return n !== undefined ? `rev ${n}` : `rev ${(revision ?? "?").slice(0, 7)}`;
}

/** Fields every record carries: which revisions, their numbers. */
function identity(input: CanaryInput, revision: string, stable: string): CanaryStatus {
  const number = input.numberOf?.(revision);
  const stableNumber = input.numberOf?.(stable);
  return {
    revision,
    ...(number !== undefined ? { revisionNumber: number } : {}),
    stableRevision: stable,
    ...(stableNumber !== undefined ? { stableRevisionNumber: stableNumber } : {}),
  };
}

function ended(
  input: CanaryInput,
  previous: CanaryStatus,
  phase: "Promoted" | "Aborted",
  reason: string,
  message: string,
): CanaryStatus {
  const { summary: _s, pauseEndsAt: _p, stepReadyAt: _r, ...kept } = previous;
  return { ...kept, phase, reason, message, finishedAt: previous.finishedAt ?? input.now };
}

/** A running canary of `canary` winding down: the stable revision takes all traffic back. */
function aborting(
  input: CanaryInput,
  previous: CanaryStatus,
  canary: string,
  stable: string,
  reason: string,
  message: string,
): CanaryDecision {
  const serve: Serve = { kind: "aborting", stable, canary };
  if (input.canaryGone) {
    const done = ended(input, previous, "Aborted", reason, message);
    return { serve: { kind: "single", revision: stable }, status: done };
  }
  const { pauseEndsAt: _p, ...kept } = previous;
  return {
    serve,
    status: {
      ...kept,
      phase: "Aborting",
      reason,
      message,
      summary: `${shortRev(input, canary)} aborting (${reason})`,
    },
  };
}

export function decideCanary(input: CanaryInput): CanaryDecision {
  const spec = input.specRevision;
  const stable = input.stableRevision;
  const previous = input.previous;
  const prevRunning = isRunning(previous) && previous?.revision !== undefined;

  // An automatic abort (or rollback) is recorded for the spec's revision: the stable serves alone.
  if (stable && stable !== spec && input.failed?.revision === spec) {
    const failed = input.failed;
    const message = `${rev(input, spec)} was aborted (${failed.reason}): ${failed.message ?? ""}. ${rev(input, stable)} serves all traffic; the spec is unchanged: fix it and a new canary starts`;
    if (previous?.revision === spec && (prevRunning || previous.phase === "Aborted")) {
      if (previous.phase === "Aborted")
        return { serve: { kind: "single", revision: stable }, status: previous };
      return aborting(input, previous, spec, stable, failed.reason ?? "Failed", message);
    }
    return { serve: { kind: "single", revision: stable }, ...(previous ? { status: previous } : {}) };
  }

  // Nothing to canary: the spec's revision is the stable one (or nothing was ever ready).
  if (!stable || spec === stable) {
    if (previous && prevRunning) {
      if (previous.revision === spec) {
        const status = ended(
          input,
          previous,
          "Promoted",
          previous.reason === "PromotedByUser" ? "PromotedByUser" : "Promoted",
          `${rev(input, spec)} was promoted and serves all traffic`,
        );
        return { serve: { kind: "single", revision: spec }, status };
      }
      return aborting(
        input,
        previous,
        previous.revision!,
        spec,
        "RolledBack",
        `the spec is back at ${rev(input, spec)} (mlmodel rollback, or an edit): the canary of ${rev(input, previous.revision)} is aborted`,
      );
    }
    return { serve: { kind: "single", revision: spec }, ...(previous ? { status: previous } : {}) };
  }

  // A new revision, but no canary is configured (any more).
  const plan = input.plan;
  if (!plan) {
    if (previous && prevRunning && previous.revision === spec) {
      return promoting(
        input,
        previous,
        spec,
        stable,
        "CanaryRemoved",
        "spec.rollout.canary was removed: the canary is promoted",
      );
    }
    const status =
      previous && prevRunning
        ? ended(
            input,
            previous,
            "Aborted",
            "Replaced",
            `${rev(input, spec)} rolls out without a canary (spec.rollout.canary was removed) and replaces the canary of ${rev(input, previous.revision)}`,
          )
        : previous;
    return { serve: { kind: "single", revision: spec }, ...(status ? { status } : {}) };
  }

  return progress(input, plan, spec, stable);
}

function promoting(
  input: CanaryInput,
  previous: CanaryStatus,
  canary: string,
  stable: string,
  reason: string,
  message: string,
): CanaryDecision {
  const { pauseEndsAt: _p, ...kept } = previous;
  return {
    serve: { kind: "promoting", stable, canary },
    status: {
      ...kept,
      phase: "Promoting",
      reason,
      message: `${message}; ${rev(input, canary)} replaces ${rev(input, stable)} on every replica`,
      summary: `${shortRev(input, canary)} promoting`,
    },
  };
}

/** A canary of `spec` against `stable` is wanted: start it, or move it on. */
function progress(input: CanaryInput, plan: CanaryPlan, spec: string, stable: string): CanaryDecision {
  const previous = input.previous;
  const same = previous?.revision === spec && previous.stableRevision === stable && isRunning(previous);
  let record: CanaryStatus;
  let fresh = false;
  if (!same) {
    const replaced = previous && isRunning(previous) && previous.revision !== spec;
    record = {
      ...identity(input, spec, stable),
      step: 0,
      steps: plan.steps.length,
      stepsHash: plan.stepsHash,
      startedAt: input.now,
      stepStartedAt: input.now,
      reason: replaced ? "Replaced" : "Started",
      message: replaced
        ? `${rev(input, spec)} replaces the canary of ${rev(input, previous?.revision)}`
        : `canary of ${rev(input, spec)} started beside ${rev(input, stable)}`,
    };
    fresh = true;
  } else if (previous.stepsHash !== plan.stepsHash && previous.phase !== "Promoting") {
    const { stepReadyAt: _r, pauseEndsAt: _p, ...kept } = previous;
    record = {
      ...kept,
      step: 0,
      steps: plan.steps.length,
      stepsHash: plan.stepsHash,
      stepStartedAt: input.now,
      reason: "StepsChanged",
      message: "spec.rollout.canary changed: the canary starts again from step 1",
    };
    fresh = true;
  } else {
    record = { ...previous };
  }
  const mode = plan.gateway ? "GatewayAPI" : "Replicas";
  record = { ...record, mode };

  // A promotion, once decided, runs to its end (a failing promotion is an ordinary failed
  // rollout: auto-rollback records it and the first branch of decideCanary aborts).
  if (record.phase === "Promoting")
    return { serve: { kind: "promoting", stable, canary: spec }, status: record };
  if (input.commands.promote === spec) {
    return promoting(input, record, spec, stable, "PromotedByUser", "promoted by mlmodel promote");
  }
  if (plan.gateway && !input.gatewayServed) {
    const { stepReadyAt: _r, pauseEndsAt: _p, ...kept } = record;
    return {
      serve: { kind: "single", revision: stable },
      status: {
        ...kept,
        phase: "Waiting",
        reason: "GatewayAPIUnavailable",
        message: `the cluster has no Gateway API HTTPRoute kind (spec.rollout.canary.trafficRouting.gatewayAPI): ${rev(input, stable)} serves all traffic and the canary of ${rev(input, spec)} waits; install the Gateway API CRDs, or remove trafficRouting to split by replicas`,
        summary: `${shortRev(input, spec)} waiting (no Gateway API)`,
      },
    };
  }
  if (record.phase === "Waiting") {
    // The canary can start now (the route can exist, the name is free): from its first step.
    const { stepReadyAt: _r, ...kept } = record;
    record = {
      ...kept,
      step: 0,
      stepStartedAt: input.now,
      reason: "Started",
      message: `canary of ${rev(input, spec)} started beside ${rev(input, stable)} (it waited: ${record.reason})`,
    };
    fresh = true;
  }
  if (!input.health.healthy) {
    const { reason, message } = input.health;
    if (input.autoRollback) {
      const failed: FailedRevision = {
        revision: spec,
        ...(input.numberOf?.(spec) !== undefined ? { number: input.numberOf(spec)! } : {}),
        reason,
        message,
        at: input.now,
      };
      const decision = aborting(
        input,
        record,
        spec,
        stable,
        reason,
        `the canary of ${rev(input, spec)} is unhealthy: ${message}; ${rev(input, stable)} takes all traffic back (spec.rollout.autoRollback)`,
      );
      return { ...decision, failed };
    }
  }
  if (plan.steps.length === 0) {
    return promoting(input, record, spec, stable, "Promoted", "spec.rollout.canary.trafficPercent is 100");
  }
  return atStep(input, plan, record, spec, stable, fresh);
}

function atStep(
  input: CanaryInput,
  plan: CanaryPlan,
  record: CanaryStatus,
  spec: string,
  stable: string,
  fresh: boolean,
): CanaryDecision {
  const index = Math.min(record.step ?? 0, plan.steps.length - 1);
  const step = plan.steps[index]!;
  const view = input.split(step.trafficPercent);
  const where = stepLabel(index, plan);
  const percentText = view.exact
    ? `${step.trafficPercent}%`
    : `${view.effectivePercent}% (${step.trafficPercent}% asked)`;
  const base: CanaryStatus = {
    ...record,
    step: index,
    steps: plan.steps.length,
    trafficPercent: step.trafficPercent,
    effectivePercent: view.effectivePercent,
    exact: view.exact,
  };
  const serve: Serve = { kind: "split", stable, canary: spec, percent: step.trafficPercent };
  const coarse = view.note ? `; ${view.note}` : "";

  if (!input.health.healthy) {
    // autoRollback is off (an abort returned earlier): hold the step and say why.
    const { pauseEndsAt: _p, ...kept } = base;
    return {
      serve,
      status: {
        ...kept,
        phase: "Paused",
        reason: input.health.reason,
        message: `the canary of ${rev(input, spec)} is unhealthy and holds at ${where}: ${input.health.message}; spec.rollout.autoRollback is off, so promote (mlmodel promote), roll back (mlmodel rollback) or fix the spec`,
        summary: `${shortRev(input, spec)} at ${percentText} (${where}, unhealthy)`,
      },
    };
  }

  const ready = view.ready && !fresh;
  if (!ready) {
    const { pauseEndsAt: _p, ...kept } = base;
    // Still on the way to this step, nothing new to say: the record stands as written (a
    // status that does not change is not written again).
    if (!fresh && record.phase === "Progressing" && !record.stepReadyAt) return { serve, status: kept };
    return {
      serve,
      status: {
        ...kept,
        phase: "Progressing",
        reason: fresh ? (record.reason ?? "Started") : "StepProgressing",
        message: `${fresh && record.message ? `${record.message}; ` : ""}moving to ${percentText} at ${where}: waiting for the canary's replicas to be ready${record.stepReadyAt ? " again" : ""}${coarse}`,
        summary: `${shortRev(input, spec)} to ${percentText} (${where})`,
      },
    };
  }

  const readyAt = record.stepReadyAt ?? input.now;
  const { pauseEndsAt: _p, ...unpaused } = base;
  const held: CanaryStatus = { ...unpaused, stepReadyAt: readyAt };
  const pause = step.pause;
  let over = pause.kind === "none";
  let endsAt: string | undefined;
  if (pause.kind === "timed") {
    const end = new Date(readyAt).getTime() + pause.seconds * 1000;
    endsAt = new Date(end).toISOString();
    over = new Date(input.now).getTime() >= end;
  } else if (pause.kind === "indefinite") {
    const resume = input.commands.resume;
    over = resume?.revision === spec && resume.step === index;
  }

  if (over) {
    if (index + 1 >= plan.steps.length) {
      return promoting(
        input,
        held,
        spec,
        stable,
        "StepsComplete",
        `the canary of ${rev(input, spec)} completed its ${plan.steps.length} step(s)`,
      );
    }
    const next = plan.steps[index + 1]!;
    const nextView = input.split(next.trafficPercent);
    const { stepReadyAt: _r, ...kept } = held;
    return {
      serve: { ...serve, percent: next.trafficPercent },
      status: {
        ...kept,
        phase: "Progressing",
        reason: "StepProgressing",
        step: index + 1,
        stepStartedAt: input.now,
        trafficPercent: next.trafficPercent,
        effectivePercent: nextView.effectivePercent,
        exact: nextView.exact,
        message: `moving to ${next.trafficPercent}% at ${stepLabel(index + 1, plan)}`,
        summary: `${shortRev(input, spec)} to ${next.trafficPercent}% (${stepLabel(index + 1, plan)})`,
      },
    };
  }

  const single = plan.steps.length === 1 && pause.kind === "indefinite";
  const until =
    pause.kind === "timed"
      ? `until ${endsAt}`
      : single
        ? "until mlmodel promote"
        : "until mlmodel promote --step (or mlmodel promote)";
  const status: CanaryStatus = {
    ...held,
    phase: "Paused",
    reason: single ? "WaitingForPromotion" : "StepPaused",
    message: `${rev(input, spec)} serves ${percentText} of the traffic beside ${rev(input, stable)} at ${where}, held ${until}${coarse}`,
    summary: `${shortRev(input, spec)} at ${percentText} (${where}, paused)`,
    ...(endsAt ? { pauseEndsAt: endsAt } : {}),
  };
  const requeueAfterMs = endsAt
    ? Math.max(new Date(endsAt).getTime() - new Date(input.now).getTime(), 1)
    : undefined;
  return { serve, status, ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}) };
}
