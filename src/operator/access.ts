/**
 * What the MLModel controller reads and writes, declared once: `mlmodel install` generates the
 * operator's RBAC from this table, and test/unit/operator/reconcile.test.ts checks every cache
 * the controller registers and every write its reconciles make against it, so the operator has
 * the rights its code uses and no others.
 */
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../api/kinds.ts";
import { builtinKinds, type ResourceKind } from "../runtime/index.ts";
import { httpRouteKind } from "./canary/desired.ts";

export type AccessVerb = "get" | "list" | "watch" | "create" | "patch" | "update" | "delete";

export interface Access {
  kind: ResourceKind;
  subresource?: string;
  verbs: AccessVerb[];
  /** Why the operator needs it (becomes a comment in the generated RBAC). */
  why: string;
}

// Everything the operator reads comes from its caches (list and watch), never a GET.
const read: AccessVerb[] = ["list", "watch"];
// Server-side apply is a PATCH that may create; delete removes stale children.
const own: AccessVerb[] = ["list", "watch", "create", "patch", "delete"];

export const operatorAccess: Access[] = [
  { kind: mlModelKind, verbs: read, why: "the primary kind" },
  {
    kind: mlModelKind,
    subresource: "status",
    verbs: ["patch"],
    why: "writes status (server-side apply)",
  },
  { kind: servingRuntimeKind, verbs: read, why: "runtime selection" },
  { kind: clusterServingRuntimeKind, verbs: read, why: "runtime selection" },
  { kind: builtinKinds.Deployment, verbs: own, why: "serving pods" },
  { kind: builtinKinds.Service, verbs: own, why: "the model's endpoint" },
  { kind: builtinKinds.Job, verbs: own, why: "model download" },
  { kind: builtinKinds.PersistentVolumeClaim, verbs: own, why: "model storage; pvc:// claims are only read" },
  { kind: builtinKinds.HorizontalPodAutoscaler, verbs: own, why: "spec.autoscaling" },
  { kind: builtinKinds.ControllerRevision, verbs: own, why: "revision history (mlmodel history, rollback)" },
  {
    kind: httpRouteKind,
    verbs: own,
    why: "a canary's exact traffic split (spec.rollout.canary.trafficRouting.gatewayAPI); watched only while the Gateway API is installed",
  },
  {
    kind: builtinKinds.PodDisruptionBudget,
    verbs: own,
    why: "keeps all but one serving replica through voluntary disruptions",
  },
  {
    kind: builtinKinds.Pod,
    verbs: read,
    why: "truthful status: readiness, crash loops, image pulls, scheduling (a canary's pods watched; the serving pods listed while their Deployment has not settled; a download Job's while it has no pod ready or failed)",
  },
  // Listed and watched metadata only (mlmodel/caches.ts): the values are never sent to the
  // operator, though RBAC cannot tell such a watch from one of whole Secrets. Create only: a model URI
  // with credentials in it (a pre-signed URL, a SAS) is kept in a Secret of its revision, which
  // the download Job reads (mlmodel/syncers/uri-secret.ts). Never get, patch, update or delete:
  // the operator cannot change any Secret, not even its own (they are immutable and
  // garbage-collected with their ControllerRevision); and the admission policies of the install
  // (src/install/policies.ts) refuse any Secret it creates but that one type.
  {
    kind: builtinKinds.Secret,
    verbs: [...read, "create"],
    why: "knows whether a credentials Secret or a revision's URI Secret exists, and whose it is (a metadata-only watch: no value is cached); creates the Secret holding a model URI that has credentials in it",
  },
  { kind: builtinKinds.ConfigMap, verbs: read, why: "waits for a missing model config ConfigMap" },
  { kind: builtinKinds.Event, verbs: ["create", "patch"], why: "Events on status transitions" },
  // The download Job's own identity, applied (server-side apply: a PATCH that may create) when
  // a Job is created and garbage-collected with the MLModel; never read, listed or cached. The
  // Role grants only `patch` on its own model's mlmodels/status, which the operator holds
  // itself (RBAC lets it create a Role or binding only with rights it has: no escalate/bind),
  // and the install's admission policy pins all three to exactly that (src/install/policies.ts).
  { kind: builtinKinds.ServiceAccount, verbs: ["create", "patch"], why: "the download Job's identity" },
  {
    kind: builtinKinds.Role,
    verbs: ["create", "patch"],
    why: "the download Job may patch its own model's status (progress), nothing else",
  },
  { kind: builtinKinds.RoleBinding, verbs: ["create", "patch"], why: "binds that Role to the download Job" },
];

/** Leader election, only when --leader-elect is on (namespaced to the operator's namespace). */
export const leaderElectionAccess: Access = {
  kind: builtinKinds.Lease,
  verbs: ["get", "create", "update"],
  why: "leader election",
};
