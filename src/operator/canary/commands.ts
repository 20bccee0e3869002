/**
 * How `mlmodel promote` reaches the operator: an annotation on the MLModel that names the one
 * canary it is about, by its revision and its start time. Level-based: the operator acts while
 * the annotation names the running canary, whatever happened in between (a restart, a missed
 * event), and a command left behind can never act on a later canary, even one of the same
 * revision (it starts later):
 *
 *   serving.mlmodel.dev/canary-promote: <revision>@<start ms>          promote that canary
 *   serving.mlmodel.dev/canary-promote: <revision>@g<generation>       promote the canary of <revision>
 *                                                                      while the spec is at <generation>
 *   serving.mlmodel.dev/canary-resume:  <revision>@<start ms>:<step>   end the pause of step <step> (from 0)
 *
 * The generation form is what `mlmodel rollback` writes beside the spec it writes (no canary of
 * that revision has started yet): a rollback never waits on steps. The operator never removes a
 * command (it writes only the model's status, never the object: its RBAC has no patch on
 * mlmodels); a spent command is inert and the next `mlmodel promote` overwrites it. The
 * annotation and the spec live on the same object, so the operator's cache never sees a command
 * without the spec it was written for.
 *
 * An abort is `mlmodel rollback NAME`: it writes the stable revision's serving spec back
 * (as it always did), and a spec whose revision is the stable one has nothing to canary.
 */
import type { CanaryStatus } from "../../api/mlmodel.ts";
import type { KubeObject, Predicate } from "../../runtime/index.ts";

export const commandAnnotations = {
  promote: "serving.mlmodel.dev/canary-promote",
  resume: "serving.mlmodel.dev/canary-resume",
} as const;

export interface CanaryCommands {
  /** Revision to promote. */
  promote?: string;
  /** Revision and step whose pause ends. */
  resume?: { revision: string; step: number };
}

/**
 * Passes updates whose command annotations changed, so `mlmodel promote` wakes the operator
 * (a metadata change leaves the generation alone) and no other annotation edit does.
 */
export function commandsChangedPredicate(): Predicate {
  const commands = (obj: KubeObject) =>
    Object.values(commandAnnotations).map((key) => obj.metadata.annotations?.[key] ?? "");
  return (c) => c.type !== "update" || commands(c.old).join("\n") !== commands(c.object).join("\n");
}

/** The token that names one canary: its start time in ms (a later canary of the same revision starts later). */
export function canaryToken(canary: CanaryStatus | undefined): string | undefined {
  const started = canary?.startedAt ? Date.parse(canary.startedAt) : Number.NaN;
  return Number.isFinite(started) ? String(started) : undefined;
}

/**
 * The commands that name the canary the model runs now (status.canary as last written) or,
 * for a promote in the generation form, the spec at its current generation. Any other command
 * is inert and left out, so the state machine sees only commands meant for what it decides.
 */
export function readCommands(
  annotations: Readonly<Record<string, string>> | undefined,
  canary: CanaryStatus | undefined,
  generation: number | undefined,
): CanaryCommands {
  const token = canaryToken(canary);
  const promote = /^([a-z0-9]+)@(g?)(\d+)$/.exec(annotations?.[commandAnnotations.promote]?.trim() ?? "");
  const resume = /^([a-z0-9]+)@(\d+):(\d+)$/.exec(annotations?.[commandAnnotations.resume]?.trim() ?? "");
  const promoteMeant =
    promote &&
    (promote[2] === "g"
      ? generation !== undefined && Number(promote[3]) === generation
      : promote[1] === canary?.revision && promote[3] === token);
  const resumeMeant = resume && resume[1] === canary?.revision && resume[2] === token;
  return {
    ...(promoteMeant ? { promote: promote[1]! } : {}),
    ...(resumeMeant ? { resume: { revision: resume[1]!, step: Number(resume[3]) } } : {}),
  };
}

/** The command `mlmodel rollback` writes beside the spec of `revision` it writes (at `generation`). */
export function rollbackPromoteAnnotation(
  revision: string,
  generation: number,
): { key: string; value: string } {
  return { key: commandAnnotations.promote, value: `${revision}@g${generation}` };
}

/**
 * The annotation `mlmodel promote NAME [--step]` writes, from the model's status; an error a
 * person can act on when there is no canary to promote.
 */
export function promoteAnnotation(
  canary: CanaryStatus | undefined,
  options: { step?: boolean } = {},
): { key: string; value: string } | { error: string } {
  const running = canary && ["Waiting", "Progressing", "Paused"].includes(canary.phase ?? "");
  const token = canaryToken(canary);
  if (!canary?.revision || !running || !token) {
    const ended = canary?.phase
      ? ` (the last canary, of revision ${canary.revision}, is ${canary.phase})`
      : "";
    return { error: `no canary is running${ended}; nothing to promote` };
  }
  if (!options.step) return { key: commandAnnotations.promote, value: `${canary.revision}@${token}` };
  if (canary.phase !== "Paused") {
    return {
      error: `the canary of revision ${canary.revision} is ${canary.phase}, not paused: --step ends a pause; promote without --step to move all traffic now`,
    };
  }
  return { key: commandAnnotations.resume, value: `${canary.revision}@${token}:${canary.step ?? 0}` };
}
