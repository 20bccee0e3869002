/**
 * ResourceKind: what the runtime needs to know to build URLs for a kind. No discovery at
 * run time: the operator knows its kinds, and discovery would make every start depend on an
 * extra round trip and on RBAC for /apis.
 */
export interface ResourceKind {
  /** "" for the core API group. */
  group: string;
  version: string;
  kind: string;
  plural: string;
  namespaced: boolean;
}

export function apiVersionOf(kind: ResourceKind): string {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

/** "Deployment.apps", "Pod": a readable, unique name for logs and map keys. */
export function kindName(kind: ResourceKind): string {
  return kind.group ? `${kind.kind}.${kind.group}` : kind.kind;
}

/** True if an object's apiVersion+kind (as in an ownerReference) names this kind, any version. */
export function matchesKind(kind: ResourceKind, apiVersion: string, kindStr: string): boolean {
  if (kindStr !== kind.kind) return false;
  const slash = apiVersion.indexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  return group === kind.group;
}

/** The collection path, e.g. /apis/apps/v1/namespaces/ns/deployments. */
export function collectionPath(kind: ResourceKind, namespace?: string): string {
  const base = kind.group ? `/apis/${kind.group}/${kind.version}` : `/api/${kind.version}`;
  if (kind.namespaced && namespace)
    return `${base}/namespaces/${encodeURIComponent(namespace)}/${kind.plural}`;
  if (!kind.namespaced && namespace) {
    throw new TypeError(`kind ${kindName(kind)} is cluster-scoped, but namespace "${namespace}" was given`);
  }
  return `${base}/${kind.plural}`;
}

export function objectPath(
  kind: ResourceKind,
  key: { namespace?: string; name: string },
  subresource?: string,
): string {
  if (!key.name) throw new TypeError(`name of a ${kindName(kind)} must be a non-empty string`);
  if (kind.namespaced && !key.namespace) {
    throw new TypeError(`kind ${kindName(kind)} is namespaced: key {name: "${key.name}"} needs a namespace`);
  }
  const path = `${collectionPath(kind, kind.namespaced ? key.namespace : undefined)}/${encodeURIComponent(key.name)}`;
  return subresource ? `${path}/${subresource}` : path;
}

/** Checks a ResourceKind given by a user so a typo fails at start, not as a 404 in a loop. */
export function validateKind(kind: ResourceKind): void {
  const dns = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
  if (kind.group !== "" && !dns.test(kind.group)) {
    throw new TypeError(
      `ResourceKind.group "${kind.group}" is not a DNS subdomain (use "" for the core group)`,
    );
  }
  if (!/^v[0-9]+((alpha|beta)[0-9]+)?$/.test(kind.version)) {
    throw new TypeError(
      `ResourceKind.version "${kind.version}" of ${kind.kind} must look like v1, v1beta1, v2alpha1`,
    );
  }
  if (!/^[A-Z][A-Za-z0-9]*$/.test(kind.kind)) {
    throw new TypeError(`ResourceKind.kind "${kind.kind}" must be a CamelCase name such as PodSet`);
  }
  if (!/^[a-z][a-z0-9]*$/.test(kind.plural)) {
    throw new TypeError(
      `ResourceKind.plural "${kind.plural}" of ${kind.kind} must be lowercase, e.g. "podsets"`,
    );
  }
}

function k(group: string, version: string, kind: string, plural: string, namespaced = true): ResourceKind {
  return Object.freeze({ group, version, kind, plural, namespaced });
}

export const builtinKinds = Object.freeze({
  Pod: k("", "v1", "Pod", "pods"),
  Service: k("", "v1", "Service", "services"),
  Endpoints: k("", "v1", "Endpoints", "endpoints"),
  ConfigMap: k("", "v1", "ConfigMap", "configmaps"),
  Secret: k("", "v1", "Secret", "secrets"),
  ServiceAccount: k("", "v1", "ServiceAccount", "serviceaccounts"),
  PersistentVolumeClaim: k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
  PersistentVolume: k("", "v1", "PersistentVolume", "persistentvolumes", false),
  Namespace: k("", "v1", "Namespace", "namespaces", false),
  Node: k("", "v1", "Node", "nodes", false),
  Event: k("events.k8s.io", "v1", "Event", "events"),
  CoreEvent: k("", "v1", "Event", "events"),
  Deployment: k("apps", "v1", "Deployment", "deployments"),
  ReplicaSet: k("apps", "v1", "ReplicaSet", "replicasets"),
  StatefulSet: k("apps", "v1", "StatefulSet", "statefulsets"),
  DaemonSet: k("apps", "v1", "DaemonSet", "daemonsets"),
  ControllerRevision: k("apps", "v1", "ControllerRevision", "controllerrevisions"),
  Job: k("batch", "v1", "Job", "jobs"),
  CronJob: k("batch", "v1", "CronJob", "cronjobs"),
  Lease: k("coordination.k8s.io", "v1", "Lease", "leases"),
  HorizontalPodAutoscaler: k("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
  PodDisruptionBudget: k("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
  Ingress: k("networking.k8s.io", "v1", "Ingress", "ingresses"),
  NetworkPolicy: k("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
  CustomResourceDefinition: k(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    false,
  ),
  Role: k("rbac.authorization.k8s.io", "v1", "Role", "roles"),
  RoleBinding: k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
  ClusterRole: k("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false),
  ClusterRoleBinding: k(
    "rbac.authorization.k8s.io",
    "v1",
    "ClusterRoleBinding",
    "clusterrolebindings",
    false,
  ),
});
