/**
 * `mlmodel rollback NAME [--to-revision N]`: serve an earlier revision again. Like
 * `kubectl rollout undo`, it writes that revision's serving spec back into the MLModel's spec
 * (keeping the current replicas or autoscaling, and the current rollout block), so the spec
 * always says what is served and the operator rolls to it without downtime (no new download:
 * the old version is still in storage while the revision is kept). Automatic rollback, by
 * contrast, leaves the spec alone.
 *
 * With a canary (spec.rollout.canary): a rollback to the stable revision aborts the running
 * canary (the spec's revision is the stable one: nothing to canary); a rollback to another
 * revision would go through a canary like any change, so it also writes the canary-promote
 * command for its target: a rollback never waits on steps (docs/canary.md).
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../api/mlmodel.ts";
import { rollbackPromoteAnnotation } from "../../operator/canary/commands.ts";
import { uriSecretKey } from "../../operator/desired.ts";
import {
  recordedSource,
  revisionHash,
  revisionSpec,
  rollbackTarget,
  specServedAgain,
} from "../../operator/revisions.ts";
import { ApiError, builtinKinds, type KubeClient, type KubeObject } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { commonFlags, commonFlagsHelp, openSession, parseModelCommand } from "../views/session.ts";
import { readRevisions } from "./history.ts";
import { explainApiError } from "./status.ts";

export const summary = "serve an earlier revision of an MLModel again";

const help = `Usage: mlmodel rollback NAME [--to-revision N] [flags]

Serves revision N (see \`mlmodel history NAME\`) again: its serving spec (model, runtime,
image, ports, resources, ...) is written back into the MLModel, keeping the current replicas
or autoscaling and rollout settings. Without --to-revision: the last ready revision if the
current one is not ready (or is a canary), else the revision before the current one.

With a canary running (spec.rollout.canary), a rollback without --to-revision aborts it: the
stable revision takes all traffic back. A rollback to any other revision is promoted at once
(no canary steps).

Flags:
      --to-revision N    the revision number to serve
${commonFlagsHelp}

Examples:
  mlmodel rollback resnet
  mlmodel rollback resnet --to-revision 3 -n models`;

/**
 * A revision whose URI has credentials in it recorded it redacted, and the exact URI in its
 * URI Secret: the spec written back needs the exact one, read with the user's own rights.
 */
export async function withExactUri(
  client: KubeClient,
  namespace: string,
  target: V1ControllerRevision,
  spec: MLModelSpec,
): Promise<MLModelSpec> {
  const source = recordedSource(target);
  if (!source) return spec;
  const denied = (why: string) =>
    new CliError(
      `revision ${target.revision}'s model URI has credentials in it, kept in Secret ${source.uriSecret}, ${why}; apply the spec again with the full URI instead`,
    );
  let secret: (KubeObject & { data?: Record<string, string> }) | undefined;
  try {
    secret = await client.get(builtinKinds.Secret, { namespace, name: source.uriSecret });
  } catch (err) {
    if (err instanceof ApiError && err.code === 403) throw denied("which you may not read");
    throw err;
  }
  const uri = secret?.data?.[uriSecretKey];
  if (!uri) throw denied("which is gone");
  return { ...spec, model: { ...spec.model, uri: Buffer.from(uri, "base64").toString("utf8") } };
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseModelCommand(
    "rollback",
    argv,
    { ...commonFlags, "to-revision": { type: "string" } },
    help,
  );
  if (!parsed) return 0;
  const { flags, name } = parsed;
  const raw = flags["to-revision"];
  const to = raw === undefined ? undefined : Number(raw);
  if (to !== undefined && !(Number.isInteger(to) && to > 0)) {
    throw new CliError(`--to-revision "${raw}" must be a positive integer`, 2);
  }
  const { client, namespace } = await openSession(flags);
  try {
    const { model, revisions } = await readRevisions(client, namespace, name);
    const target = rollbackTarget(revisions, model.status, to);
    if ("error" in target) throw new CliError(`cannot roll back ${name}: ${target.error}`);
    const recorded = revisionSpec(target);
    if (!recorded) throw new CliError(`revision ${target.revision} of ${name} records no spec`);
    const spec = await withExactUri(client, namespace, target, recorded);
    // The resourceVersion makes this a compare-and-swap: a concurrent edit fails the write.
    await client.patch(mlModelKind, { namespace, name }, rollbackPatch(model, target, spec), "json");
    const aborting = model.status?.canary?.phase && revisionHash(target) === model.status.revision?.lastReady;
    const canary = aborting && model.spec.rollout?.canary ? " (the running canary is aborted)" : "";
    console.log(`rolling ${name} back to revision ${target.revision} (${revisionHash(target)})${canary}`);
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}

/**
 * The JSON patch of a rollback (pure): the target's serving spec with the current scaling and
 * rollout block, and, when a canary would otherwise run for it (the target is not the stable
 * revision), the command that promotes the canary of that spec at once (named by the
 * generation the spec gets: the patch changes the spec, so it is the next one).
 */
export function rollbackPatch(model: MLModel, target: V1ControllerRevision, spec: MLModelSpec): object[] {
  const next = specServedAgain(spec, model.spec);
  const hash = revisionHash(target);
  const promote =
    model.spec.rollout?.canary && hash && hash !== model.status?.revision?.lastReady
      ? rollbackPromoteAnnotation(hash, (model.metadata.generation ?? 0) + 1)
      : undefined;
  const annotate = !promote
    ? []
    : model.metadata.annotations
      ? [{ op: "add", path: `/metadata/annotations/${promote.key.replace("/", "~1")}`, value: promote.value }]
      : [{ op: "add", path: "/metadata/annotations", value: { [promote.key]: promote.value } }];
  return [
    { op: "test", path: "/metadata/resourceVersion", value: model.metadata.resourceVersion },
    { op: "replace", path: "/spec", value: next },
    ...annotate,
  ];
}
