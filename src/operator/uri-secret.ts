/**
 * URI Secrets: where the exact model URI lives when it has credentials in it (a pre-signed
 * S3/GCS URL, an Azure SAS, a `?token=`). The download Job reads it through an env
 * `valueFrom.secretKeyRef` (desiredDownloadJob); status, Events, logs, the Job and the
 * ControllerRevision only ever hold the redacted URI. One Secret per revision, owned by that
 * revision's ControllerRevision: garbage-collected when the revision is pruned, and with the
 * model through it. The operator creates it when the revision is recorded, before any download
 * Job reads it, and never patches, updates or deletes a Secret (docs/downloader.md,
 * "Credentials in the URI").
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModel } from "../api/mlmodel.ts";
import { uriHasSecrets } from "../downloader/redact.ts";
import {
  ApiError,
  builtinKinds,
  controllerOwnerRef,
  type KubeObject,
  type OwnerReference,
  type ReconcileContext,
  type Store,
} from "../runtime/index.ts";
import { desiredUriSecret, servingPodTemplate } from "./desired.ts";
import { fieldManager } from "./names.ts";
import type { ServingPlan } from "./plan.ts";
import { revisionHash } from "./revisions.ts";
import type { MissingDependency } from "./status.ts";

/** The revision a plan serves owns its URI Secret; the model does when none is recorded yet. */
function uriSecretOwner(
  model: MLModel,
  plan: ServingPlan,
  revisions: readonly V1ControllerRevision[],
): OwnerReference {
  const hash = servingPodTemplate(plan).revision;
  const revision = revisions.find((r) => revisionHash(r) === hash);
  if (!revision?.metadata?.name || !revision.metadata.uid) return controllerOwnerRef(model);
  // No blockOwnerDeletion: nothing waits on a Secret, and setting it needs rights on the owner.
  return {
    apiVersion: "apps/v1",
    kind: "ControllerRevision",
    name: revision.metadata.name,
    uid: revision.metadata.uid,
    controller: true,
  };
}

/** Whether `secret` is one the operator made for this model (owned by the model or one of its revisions). */
function isOurs(secret: Readonly<KubeObject>, model: MLModel, revisions: readonly V1ControllerRevision[]) {
  const owners = new Set([model.metadata.uid, ...revisions.map((r) => r.metadata?.uid)]);
  return secret.metadata.ownerReferences?.some((o) => o.controller && owners.has(o.uid)) ?? false;
}

/**
 * Secrets created but not yet seen by the cache ("namespace/name" -> until when to wait): the
 * next reconcile often runs before the watch delivers the new Secret, and would create it
 * again (a 409). Expectations, as Kubernetes' own controllers keep them for their pods.
 */
const awaitedSecrets = new Map<string, number>();
const awaitForMs = 60_000;

async function ensureUriSecret(
  ctx: ReconcileContext,
  model: MLModel,
  plan: ServingPlan,
  revisions: readonly V1ControllerRevision[],
): Promise<void> {
  // Most URIs need no Secret: say so before hashing the pod template for an owner.
  const source = plan.source;
  if (source.type !== "download" || !source.exactUri || !uriHasSecrets(source.exactUri)) return;
  const secret = desiredUriSecret(plan, uriSecretOwner(model, plan, revisions));
  if (!secret) return;
  const key = { namespace: plan.namespace, name: secret.metadata!.name! };
  const awaited = `${key.namespace}/${key.name}`;
  const existing = ctx.cache<KubeObject>(builtinKinds.Secret).get(key);
  if (existing) {
    awaitedSecrets.delete(awaited);
    if (isOurs(existing, model, revisions)) return;
    throw new Error(
      `Secret ${key.name} exists but the operator did not create it for MLModel ${model.metadata.name}: the download Job would read the model URI from it; delete or rename it`,
    );
  }
  if ((awaitedSecrets.get(awaited) ?? 0) > Date.now()) return;
  try {
    await ctx.client.create(builtinKinds.Secret, secret as KubeObject, { fieldManager, signal: ctx.signal });
    ctx.log.info({ secret: key.name }, "created the Secret that holds the model URI");
  } catch (err) {
    // Created by an earlier reconcile (or another replica) that the cache has not seen yet.
    if (!(err instanceof ApiError && err.code === 409)) throw err;
  }
  awaitedSecrets.set(awaited, Date.now() + awaitForMs);
}

/**
 * Creates the URI Secrets the plans need and lack: the spec's (as soon as its revision is
 * recorded, so a rollback to it later finds it even if no Job ever read it, e.g. a revision
 * that changed only the image) and the served one's (a rollback to a revision an older
 * operator recorded with its exact URI). A same-named Secret that is not ours is refused: the
 * Job would download whatever it says. Writes only when a Secret is missing.
 */
export async function ensureUriSecrets(
  ctx: ReconcileContext,
  model: MLModel,
  plans: readonly (ServingPlan | undefined)[],
  revisions: readonly V1ControllerRevision[],
): Promise<void> {
  for (const plan of new Set(plans)) if (plan) await ensureUriSecret(ctx, model, plan, revisions);
}

/**
 * A revision recorded with a redacted URI (served again by a rollback) can be downloaded only
 * from its URI Secret; without it there is nothing to download from.
 */
export function missingUriSecret(
  secrets: Store<KubeObject>,
  plan: ServingPlan,
): MissingDependency | undefined {
  const source = plan.source;
  if (source.type !== "download" || !source.uriSecret) return undefined;
  if (secrets.get({ namespace: plan.namespace, name: source.uriSecret })) return undefined;
  return {
    reason: "SecretNotFound",
    message: `Secret ${source.uriSecret}, which holds the exact model URI of the revision being served (${source.shownUri}), does not exist in namespace ${plan.namespace}; apply the spec again with its full URI`,
  };
}
