/**
 * The writes of an MLModel's status, all of them: the operator's fields, applied by report
 * (report.ts) once per change, and the clearing of the downloader's progress fields, which the
 * download syncer asks for before it creates a new Job (syncers/download.ts): the progress shown
 * must be that Job's, so it cannot wait for report.
 */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel, MLModelStatus } from "../../api/mlmodel.ts";
import { downloaderStatusFields } from "../../downloader/contract.ts";
import type { KubeObject } from "../../runtime/index.ts";
import { fieldManager } from "../names.ts";
import type { WriteContext } from "./context.ts";

/** Applies the operator's status fields (server-side apply, forced: they are the operator's alone). */
export function applyModelStatus(
  ctx: WriteContext,
  model: MLModel,
  status: MLModelStatus,
): Promise<KubeObject | undefined> {
  return ctx.client.applyStatus<KubeObject>(
    mlModelKind,
    {
      apiVersion: model.apiVersion,
      kind: model.kind,
      metadata: { name: model.metadata.name, namespace: model.metadata.namespace },
      status,
    },
    { fieldManager, force: true, signal: ctx.signal },
  );
}

/**
 * Removes the downloader's progress fields (a JSON merge patch: the operator cannot drop
 * fields another manager owns by applying). "progress": those fields only, the operator's
 * job/jobState/attempts stay; null: status.download as a whole (nothing is downloaded).
 */
export async function clearDownloadProgress(
  ctx: WriteContext,
  model: MLModel,
  what: "progress" | null,
): Promise<void> {
  const download = what === null ? null : Object.fromEntries(downloaderStatusFields.map((f) => [f, null]));
  ctx.log.info({ what: what ?? "download" }, "clearing the previous download's progress from status");
  await ctx.client.patch(
    mlModelKind,
    { namespace: model.metadata.namespace!, name: model.metadata.name! },
    { status: { download } },
    "merge",
    { subresource: "status", fieldManager, signal: ctx.signal },
  );
}
