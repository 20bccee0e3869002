/**
 * `mlmodel promote NAME [--step]`: moves all traffic to a running canary, or with --step ends
 * the indefinite pause of its current step. It writes a command annotation that names the
 * canary's revision (and step): level-based, so it survives an operator restart, never acts
 * twice and can never promote a later canary (docs/canary.md, "Commands").
 */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { promoteAnnotation } from "../../operator/canary/commands.ts";
import { CliError } from "../errors.ts";
import { commonFlags, commonFlagsHelp, openSession, parseModelCommand } from "../views/session.ts";
import { isStale } from "../views/status.ts";
import { explainApiError } from "./status.ts";

export const summary = "promote an MLModel's canary (all traffic to the new revision), or end a paused step";

const help = `Usage: mlmodel promote NAME [--step] [flags]

Promotes the running canary of NAME (spec.rollout.canary): the new revision replaces the stable
one on every replica, without downtime, and the canary's Deployment goes. With --step, ends the
pause of the canary's current step instead (a step with \`pause: {}\`), and the canary moves on
to its next step (after the last step it is promoted).

To abort a canary instead, use \`mlmodel rollback NAME\`. See docs/canary.md.

Flags:
      --step             end the current step's pause, not the whole canary
${commonFlagsHelp}

Examples:
  mlmodel promote resnet
  mlmodel promote resnet --step -n models`;

/** The annotation to write for `mlmodel promote`, or why there is nothing to promote (pure). */
export function promoteRequest(
  model: MLModel,
  options: { step?: boolean } = {},
): { key: string; value: string; describe: string } | { error: string } {
  const name = model.metadata.name;
  const canary = model.status?.canary;
  if (!model.spec.rollout?.canary && !canary?.phase) {
    return {
      error: `MLModel "${name}" has no canary: spec.rollout.canary is not set, so a new revision rolls out to every replica at once (see docs/canary.md)`,
    };
  }
  if (isStale(model)) {
    return {
      error: `the status of "${name}" describes generation ${model.status?.observedGeneration}, the spec is at ${model.metadata.generation}: the operator has not caught up with the last edit yet; run this again in a moment`,
    };
  }
  const revision = `revision ${canary?.revisionNumber ?? "?"} (${canary?.revision})`;
  if (canary?.phase === "Promoting") return { error: `the canary of ${revision} is already being promoted` };
  if (canary?.phase === "Promoted")
    return { error: `the canary of ${revision} was already promoted: it serves all traffic` };
  const annotation = promoteAnnotation(canary, options);
  if ("error" in annotation) return annotation;
  const what = options.step ? `ending step ${(canary?.step ?? 0) + 1}'s pause of` : "promoting";
  return { ...annotation, describe: `${what} the canary of ${revision} of ${name}` };
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseModelCommand("promote", argv, { ...commonFlags, step: { type: "boolean" } }, help);
  if (!parsed) return 0;
  const { flags, name } = parsed;
  const { client, namespace } = await openSession(flags);
  try {
    const model = await client.get<MLModel>(mlModelKind, { namespace, name });
    if (!model) throw new CliError(`MLModel "${name}" not found in namespace "${namespace}"`);
    const request = promoteRequest(model, { step: flags.step ?? false });
    if ("error" in request) throw new CliError(`cannot promote ${name}: ${request.error}`);
    // The resourceVersion makes this a compare-and-swap: the canary it names is the one read.
    await client.patch(
      mlModelKind,
      { namespace, name },
      {
        metadata: {
          resourceVersion: model.metadata.resourceVersion,
          annotations: { [request.key]: request.value },
        },
      },
      "merge",
    );
    console.log(request.describe);
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}
