/**
 * Names, labels and annotations of the objects the operator creates. One place, so the
 * reconciler, the status function and the watches' map functions agree.
 */
import { createHash } from "node:crypto";

export const fieldManager = "mlmodel-operator";
export const operatorName = "mlmodel-operator";

export const labels = {
  /** Name of the MLModel an object belongs to (on children and on every pod they start). */
  model: "serving.mlmodel.dev/model",
  /** What the object is for: server, download or storage. */
  component: "app.kubernetes.io/component",
  /** The serving revision a pod runs (see servingRevision). */
  revision: "serving.mlmodel.dev/revision",
  managedBy: "app.kubernetes.io/managed-by",
  instance: "app.kubernetes.io/instance",
  partOf: "app.kubernetes.io/part-of",
} as const;

export const annotations = {
  /** Hash of the object the operator last applied; a reconcile skips the write when it matches. */
  appliedHash: "serving.mlmodel.dev/applied-hash",
  /** On a download Job: the hash of its spec. A running Job whose spec is no longer wanted is replaced. */
  jobSpecHash: "serving.mlmodel.dev/job-spec-hash",
  /** On a download Job: its inputs (generation, Secret version). A failed Job is retried when they change. */
  retryKey: "serving.mlmodel.dev/retry-key",
} as const;

export type Component =
  | "server"
  | "download"
  | "storage"
  | "autoscaler"
  | "disruption-budget"
  | "revision"
  | "prune"
  | "model-uri";

export function childLabels(modelName: string, component: Component): Record<string, string> {
  return {
    [labels.model]: modelName,
    [labels.component]: component,
    [labels.instance]: modelName,
    [labels.managedBy]: operatorName,
    [labels.partOf]: "mlmodel-operator",
  };
}

/** The Deployment's selector: stable for the life of the model (selectors are immutable). */
export function servingSelector(modelName: string): Record<string, string> {
  return { [labels.model]: modelName, [labels.component]: "server" };
}

export function selectorString(selector: Record<string, string>): string {
  return Object.entries(selector)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

/** JSON with sorted keys, so equal values hash equally whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

/** A short, stable hash for names and labels: 10 hex digits (40 bits). */
export function shortHash(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value)).digest("hex").slice(0, 10);
}

export const childNames = {
  storage: (model: string) => `${model}-model`,
  /** One Job per model content (uri, version, checksum): Job templates are immutable. */
  download: (model: string, contentHash: string) => `${model}-dl-${contentHash}`,
  /**
   * The download Job's ServiceAccount, and its Role and RoleBinding (one per model, shared by
   * its Jobs). A model name has at most 48 characters, so this stays within 63 (59).
   */
  downloader: (model: string) => `${model}-downloader`,
  /**
   * The Secret holding the exact model URI of a revision whose URI has credentials in it, owned
   * by that revision's ControllerRevision (`<model>-<revision>`), so it goes with it.
   */
  uriSecret: (model: string, revision: string) => `${model}-${revision}-uri`,
  deployment: (model: string) => model,
  service: (model: string) => model,
  autoscaler: (model: string) => model,
  disruptionBudget: (model: string) => model,
};
