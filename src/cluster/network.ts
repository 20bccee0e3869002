/**
 * The address ranges of the local cluster, in one place: the API server, kwok and the real
 * node all derive their flags from these.
 */
export const clusterNetwork = {
  /** --service-cluster-ip-range of the API server. */
  serviceCidr: "10.96.0.0/16",
  /** The `kubernetes` Service's ClusterIP (the first address of the range). */
  kubernetesServiceIp: "10.96.0.1",
  /** Where kwok invents pod IPs for its fake pods: nothing answers there. */
  kwokPodCidr: "10.244.0.0/16",
  /** The InternalIP kwok gives its fake nodes: nothing answers there either. */
  kwokNodeIp: "10.0.0.1",
} as const;
