/**
 * How `mlmodel promote` reaches the operator: an annotation on the MLModel that names the
 * canary revision it is about. Level-based: the operator acts while the annotation names the
 * spec's revision, whatever happened in between (a restart, a missed event), and a stale one
 * can never promote a later canary:
 *
 *   serving.mlmodel.dev/canary-promote: <revision>          promote the canary of <revision>
 *   serving.mlmodel.dev/canary-resume:  <revision>:<step>    end the pause of step <step> (from 0)
 *
 * The operator removes an annotation once it can no longer apply (it names another revision
 * than the spec's, the revision was promoted, or the step is past). The annotation and the
 * spec live on the same object, so the operator's cache never sees a command without the spec
 * it was written for: it cannot drop a command it has not acted on.
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

export function readCommands(annotations: Readonly<Record<string, string>> | undefined): CanaryCommands {
  const promote = annotations?.[commandAnnotations.promote]?.trim();
  const resume = /^([a-z0-9]+):(\d+)$/.exec(annotations?.[commandAnnotations.resume]?.trim() ?? "");
  return {
    ...(promote ? { promote } : {}),
    ...(resume ? { resume: { revision: resume[1]!, step: Number(resume[2]) } } : {}),
  };
}

/**
 * Command annotations the operator should remove: those that name another revision than the
 * spec's, a promotion of the stable revision (done), or a step the canary is past.
 */
export function staleCommands(
  annotations: Readonly<Record<string, string>> | undefined,
  specRevision: string,
  stableRevision: string | undefined,
  currentStep: number | undefined,
): string[] {
  const stale: string[] = [];
  const promote = annotations?.[commandAnnotations.promote];
  if (promote !== undefined) {
    const named = promote.trim();
    if (named !== specRevision || named === stableRevision) stale.push(commandAnnotations.promote);
  }
  const raw = annotations?.[commandAnnotations.resume];
  if (raw !== undefined) {
    const resume = readCommands(annotations).resume;
    const past =
      !resume ||
      resume.revision !== specRevision ||
      resume.revision === stableRevision ||
      (currentStep !== undefined && resume.step < currentStep);
    if (past) stale.push(commandAnnotations.resume);
  }
  return stale;
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
  if (!canary?.revision || !running) {
    const ended = canary?.phase
      ? ` (the last canary, of revision ${canary.revision}, is ${canary.phase})`
      : "";
    return { error: `no canary is running${ended}; nothing to promote` };
  }
  if (!options.step) return { key: commandAnnotations.promote, value: canary.revision };
  if (canary.phase !== "Paused") {
    return {
      error: `the canary of revision ${canary.revision} is ${canary.phase}, not paused: --step ends a pause; promote without --step to move all traffic now`,
    };
  }
  return { key: commandAnnotations.resume, value: `${canary.revision}:${canary.step ?? 0}` };
}
