/**
 * Pinned versions of the local control plane. The Go wrapper modules under
 * controlplane/modules pin the same versions in their go.mod files; a unit test keeps the
 * two in step.
 */
export const versions = {
  kubernetes: "v1.36.3",
  etcd: "v3.6.16",
  kwok: "v0.8.0",
  /** The storage provisioner of the real node (`mlmodel cluster up --real-node`). */
  localPathProvisioner: "v0.0.30",
} as const;

export type ControlPlaneComponent =
  | "etcd"
  | "kube-apiserver"
  | "kube-controller-manager"
  | "kube-scheduler"
  | "kwok";
/** The processes of the real node (`up --real-node`), started after the control plane. */
export type NodeComponent = "containerd" | "kubelet" | "kube-proxy" | "local-path-provisioner";
/** Started beside the control plane by `up --monitoring` (prometheus.ts). */
export type MonitoringComponent = "prometheus";
export type Component = ControlPlaneComponent | NodeComponent | MonitoringComponent;
