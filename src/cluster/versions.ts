/**
 * Pinned versions of the local control plane. The Go wrapper modules under
 * controlplane/modules pin the same versions in their go.mod files; a unit test keeps the
 * two in step.
 */
export const versions = {
  kubernetes: "v1.36.3",
  etcd: "v3.6.16",
  kwok: "v0.8.0",
} as const;

export type Component = "etcd" | "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" | "kwok";
