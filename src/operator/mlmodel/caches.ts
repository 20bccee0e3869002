/**
 * The caches the MLModel controller reads beyond its children: which kinds, how they are
 * indexed, what is kept of them. Declared once: the controller registers them, the observe
 * stage reads through their indexes, and the unit tests build in-memory stores from them.
 */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../api/mlmodel.ts";
import {
  builtinKinds,
  type CacheOptions,
  type IndexFunc,
  type KubeObject,
  type Request,
  type ResourceKind,
} from "../../runtime/index.ts";
import { trackLabel } from "../canary/desired.ts";
import { labels } from "../names.ts";
import { modelCacheKeys, modelCacheKeysIndex, nodeCacheKeysIndex, stateKeys } from "../node-cache.ts";

/** An object a model spec names in its own namespace. */
export interface ModelReference {
  kind: ResourceKind;
  namespace: string;
  name: string;
}

/** What a spec references: its credentials Secret, its model config ConfigMap, its pvc:// claim. */
export function specReferences(namespace: string, spec: MLModelSpec | undefined): ModelReference[] {
  const m = spec?.model;
  const refs: ModelReference[] = [];
  if (m?.credentialsSecretRef)
    refs.push({ kind: builtinKinds.Secret, namespace, name: m.credentialsSecretRef.name });
  if (m?.configMapRef) refs.push({ kind: builtinKinds.ConfigMap, namespace, name: m.configMapRef.name });
  if (m?.uri?.startsWith("pvc://")) {
    const claim = m.uri.slice("pvc://".length).split("/")[0]!;
    refs.push({ kind: builtinKinds.PersistentVolumeClaim, namespace, name: claim });
  }
  return refs;
}

/** "Secret/ns/name": the index value of a reference, and its key in an observation. */
export function referenceKey(ref: ModelReference): string {
  return `${ref.kind.kind}/${ref.namespace}/${ref.name}`;
}

/** Index of MLModels by what they reference: a change to a Secret wakes the models using it. */
export const referenceIndex = "mlmodel-references";

export function modelReferences(model: Readonly<MLModel>): string[] {
  return specReferences(model.metadata.namespace!, model.spec).map(referenceKey);
}

/** Where client-side `kubectl apply` keeps the object it applied: a Secret's data included. */
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration";

/**
 * Only whether a Secret exists and who owns it matters to the operator: its cache lists and
 * watches metadata only, so no value arrives but in the annotation `kubectl apply` writes,
 * which is dropped here; this keeps a Secret's values out of the cache whatever its source sends.
 */
export function secretWithoutValues(obj: KubeObject): KubeObject {
  const data = (obj as { data?: Record<string, string> }).data ?? {};
  const { managedFields: _m, ...metadata } = obj.metadata;
  if (metadata.annotations?.[lastApplied] !== undefined) {
    const { [lastApplied]: _applied, ...annotations } = metadata.annotations;
    metadata.annotations = annotations;
  }
  return {
    apiVersion: obj.apiVersion,
    kind: obj.kind,
    metadata,
    data: Object.fromEntries(Object.keys(data).map((k) => [k, ""])),
  };
}

/**
 * Index of Secrets named as a model's URI Secrets (childNames.uriSecret: `<model>-<revision>-uri`,
 * the revision 10 hex digits) by "namespace/model". By name, not by label or owner: a same-named
 * Secret the operator did not make must be seen too, or the download Job would read it.
 */
export const uriSecretsByModelIndex = "uri-secrets-by-model";

export function uriSecretModelKeys(secret: Readonly<KubeObject>): string[] {
  const model = /^(.+)-[0-9a-f]{10}-uri$/.exec(secret.metadata.name ?? "")?.[1];
  return model ? [`${secret.metadata.namespace}/${model}`] : [];
}

/** The MLModel a pod of ours belongs to (its model label), if any. */
export function modelOfPod(pod: Readonly<KubeObject>): Request | undefined {
  const name = pod.metadata.labels?.[labels.model];
  return name ? { namespace: pod.metadata.namespace, name } : undefined;
}

/**
 * The pods the Pod cache watches: a canary's only. Its restarts, readiness and the time it
 * turned unready decide whether a canary goes on (canary/health.ts), so each change of them
 * wakes its model at once. Every other pod of ours is read only when status needs it: a
 * serving pod while its Deployment has not settled (serving-pods.ts), a download pod while its
 * Job needs explaining (download-pods.ts). Watched, serving pods would bring 3 of an
 * image-path model's 10 events, and download pods 6 of a downloaded model's 25.
 */
export const watchedPodSelector = `${labels.model},${trackLabel}=canary`;

/** Caches with options of their own (the children's are plain, indexed by owner). */
export const modelCaches: readonly { kind: ResourceKind; options: CacheOptions }[] = [
  {
    kind: mlModelKind,
    options: {
      indexes: {
        [referenceIndex]: modelReferences as IndexFunc,
        [modelCacheKeysIndex]: modelCacheKeys as IndexFunc,
      },
    },
  },
  // Referenced model config files, and the node cache agents' states (by the keys they list).
  { kind: builtinKinds.ConfigMap, options: { indexes: { [nodeCacheKeysIndex]: stateKeys } } },
  {
    kind: builtinKinds.Secret,
    options: {
      // Metadata only: whether a Secret exists and who owns it; its values never reach us.
      metadataOnly: true,
      transform: secretWithoutValues,
      indexes: { [uriSecretsByModelIndex]: uriSecretModelKeys },
    },
  },
  // Only canary pods: the operator never holds every pod of the cluster, nor every pod of its
  // own, in memory. Nothing reads this cache: its watch only wakes the canary's model.
  { kind: builtinKinds.Pod, options: { labelSelector: watchedPodSelector } },
];
