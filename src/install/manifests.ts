/**
 * Everything `mlmodel install` applies, as objects: CRDs, built-in runtimes, the operator's
 * least-privilege RBAC generated from the access table the controller declares (cluster-wide,
 * or a Role per watched namespace), and the admission policies (policies.ts).
 * `node src/install/generate.ts` writes the same objects to deploy/.
 */
import { allCrds } from "../api/crds.ts";
import { type Access, leaderElectionAccess, operatorAccess } from "../operator/access.ts";
import { operatorName } from "../operator/names.ts";
import type { KubeObject } from "../runtime/index.ts";
import { builtinRuntimes } from "./builtin-runtimes.ts";
import { operatorNodeCacheRbac } from "./node-cache.ts";
import { admissionPolicyManifests, partOf } from "./policies.ts";

export const defaultOperatorNamespace = "mlmodel-system";

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** One rule per (group, verbs), resources merged: short, reviewable RBAC. */
export function rulesFor(access: readonly Access[]): PolicyRule[] {
  const merged = new Map<string, PolicyRule>();
  for (const a of access) {
    const resource = a.subresource ? `${a.kind.plural}/${a.subresource}` : a.kind.plural;
    const verbs = [...a.verbs].sort();
    const key = `${a.kind.group}|${verbs.join(",")}`;
    const rule = merged.get(key) ?? { apiGroups: [a.kind.group], resources: [], verbs };
    if (!rule.resources.includes(resource)) rule.resources.push(resource);
    merged.set(key, rule);
  }
  return [...merged.values()]
    .map((r) => ({ ...r, resources: r.resources.sort() }))
    .sort((a, b) => (a.apiGroups[0]! + a.resources[0]).localeCompare(b.apiGroups[0]! + b.resources[0]));
}

/** Where the operator may act: everywhere (one ClusterRole), or only in the watched namespaces. */
export interface RbacScope {
  /**
   * Namespaces whose MLModels the operator manages (its --namespace flags); empty or absent:
   * every namespace. When set, its namespaced rights are a Role in each of them, and only the
   * cluster-scoped ones (ClusterServingRuntimes) stay cluster-wide.
   */
  watchNamespaces?: readonly string[];
}

/** The operator's rights on namespaced kinds (a Role per watched namespace in a namespaced install). */
export const namespacedAccess = (): Access[] => operatorAccess.filter((a) => a.kind.namespaced);
/** Its rights on cluster-scoped kinds: the ClusterRole of a namespaced install. */
export const clusterScopedAccess = (): Access[] => operatorAccess.filter((a) => !a.kind.namespaced);

export function rbacManifests(namespace = defaultOperatorNamespace, scope: RbacScope = {}): KubeObject[] {
  const subject = { kind: "ServiceAccount", name: operatorName, namespace };
  const watched = scope.watchNamespaces ?? [];
  const inNamespace = (kind: "Role" | "RoleBinding", name: string, ns: string) => ({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind,
    metadata: { name, namespace: ns, labels: partOf },
  });
  return [
    {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: {
        name: namespace,
        labels: { ...partOf, "pod-security.kubernetes.io/enforce": "restricted" },
      },
    },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: operatorName, namespace, labels: partOf } },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: operatorName, labels: partOf },
      rules: rulesFor(watched.length ? clusterScopedAccess() : operatorAccess),
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: operatorName, labels: partOf },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: operatorName },
      subjects: [subject],
    },
    ...watched.flatMap((ns) => [
      { ...inNamespace("Role", operatorName, ns), rules: rulesFor(namespacedAccess()) },
      {
        ...inNamespace("RoleBinding", operatorName, ns),
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: operatorName },
        subjects: [subject],
      },
    ]),
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: `${operatorName}-leader-election`, namespace, labels: partOf },
      rules: rulesFor([leaderElectionAccess]),
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: `${operatorName}-leader-election`, namespace, labels: partOf },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "Role",
        name: `${operatorName}-leader-election`,
      },
      subjects: [subject],
    },
    // Finding the node cache and reading its agents' states, whether or not it is installed.
    ...operatorNodeCacheRbac(namespace, operatorName),
    ...admissionPolicyManifests(namespace),
  ];
}

/** The install bundle, grouped as the files under deploy/. */
export function installManifests(
  namespace = defaultOperatorNamespace,
  scope: RbacScope = {},
): { file: string; objects: KubeObject[] }[] {
  return [
    ...allCrds.map((crd) => ({
      file: `crds/${crd.metadata.name}.yaml`,
      objects: [crd as unknown as KubeObject],
    })),
    ...builtinRuntimes.map((rt) => ({
      file: `runtimes/${rt.metadata.name}.yaml`,
      objects: [rt as KubeObject],
    })),
    { file: "rbac/operator.yaml", objects: rbacManifests(namespace, scope) },
  ];
}
