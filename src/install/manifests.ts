/**
 * Everything `mlmodel install` applies, as objects: CRDs, built-in runtimes, and the
 * operator's least-privilege RBAC generated from the access table the controller declares.
 * `node src/install/generate.ts` writes the same objects to deploy/.
 */
import { allCrds } from "../api/crds.ts";
import { type Access, leaderElectionAccess, operatorAccess } from "../operator/access.ts";
import { uriSecretType } from "../operator/desired.ts";
import { operatorName } from "../operator/names.ts";
import type { KubeObject } from "../runtime/index.ts";
import { builtinRuntimes } from "./builtin-runtimes.ts";

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

const partOf = { "app.kubernetes.io/part-of": "mlmodel-operator" };

export const secretPolicyName = `${operatorName}-secrets`;

/** What the policy checks (the Helm chart reads it too, from a generated file). */
export const secretPolicyValidations = [
  {
    expression: `object.type == '${uriSecretType}'`,
    message: `the MLModel operator may create only Secrets of type ${uriSecretType} (model URIs)`,
    reason: "Forbidden",
  },
];

/**
 * RBAC cannot say which Secrets a subject may create, and a Secret of type
 * kubernetes.io/service-account-token names a ServiceAccount whose token the cluster then
 * writes into it. So the operator, which may create Secrets only to hold model URIs with
 * credentials in them (src/operator/mlmodel/syncers/uri-secret.ts), is held to that one type by this admission policy.
 */
export function secretPolicyManifests(namespace = defaultOperatorNamespace): KubeObject[] {
  const operator = `system:serviceaccount:${namespace}:${operatorName}`;
  return [
    {
      apiVersion: "admissionregistration.k8s.io/v1",
      kind: "ValidatingAdmissionPolicy",
      metadata: { name: secretPolicyName, labels: partOf },
      spec: {
        failurePolicy: "Fail",
        matchConstraints: {
          resourceRules: [
            { apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["secrets"] },
          ],
        },
        matchConditions: [
          { name: "by-the-operator", expression: `request.userInfo.username == '${operator}'` },
        ],
        validations: secretPolicyValidations,
      },
    },
    {
      apiVersion: "admissionregistration.k8s.io/v1",
      kind: "ValidatingAdmissionPolicyBinding",
      metadata: { name: secretPolicyName, labels: partOf },
      spec: { policyName: secretPolicyName, validationActions: ["Deny"] },
    },
  ];
}

export function rbacManifests(namespace = defaultOperatorNamespace): KubeObject[] {
  const subject = { kind: "ServiceAccount", name: operatorName, namespace };
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
      rules: rulesFor(operatorAccess),
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: operatorName, labels: partOf },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: operatorName },
      subjects: [subject],
    },
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
    ...secretPolicyManifests(namespace),
  ];
}

/** The install bundle, grouped as the files under deploy/. */
export function installManifests(
  namespace = defaultOperatorNamespace,
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
    { file: "rbac/operator.yaml", objects: rbacManifests(namespace) },
  ];
}
