/**
 * Owner references and finalizers: the small helpers every controller needs.
 */
import type { KubeClient } from "./client.ts";
import { ApiError } from "./errors.ts";
import type { ResourceKind } from "./kinds.ts";
import { kindName, matchesKind } from "./kinds.ts";
import type { KubeObject, OwnerReference, Request } from "./types.ts";

/** The ownerReference that makes `owner` the controller of a child (garbage collection too). */
export function controllerOwnerRef(owner: KubeObject): OwnerReference {
  const { name, uid } = owner.metadata;
  if (!name || !uid) {
    throw new TypeError(
      `controllerOwnerRef needs an owner read from the server (metadata.name and .uid set), got name=${JSON.stringify(name)} uid=${JSON.stringify(uid)}`,
    );
  }
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name,
    uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** The controller ownerReference of `obj`, if any. */
export function controllerOf(obj: KubeObject): OwnerReference | undefined {
  return obj.metadata.ownerReferences?.find((r) => r.controller === true);
}

/** True if `owner` is the controller of `obj` (by uid, so a re-created owner does not count). */
export function isControlledBy(obj: KubeObject, owner: KubeObject): boolean {
  const ref = controllerOf(obj);
  return ref !== undefined && ref.uid === owner.metadata.uid;
}

/**
 * The request for the controlling owner of `obj` if that owner is of `ownerKind`. Owners are
 * in the child's namespace (cross-namespace owner references are not allowed).
 */
export function ownerRequest(obj: KubeObject, ownerKind: ResourceKind): Request | undefined {
  const ref = controllerOf(obj);
  if (!ref || !matchesKind(ownerKind, ref.apiVersion, ref.kind)) return undefined;
  return ownerKind.namespaced && obj.metadata.namespace
    ? { namespace: obj.metadata.namespace, name: ref.name }
    : { name: ref.name };
}

export function hasFinalizer(obj: KubeObject, finalizer: string): boolean {
  return obj.metadata.finalizers?.includes(finalizer) ?? false;
}

/**
 * Adds `finalizer` if missing. The patch carries the resourceVersion we read, so a concurrent
 * change gives 409 (requeue) instead of a lost finalizer list. Returns the updated object (or
 * `obj` unchanged when the finalizer was there).
 */
export async function ensureFinalizer<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  obj: T,
  finalizer: string,
): Promise<T> {
  checkFinalizerName(finalizer);
  if (hasFinalizer(obj, finalizer)) return obj;
  return patchFinalizers(client, kind, obj, [...(obj.metadata.finalizers ?? []), finalizer]);
}

/** Removes `finalizer` if present; same optimistic locking as ensureFinalizer. 404 is fine. */
export async function removeFinalizer<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  obj: T,
  finalizer: string,
): Promise<T | undefined> {
  checkFinalizerName(finalizer);
  if (!hasFinalizer(obj, finalizer)) return obj;
  try {
    return await patchFinalizers(
      client,
      kind,
      obj,
      (obj.metadata.finalizers ?? []).filter((f) => f !== finalizer),
    );
  } catch (err) {
    if (err instanceof ApiError && err.code === 404) return undefined;
    throw err;
  }
}

function patchFinalizers<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  obj: T,
  finalizers: string[],
) {
  const name = obj.metadata.name;
  if (!name) throw new TypeError(`${kindName(kind)} object has no metadata.name`);
  const key = obj.metadata.namespace ? { namespace: obj.metadata.namespace, name } : { name };
  const patch = { metadata: { finalizers, resourceVersion: obj.metadata.resourceVersion } };
  return client.patch<T>(kind, key, patch, "merge");
}

function checkFinalizerName(finalizer: string): void {
  // The API server requires a qualified name; "example.com/cleanup" style avoids clashes.
  if (!/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(finalizer)) {
    throw new TypeError(
      `finalizer "${finalizer}" is not a qualified name like "serving.mlmodel.dev/cleanup"`,
    );
  }
}
