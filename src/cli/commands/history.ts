/** `mlmodel history NAME`: the model's revisions, newest first, with what each one serves. */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { labels } from "../../operator/names.ts";
import { historyEntries } from "../../operator/revisions.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import {
  commonFlags,
  commonFlagsHelp,
  openSession,
  outputFormat,
  parseModelCommand,
  redacted,
  styleFromFlag,
} from "../views/session.ts";
import { renderTable } from "../views/table.ts";
import { explainApiError } from "./status.ts";

export const summary = "list an MLModel's revisions (what each served), newest first";

const help = `Usage: mlmodel history NAME [flags]

Lists the revisions the operator recorded for the model (ControllerRevisions it owns, at most
spec.rollout.revisionHistoryLimit, default 10): number, hash, model URI, version and image,
and which one is serving, rolling out or was last ready. Roll back with
\`mlmodel rollback NAME --to-revision N\`.

Flags:
  -o, --output FORMAT    table (default) or json
${commonFlagsHelp}

Examples:
  mlmodel history resnet
  mlmodel history resnet -n models -o json`;

/** The model and its revisions; a missing model is a user error. */
export async function readRevisions(
  client: KubeClient,
  namespace: string,
  name: string,
): Promise<{ model: MLModel; revisions: V1ControllerRevision[] }> {
  const model = await client.get<MLModel>(mlModelKind, { namespace, name });
  if (!model) throw new CliError(`MLModel "${name}" not found in namespace "${namespace}"`);
  const list = await client.list<KubeObject>(builtinKinds.ControllerRevision, {
    namespace,
    labelSelector: `${labels.model}=${name}`,
  });
  const revisions = (list.items as unknown as V1ControllerRevision[]).filter((r) =>
    r.metadata?.ownerReferences?.some((o) => o.uid === model.metadata.uid),
  );
  return { model, revisions };
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseModelCommand(
    "history",
    argv,
    { ...commonFlags, output: { type: "string", short: "o" } },
    help,
  );
  if (!parsed) return 0;
  const { flags, name } = parsed;
  const format = outputFormat(flags.output ?? "table", ["table", "json"]);
  const { client, namespace } = await openSession(flags);
  try {
    const { model, revisions } = await readRevisions(client, namespace, name);
    const entries = redacted(historyEntries(revisions, model.status));
    if (format === "json") {
      process.stdout.write(`${JSON.stringify(entries, null, 2)}\n`);
      return 0;
    }
    const rows = entries.map((e) => [
      String(e.number),
      e.hash,
      e.marks.join(", ") || "-",
      e.modelURI ?? "-",
      e.modelVersion ?? "-",
      e.image ?? "(runtime)",
    ]);
    process.stdout.write(
      `${renderTable(["REVISION", "HASH", "STATE", "MODEL", "VERSION", "IMAGE"], rows, styleFromFlag(flags.color))}\n`,
    );
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}
