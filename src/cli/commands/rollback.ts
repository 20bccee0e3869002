/**
 * `mlmodel rollback NAME [--to-revision N]`: serve an earlier revision again. Like
 * `kubectl rollout undo`, it writes that revision's serving spec back into the MLModel's spec
 * (keeping the current replicas or autoscaling), so the spec always says what is served and
 * the operator rolls to it without downtime (no new download: the old version is still in
 * storage while the revision is kept). Automatic rollback, by contrast, leaves the spec alone.
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModelSpec } from "../../api/mlmodel.ts";
import { uriSecretKey } from "../../operator/desired.ts";
import {
  recordedSource,
  revisionHash,
  revisionSpec,
  rollbackTarget,
  specWithScaling,
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
or autoscaling. Without --to-revision: the last ready revision if the current one is not
ready, else the revision before the current one.

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
    await client.patch(
      mlModelKind,
      { namespace, name },
      [
        { op: "test", path: "/metadata/resourceVersion", value: model.metadata.resourceVersion },
        { op: "replace", path: "/spec", value: specWithScaling(spec, model.spec) },
      ],
      "json",
    );
    console.log(`rolling ${name} back to revision ${target.revision} (${revisionHash(target)})`);
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}
