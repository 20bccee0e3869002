/**
 * The writes every syncer shares: apply a child only when it drifted, delete a stale one, and
 * keep a set of owned children of one kind equal to the desired set.
 */
import type { AppliedVersion, KubeObject, ResourceKind } from "../../../runtime/index.ts";
import { needsApply, withAppliedHash } from "../../drift.ts";
import { fieldManager } from "../../names.ts";
import type { WriteContext } from "../context.ts";

/** A child as the syncers handle it (client-node's types have optional metadata). */
export interface Child {
  metadata?: { name?: string; namespace?: string };
}

/** Applies `desired` (server-side, forced) unless `live` already holds it; true when it wrote. */
export async function applyIfChanged(
  ctx: WriteContext,
  kind: ResourceKind,
  desired: object,
  live: object | undefined,
): Promise<boolean> {
  const obj = withAppliedHash(desired as KubeObject);
  if (!needsApply(obj, live as KubeObject | undefined)) return false;
  ctx.log.info({ kind: kind.kind, name: obj.metadata.name }, live ? "updating child" : "creating child");
  // The stored object is not read (the caches bring it). A create's answer is read for its
  // resourceVersion alone, so that its watch event (the echo) does not wake the model again
  // (wakes.ts, OwnWrites); an update's is dropped unparsed.
  const opts = { fieldManager, force: true, signal: ctx.signal };
  if (live) await ctx.client.applyDiscardingAnswer(kind, obj, opts);
  else await ctx.client.applyForVersion(kind, obj, opts);
  return true;
}

/**
 * `applied` as the API server stored it, for a writer that read only the answer's uid and
 * resourceVersion (applyForVersion): the rest is what was applied.
 */
export function withAnswer<T extends { metadata?: object }>(applied: T, answer: AppliedVersion): T {
  return {
    ...applied,
    metadata: {
      ...applied.metadata,
      ...(answer.uid !== undefined ? { uid: answer.uid } : {}),
      ...(answer.resourceVersion !== undefined ? { resourceVersion: answer.resourceVersion } : {}),
    },
  };
}

export async function deleteChild(ctx: WriteContext, kind: ResourceKind, obj: Child): Promise<void> {
  ctx.log.info({ kind: kind.kind, name: obj.metadata?.name }, "deleting stale child");
  await ctx.client.delete(
    kind,
    { namespace: obj.metadata!.namespace!, name: obj.metadata!.name! },
    { propagationPolicy: "Background" },
  );
}

/**
 * Makes the owned children of one kind the desired ones: applies each that drifted, then
 * deletes each that is no longer desired. Returns the children as they now stand: the live
 * object where there was one, else the desired object just created.
 */
export async function syncSet<T extends Child>(
  ctx: WriteContext,
  kind: ResourceKind,
  desired: readonly T[],
  live: readonly T[],
): Promise<T[]> {
  const now = await applySet(ctx, kind, desired, live);
  await pruneSet(ctx, kind, desired, live);
  return now;
}

/** The first half of syncSet: applies each desired child that drifted; returns the set as it now stands. */
export async function applySet<T extends Child>(
  ctx: WriteContext,
  kind: ResourceKind,
  desired: readonly T[],
  live: readonly T[],
): Promise<T[]> {
  const named = (name: string | undefined) => live.find((l) => l.metadata?.name === name);
  for (const want of desired) await applyIfChanged(ctx, kind, want, named(want.metadata?.name));
  return desired.map((want) => named(want.metadata?.name) ?? want);
}

/** The second half of syncSet: deletes each live child that is no longer desired. */
export async function pruneSet<T extends Child>(
  ctx: WriteContext,
  kind: ResourceKind,
  desired: readonly T[],
  live: readonly T[],
): Promise<void> {
  const wanted = new Set(desired.map((d) => d.metadata?.name));
  for (const stale of live) if (!wanted.has(stale.metadata?.name)) await deleteChild(ctx, kind, stale);
}
