/**
 * Plain JSON shapes of Kubernetes objects as the API server sends them.
 *
 * We do not use client-node's model classes for objects: they turn timestamps into Date and
 * need a serializer round trip. The runtime moves raw JSON, so these types describe raw JSON.
 */

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
  managedFields?: unknown[];
  [field: string]: unknown;
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** Identifies one object: `namespace` is absent for cluster-scoped kinds. */
export interface ObjectKey {
  namespace?: string;
  name: string;
}

/** What a controller reconciles: the key of its primary object. */
export type Request = ObjectKey;

/** One event of a raw Kubernetes watch stream. */
export interface WatchEvent<T extends KubeObject = KubeObject> {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK";
  object: T;
}

/** The `metav1.Status` body the API server sends with errors and in ERROR watch events. */
export interface Status {
  kind?: "Status";
  apiVersion?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: { retryAfterSeconds?: number; name?: string; kind?: string; causes?: unknown[] };
}

/** An RFC 1123 label (a namespace name, a controller name): lowercase letters, digits, '-'; at most 63. */
export function isDnsLabel(value: string): boolean {
  return value.length <= 63 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(value);
}

/** "namespace/name" or "name": the store and queue key of an object. */
export function keyString(key: ObjectKey): string {
  return key.namespace ? `${key.namespace}/${key.name}` : key.name;
}

/** Inverse of keyString. */
export function parseKey(key: string): ObjectKey {
  const slash = key.indexOf("/");
  return slash < 0 ? { name: key } : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

export function objectKey(obj: KubeObject): ObjectKey {
  const name = obj.metadata.name;
  if (!name) throw new TypeError(`object of kind ${obj.kind} has no metadata.name`);
  return obj.metadata.namespace ? { namespace: obj.metadata.namespace, name } : { name };
}
