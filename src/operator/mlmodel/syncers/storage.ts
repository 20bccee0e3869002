/** Syncer: the claim a downloaded model lives in (none for pvc://, an image or a config file). */
import type { V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { builtinKinds, type OwnerReference } from "../../../runtime/index.ts";
import { desiredStorage } from "../../desired.ts";
import type { ServingPlan } from "../../plan.ts";
import type { WriteContext } from "../context.ts";
import { applyIfChanged } from "./apply.ts";

export async function syncStorage(
  ctx: WriteContext,
  plan: ServingPlan,
  owner: OwnerReference,
  claims: readonly V1PersistentVolumeClaim[],
): Promise<void> {
  const storage = desiredStorage(plan, owner);
  if (!storage) return;
  const live = claims.find((c) => c.metadata?.name === storage.metadata?.name);
  await applyIfChanged(ctx, builtinKinds.PersistentVolumeClaim, storage, live);
}
