/**
 * The ValidatingAdmissionPolicies the install ships. RBAC says which kinds a subject may write,
 * never what the objects may say; these policies say it, in the API server, with no webhook:
 *
 * - what the operator creates (its ServiceAccount only): Secrets of the model-URI type; Roles,
 *   RoleBindings and ServiceAccounts that are exactly a download identity (desiredDownloadIdentity);
 *   Jobs that run as their model's download identity and Deployments that mount no token;
 * - what an MLModel names (anyone who creates or updates one): the operator runs pods with the
 *   Secret, ConfigMap and ServiceAccount a model names, so the model's author must be allowed to
 *   read that Secret or ConfigMap and to create pods (which may run as any ServiceAccount of the
 *   namespace) themselves. Otherwise the operator would be a confused deputy, lending its rights
 *   to whoever may create an MLModel.
 */
import { mlModelKind } from "../api/kinds.ts";
import { downloaderRoleRule } from "../downloader/contract.ts";
import { uriSecretType } from "../operator/desired.ts";
import { childNames, labels, operatorName } from "../operator/names.ts";
import type { KubeObject } from "../runtime/index.ts";

export const partOf = { "app.kubernetes.io/part-of": "mlmodel-operator" };

interface Validation {
  expression: string;
  message?: string;
  messageExpression?: string;
  reason: "Forbidden";
}

interface ResourceRule {
  apiGroups: string[];
  apiVersions: string[];
  operations: string[];
  resources: string[];
}

/** One admission policy: its name's suffix and what it holds (the matched user aside). */
export interface PolicySpec {
  suffix: string;
  /** Matches only the operator's own requests (its ServiceAccount's username). */
  operatorOnly: boolean;
  resourceRules: ResourceRule[];
  variables?: { name: string; expression: string }[];
  validations: Validation[];
}

/** Stands for the operator's username in the Helm chart's copy of the policies. */
export const operatorUsernamePlaceholder = "OPERATOR_USERNAME";

export const operatorUsername = (namespace: string, name = operatorName): string =>
  `system:serviceaccount:${namespace}:${name}`;

const writes = ["CREATE", "UPDATE"];
const rule = (group: string, resources: string[], operations = writes): ResourceRule => ({
  apiGroups: [group],
  apiVersions: ["*"],
  operations: [...operations],
  resources,
});

