/**
 * `mlmodel install`: applies CRDs, built-in runtimes and RBAC with server-side apply, waiting
 * for the CRDs to be served before creating objects of their kinds.
 */
import { clusterServingRuntimeKind } from "../api/kinds.ts";
import { builtinKinds, type KubeClient, type KubeObject, type ResourceKind } from "../runtime/index.ts";
import { defaultOperatorNamespace, installManifests } from "./manifests.ts";

const installFieldManager = "mlmodel-install";

const admissionKind = (kind: string, plural: string): ResourceKind => ({
  group: "admissionregistration.k8s.io",
  version: "v1",
  kind,
  plural,
  namespaced: false,
});

const kindsByName: Record<string, ResourceKind> = {
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
};

export interface InstallOptions {
  namespace?: string;
  /** Grant the operator's namespaced rights in these namespaces only (RbacScope). */
  watchNamespaces?: readonly string[];
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
  return applied;
}

async function applyOne(client: KubeClient, obj: KubeObject, options: InstallOptions): Promise<KubeObject> {
  const kind = kindsByName[obj.kind];
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
