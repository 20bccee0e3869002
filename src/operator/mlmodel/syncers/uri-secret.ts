/**
 * Syncer: URI Secrets, where the exact model URI lives when it has credentials in it (a
 * pre-signed S3/GCS URL, an Azure SAS, a `?token=`). The download Job reads it through an env
 * `valueFrom.secretKeyRef` (desiredDownloadJob); status, Events, logs, the Job and the
 * ControllerRevision only ever hold the redacted URI. One Secret per revision, owned by that
 * revision's ControllerRevision: garbage-collected when the revision is pruned, and with the
 * model through it. Created right after its revision is recorded, before any download Job
 * reads it, so a rollback to the revision later finds it even if no Job ever read it (a
 * revision that changed only the image). The operator never patches, updates or deletes a
 * Secret: RBAC grants it create only (docs/downloader.md, "Credentials in the URI").
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModel } from "../../../api/mlmodel.ts";
import {
  ApiError,
  builtinKinds,
  controllerOwnerRef,
  type KubeObject,
  type OwnerReference,
} from "../../../runtime/index.ts";
import { desiredUriSecret, servingPodTemplate } from "../../desired.ts";
import { fieldManager } from "../../names.ts";
import type { ServingPlan } from "../../plan.ts";
import { revisionHash } from "../../revisions.ts";
import type { TtlMap } from "../../ttl-map.ts";
import { referenceKey } from "../caches.ts";
import type { WriteContext } from "../context.ts";
import type { Reference } from "../observation.ts";

export interface UriSecretInput {
  model: MLModel;
  /** Decision.uriSecretPlans: the plans whose exact URI has credentials in it. */
  plans: readonly ServingPlan[];
  /** The ControllerRevisions after the spec's was recorded: the owners. */
  revisions: readonly V1ControllerRevision[];
  /** Observation.references: the model's URI Secrets that exist, ours or not. */
  references: ReadonlyMap<string, Reference>;
  /** Kept across reconciles by the controller (ModelMemory.createdSecrets). */
  created: TtlMap<string, number>;
  /** This reconcile's time, in ms since the epoch. */
  now: number;
}

/** How long a created Secret is taken as existing before the cache shows it. */
const awaitCreatedForMs = 60_000;

/**
 * Creates the URI Secrets the plans need and lack; writes only when one is missing. A
 * same-named Secret that is not ours is refused (the reconcile fails, naming it): the Job would
 * download whatever it says.
 */
export async function syncUriSecrets(ctx: WriteContext, input: UriSecretInput): Promise<void> {
  for (const plan of input.plans) await syncUriSecret(ctx, input, plan);
}

async function syncUriSecret(ctx: WriteContext, input: UriSecretInput, plan: ServingPlan): Promise<void> {
  const { model, revisions, created, now } = input;
  const secret = desiredUriSecret(plan, uriSecretOwner(model, plan, revisions));
  if (!secret) return;
  const key = { namespace: plan.namespace, name: secret.metadata!.name! };
  const awaited = `${key.namespace}/${key.name}`;
  const existing = input.references.get(referenceKey({ kind: builtinKinds.Secret, ...key }));
  if (existing) {
    created.delete(awaited);
    if (isOurs(existing, model, revisions)) return;
    throw new Error(
      `Secret ${key.name} exists but the operator did not create it for MLModel ${model.metadata.name}: the download Job would read the model URI from it; delete or rename it`,
    );
  }
  if ((created.get(awaited) ?? 0) > now) return;
  try {
    await ctx.client.create(builtinKinds.Secret, secret as KubeObject, { fieldManager, signal: ctx.signal });
    ctx.log.info({ secret: key.name }, "created the Secret that holds the model URI");
  } catch (err) {
    // Created by an earlier reconcile (or another replica) that the cache has not shown yet.
    if (!(err instanceof ApiError && err.code === 409)) throw err;
  }
  created.set(awaited, now + awaitCreatedForMs, now);
}

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

/** Whether a Secret is one the operator made for this model (controlled by it or one of its revisions). */
function isOurs(secret: Reference, model: MLModel, revisions: readonly V1ControllerRevision[]): boolean {
  const owners = new Set([model.metadata.uid, ...revisions.map((r) => r.metadata?.uid)]);
  return secret.controller !== undefined && owners.has(secret.controller);
}