const cel = (s: string) => `'${s.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;

/** The model an object of ours belongs to (its model label), '' when unlabelled. */
const modelOfObject = {
  name: "model",
  expression: `has(object.metadata.labels) && ${cel(labels.model)} in object.metadata.labels ? object.metadata.labels[${cel(labels.model)}] : ''`,
};
/** The name of that model's download identity: childNames.downloader(model) is model + suffix. */
const identityOfModel = {
  name: "identity",
  expression: `variables.model == '' ? '' : variables.model + ${cel(childNames.downloader(""))}`,
};

/** `object.rules` equal to exactly the download identity's one rule, for the labelled model. */
function downloaderRuleExpression(): string {
  const marker = "\u0000";
  const expected = downloaderRoleRule(marker);
  const field = (name: keyof typeof expected) => {
    const values = expected[name];
    const list = values.map((v) => (v === marker ? "variables.model" : cel(v))).join(", ");
    return `has(object.rules[0].${name}) && object.rules[0].${name} == [${list}]`;
  };
  return [
    "object.rules.size() == 1",
    field("apiGroups"),
    field("resources"),
    field("resourceNames"),
    field("verbs"),
    "!has(object.rules[0].nonResourceURLs)",
  ].join(" && ");
}

const isResource = (resource: string) => `request.resource.resource == ${cel(resource)}`;

export const secretPolicy: PolicySpec = {
  suffix: "secrets",
  operatorOnly: true,
  resourceRules: [rule("", ["secrets"], ["CREATE"])],
  validations: [
    {
      expression: `object.type == ${cel(uriSecretType)}`,
      message: `the MLModel operator may create only Secrets of type ${uriSecretType} (model URIs)`,
      reason: "Forbidden",
    },
  ],
};

const identityName = `<model>-downloader, labelled ${labels.model}=<model>`;

export const identityPolicy: PolicySpec = {
  suffix: "identities",
  operatorOnly: true,
  resourceRules: [
    rule("rbac.authorization.k8s.io", ["roles", "rolebindings"]),
    rule("", ["serviceaccounts"]),
  ],
  variables: [modelOfObject, identityOfModel],
  validations: [
    {
      expression: "variables.identity != '' && object.metadata.name == variables.identity",
      message: `the MLModel operator may create only a model's download identity: a Role, RoleBinding or ServiceAccount named ${identityName}`,
      reason: "Forbidden",
    },
    {
      expression: `!(${isResource("roles")}) || (${downloaderRuleExpression()})`,
      message: `a Role of the MLModel operator may hold only its model's download rule: ${JSON.stringify(downloaderRoleRule("<model>"))}`,
      reason: "Forbidden",
    },
    {
      expression: `!(${isResource("rolebindings")}) || (object.roleRef.apiGroup == 'rbac.authorization.k8s.io' && object.roleRef.kind == 'Role' && object.roleRef.name == variables.identity && object.subjects.size() == 1 && object.subjects[0].kind == 'ServiceAccount' && object.subjects[0].name == variables.identity && has(object.subjects[0].namespace) && object.subjects[0].namespace == request.namespace)`,
      message:
        "a RoleBinding of the MLModel operator may bind only its model's download Role to that model's download ServiceAccount, both named <model>-downloader, in its own namespace",
      reason: "Forbidden",
    },
    {
      expression: `!(${isResource("serviceaccounts")}) || (has(object.automountServiceAccountToken) && object.automountServiceAccountToken == false && !has(object.secrets) && !has(object.imagePullSecrets))`,
      message:
        "a ServiceAccount of the MLModel operator must set automountServiceAccountToken: false and name no Secrets (only the download pod opts in to its token)",
      reason: "Forbidden",
    },
  ],
};

const podSpec = "object.spec.template.spec";
const mountsNoToken = `has(${podSpec}.automountServiceAccountToken) && ${podSpec}.automountServiceAccountToken == false && (!has(${podSpec}.volumes) || ${podSpec}.volumes.all(v, !has(v.projected) || !has(v.projected.sources) || v.projected.sources.all(s, !has(s.serviceAccountToken))))`;
const runsAsIdentity = `has(${podSpec}.serviceAccountName) && ${podSpec}.serviceAccountName == variables.identity`;

export const workloadPolicy: PolicySpec = {
  suffix: "workloads",
  operatorOnly: true,
  resourceRules: [rule("batch", ["jobs"]), rule("apps", ["deployments"])],
  variables: [modelOfObject, identityOfModel],
  validations: [
    {
      // The download Job runs as its identity; the prune Job as the default account, no token.
      expression: `!(${isResource("jobs")}) || (variables.identity != '' && ${runsAsIdentity}) || ((!has(${podSpec}.serviceAccountName) || ${podSpec}.serviceAccountName == 'default') && ${mountsNoToken})`,
      message: `a Job of the MLModel operator must run as its model's download ServiceAccount (${identityName}), or as the namespace's default ServiceAccount with no token mounted (automountServiceAccountToken: false, no projected token)`,
      reason: "Forbidden",
    },
    {
      expression: `!(${isResource("deployments")}) || (${mountsNoToken} && !(${runsAsIdentity}))`,
      message:
        "a Deployment of the MLModel operator must mount no ServiceAccount token (automountServiceAccountToken: false, no projected token) and may not run as a download identity; its ServiceAccount is the one the MLModel names (spec.serviceAccountName), checked when the model was admitted",
      reason: "Forbidden",
    },
  ],
};

/**
 * One check of the references policy: what the model names (a CEL string, '' for nothing) and
 * the permission its author must hold for it.
 */
interface ReferenceCheck {
  name: string;
  /** The referenced object's name, '' when the model names none. */
  named: string;
  field: string;
  allowed: string;
  missing: string;
  why: string;
}

