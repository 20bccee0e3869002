/**
 * `mlmodel install`: applies CRDs, built-in runtimes and RBAC with server-side apply, waiting
 * for the CRDs to be served before creating objects of their kinds; with `operatorPods`, the
 * operator's Deployment too.
 */
import { clusterServingRuntimeKind } from "../api/kinds.ts";
import { builtinKinds, type KubeClient, type KubeObject, type ResourceKind } from "../runtime/index.ts";
import { defaultOperatorNamespace, installManifests } from "./manifests.ts";
import { type NodeCacheOptions, nodeCacheManifests } from "./node-cache.ts";
import { type OperatorDeploymentOptions, operatorPodManifests } from "./operator-deployment.ts";

const installFieldManager = "mlmodel-install";

const admissionKind = (kind: string, plural: string): ResourceKind => ({
  group: "admissionregistration.k8s.io",
  version: "v1",
  kind,
  plural,
  namespaced: false,
});

/** The kind of every object the install bundle (and dist/install.yaml) holds, by its `kind`. */
export const installKinds: Record<string, ResourceKind> = {
  ValidatingAdmissionPolicy: admissionKind("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
  ValidatingAdmissionPolicyBinding: admissionKind(
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
  ),
  CustomResourceDefinition: builtinKinds.CustomResourceDefinition,
  ClusterServingRuntime: clusterServingRuntimeKind,
  Namespace: builtinKinds.Namespace,
  ServiceAccount: builtinKinds.ServiceAccount,
  ClusterRole: builtinKinds.ClusterRole,
  ClusterRoleBinding: builtinKinds.ClusterRoleBinding,
  Role: builtinKinds.Role,
  RoleBinding: builtinKinds.RoleBinding,
  Deployment: builtinKinds.Deployment,
  Service: builtinKinds.Service,
  PodDisruptionBudget: builtinKinds.PodDisruptionBudget,
  DaemonSet: builtinKinds.DaemonSet,
};

export interface InstallOptions {
  namespace?: string;
  /** Grant the operator's namespaced rights in these namespaces only (RbacScope). */
  watchNamespaces?: readonly string[];
  /** Also run the operator as pods: its Deployment, metrics Service and disruption budget. */
  operatorPods?: Omit<OperatorDeploymentOptions, "namespace" | "watchNamespaces">;
  /** Also install the node cache (its agents, their rights, their Service): docs/model-cache.md. */
  nodeCache?: Omit<NodeCacheOptions, "namespace">;
  progress?: (line: string) => void;
  signal?: AbortSignal;
}

async function waitEstablished(client: KubeClient, name: string, signal?: AbortSignal): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const crd = await client.get<
      KubeObject & { status?: { conditions?: { type: string; status: string }[] } }
    >(builtinKinds.CustomResourceDefinition, { name }, { signal });
    if (crd?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    if (attempt >= 300) throw new Error(`CustomResourceDefinition ${name} was not Established after 60s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function install(client: KubeClient, options: InstallOptions = {}): Promise<KubeObject[]> {
  const applied: KubeObject[] = [];
  const bundle = installManifests(options.namespace ?? defaultOperatorNamespace, {
    ...(options.watchNamespaces ? { watchNamespaces: options.watchNamespaces } : {}),
  }).flatMap((f) => f.objects);
  const crds = bundle.filter((o) => o.kind === "CustomResourceDefinition");
  // RBAC and namespace first, then CRDs, then objects of our kinds once served.
  const ordered = [
    ...bundle.filter((o) => o.kind !== "CustomResourceDefinition" && o.kind !== "ClusterServingRuntime"),
    ...crds,
  ];
  for (const obj of ordered) {
    applied.push(await applyOne(client, obj, options));
  }
  for (const crd of crds) await waitEstablished(client, crd.metadata.name!, options.signal);
  for (const obj of bundle.filter((o) => o.kind === "ClusterServingRuntime")) {
    applied.push(await applyOne(client, obj, options));
  }
  // Last: the pods start once everything they serve and the rights they run with are there;
  // the node cache before the operator, which looks for it when it starts.
  if (options.nodeCache) {
    const objects = nodeCacheManifests({
      ...options.nodeCache,
      namespace: options.namespace ?? defaultOperatorNamespace,
    });
    for (const obj of objects) applied.push(await applyOne(client, obj, options));
  }
  if (options.operatorPods) {
    const pods = operatorPodManifests({
      ...options.operatorPods,
      namespace: options.namespace ?? defaultOperatorNamespace,
      ...(options.watchNamespaces ? { watchNamespaces: options.watchNamespaces } : {}),
    });
    for (const obj of pods) applied.push(await applyOne(client, obj, options));
  }
  return applied;
}

async function applyOne(client: KubeClient, obj: KubeObject, options: InstallOptions): Promise<KubeObject> {
  const kind = installKinds[obj.kind];
  if (!kind) throw new Error(`install bundle has an object of unexpected kind ${obj.kind}`);
  const result = await client.apply(kind, obj, {
    fieldManager: installFieldManager,
    force: true,
    signal: options.signal,
  });
  const where = obj.metadata.namespace ? `${obj.metadata.namespace}/` : "";
  options.progress?.(`${obj.kind.toLowerCase()} ${where}${obj.metadata.name} applied`);
  return result;
}
