/**
 * Stage 6, report: the one place a reconcile writes the model's status and records an Event.
 * Only the operator's own status fields are compared (operatorOwned), so a reconcile with
 * nothing new writes nothing, and one Event is recorded per change of phase or reason, and
 * one per step of a canary (canaryEvent), after the status that says it.
 */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModelStatus } from "../../api/mlmodel.ts";
import type { EventRecorder, EventType, KubeObject } from "../../runtime/index.ts";
import { canaryEvent } from "../canary/status.ts";
import { canonicalJson, fieldManager } from "../names.ts";
import { justRolledBack } from "../rollback.ts";
import { operatorOwned, transitionEvent } from "../status.ts";
import type { WriteContext, WrittenStatuses } from "./context.ts";
import type { Observation } from "./observe.ts";

export async function report(
  ctx: WriteContext & { recorder: EventRecorder },
  o: Observation,
  status: MLModelStatus,
  written: WrittenStatuses | undefined,
): Promise<void> {
  const { model } = o;
  if (canonicalJson(operatorOwned(status)) === canonicalJson(operatorOwned(model.status))) return;
  const applied = await ctx.client.applyStatus<KubeObject>(
    mlModelKind,
    {
      apiVersion: model.apiVersion,
      kind: model.kind,
      metadata: { name: model.metadata.name, namespace: model.metadata.namespace },
      status,
    },
    { fieldManager, force: true, signal: ctx.signal },
  );
  written?.set(o.key, {
    fromResourceVersion: o.cached.metadata.resourceVersion,
    resourceVersion: applied?.metadata?.resourceVersion,
    status,
  });
  const event = statusEvent(model.status, status);
  if (event) ctx.recorder.event(model, event.type, event.reason, event.message);
  const step = canaryEvent(model.status?.canary, status.canary);
  if (step) ctx.recorder.event(model, step.type, step.reason, step.message);
}

/** The Event a status change is worth: a Warning the first time it says rolled back, else a transition's. */
export function statusEvent(
  before: MLModelStatus | undefined,
  after: MLModelStatus,
): { type: EventType; reason: string; message: string } | undefined {
  if (!justRolledBack(before, after)) return transitionEvent(before, after);
  const rolledBack = after.conditions?.find((c) => c.type === "RolledBack")?.message ?? "rolled back";
  return { type: "Warning", reason: "RolledBack", message: after.revision?.failed ? rolledBack : "" };
}