const referenceChecks: ReferenceCheck[] = [
  {
    name: "credentials",
    named:
      "has(object.spec.model) && has(object.spec.model.credentialsSecretRef) ? object.spec.model.credentialsSecretRef.name : ''",
    field: "spec.model.credentialsSecretRef.name",
    allowed:
      "authorizer.group('').resource('secrets').namespace(request.namespace).name(variables.credentials).check('get').allowed()",
    missing: "'get Secret ' + variables.credentials",
    why: "its keys become environment variables and files of the download and serving pods",
  },
  {
    name: "config",
    named:
      "has(object.spec.model) && has(object.spec.model.configMapRef) ? object.spec.model.configMapRef.name : ''",
    field: "spec.model.configMapRef.name",
    allowed:
      "authorizer.group('').resource('configmaps').namespace(request.namespace).name(variables.config).check('get').allowed()",
    missing: "'get ConfigMap ' + variables.config",
    why: "it is mounted into the serving pods",
  },
  {
    name: "serviceAccount",
    named: "has(object.spec.serviceAccountName) ? object.spec.serviceAccountName : ''",
    field: "spec.serviceAccountName",
    allowed: "authorizer.group('').resource('pods').namespace(request.namespace).check('create').allowed()",
    missing: "'create pods (to run them as ServiceAccount ' + variables.serviceAccount + ')'",
    why: "the serving pods run as it, and Kubernetes lets only those who may create pods in a namespace run pods as its ServiceAccounts",
  },
];

export const referencePolicy: PolicySpec = {
  suffix: "references",
  operatorOnly: false,
  resourceRules: [rule(mlModelKind.group, [mlModelKind.plural])],
  variables: referenceChecks.map((c) => ({ name: c.name, expression: c.named })),
  validations: [
    ...referenceChecks.map((c) => ({
      expression: `variables.${c.name} == '' || ${c.allowed}`,
      messageExpression: `${cel(`${c.field}: `)} + request.userInfo.username + ' may not ' + ${c.missing} + ' in namespace ' + request.namespace + ${cel(`; an MLModel may name only what its author may use (${c.why})`)}`,
      reason: "Forbidden" as const,
    })),
    {
      // The operator runs no Deployment as a download identity (workloadPolicy): say so here.
      expression: `variables.serviceAccount != object.metadata.name + ${cel(childNames.downloader(""))}`,
      messageExpression: `'spec.serviceAccountName: ' + variables.serviceAccount + ${cel(" is this model's download identity, which the operator makes for its download Job alone; name another ServiceAccount")}`,
      reason: "Forbidden",
    },
  ],
};

export const admissionPolicies: readonly PolicySpec[] = [
  secretPolicy,
  identityPolicy,
  workloadPolicy,
  referencePolicy,
];

/** The policy's and its binding's spec, for the operator `username`. */
export function policySpec(policy: PolicySpec, username: string): Record<string, unknown> {
  return {
    failurePolicy: "Fail",
    matchConstraints: { resourceRules: policy.resourceRules },
    ...(policy.operatorOnly
      ? {
          matchConditions: [
            { name: "by-the-operator", expression: `request.userInfo.username == ${cel(username)}` },
          ],
        }
      : {}),
    ...(policy.variables ? { variables: policy.variables } : {}),
    validations: policy.validations,
  };
}

/** Every admission policy with its binding, named `<name>-<suffix>`. */
export function admissionPolicyManifests(namespace: string, name = operatorName): KubeObject[] {
  return admissionPolicies.flatMap((policy) => {
    const policyName = `${name}-${policy.suffix}`;
    return [
      {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingAdmissionPolicy",
        metadata: { name: policyName, labels: partOf },
        spec: policySpec(policy, operatorUsername(namespace, name)),
      },
      {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingAdmissionPolicyBinding",
        metadata: { name: policyName, labels: partOf },
        spec: { policyName, validationActions: ["Deny"] },
      },
    ];
  });
}
