/**
 * The real node's defaults and where its state lives: everything the node keeps is under
 * `<cluster dir>/node`, except the few host paths that kubelet, containerd and CNI fix
 * (`fixedHostPaths`), which is why one machine hosts one real node at a time.
 */
import { join } from "node:path";

export const realNodeDefaults = {
  /** The Node object's name (kubelet's --hostname-override). */
  nodeName: "mlmodel-node",
  /** A bridge of our own: pods attach to it, and the node's IP is on it, never on eth0. */
  bridge: "mlmodel0",
  podCidr: "10.77.0.0/24",
  /** The bridge's address: the pods' gateway, the node's InternalIP, the API server's advertised address. */
  nodeIp: "10.77.0.1",
  /** Prefix of every iptables chain we add (removed at down, with kubelet's and kube-proxy's). */
  chainPrefix: "MLMODEL-",
  /** A label on the real node, so that pods can select it (kwok nodes carry `type: kwok`). */
  nodeLabel: { "mlmodel.dev/real-node": "true" },
  /** Namespace of the storage provisioner's helper pods. */
  storageNamespace: "local-path-storage",
  storageClass: "local-path",
  provisionerName: "rancher.io/local-path",
  /** How long `up` waits for the machine's real node when another cluster holds it (0: fail at once). */
  lockWaitMs: 0,
} as const;

/**
 * Host ports that pods may reach on the bridge address besides the API server and the
 * kubelet (network.ts drops the rest): the API server's NodePort range (kube-proxy answers
 * there on the bridge address), and a range for services of this machine that pods are meant
 * to reach (the tests' model file servers): `listenForPods` binds a port in it.
 */
export const podReachableHostPorts = {
  nodePorts: { first: 30000, last: 32767 },
  hostServices: { first: 29000, last: 29999 },
} as const;

/** The taint on kwok nodes of a real-node cluster: only pods that tolerate it may land there. */
export const kwokTaint = { key: "kwok.x-k8s.io/node", value: "fake", effect: "NoSchedule" } as const;

/**
 * Host paths that kubelet uses whatever its configuration says: `down` removes each one the
 * node created (`up` records which existed before).
 */
export const kubeletHostPaths = ["/var/lib/kubelet", "/var/log/pods", "/var/log/containers"] as const;

/**
 * Directories where containerd and CNI put entries at fixed paths, and where other containerd
 * instances on the machine (an image build, another tool) put theirs: `down` removes the
 * node's entries (its shims' sockets, its pods' netns, its CNI results) and a directory only
 * when the node created it and it is empty.
 */
export const sharedHostDirs = [
  "/run/containerd/s",
  "/run/containerd",
  "/var/lib/cni/results",
  "/var/lib/cni",
  "/run/netns",
  "/var/run/netns",
  "/opt/containerd",
  "/etc/cni",
  "/opt/cni",
] as const;

export const fixedHostPaths = [...kubeletHostPaths, ...sharedHostDirs] as const;

/** The CNI network's name: libcni names its cached results `<network>-<container>-<ifname>`. */
export const cniNetworkName = "mlmodel";

/**
 * Sysctls that kubelet (overcommit, panic), the CNI bridge plugin (ip_forward) and kube-proxy
 * may change machine-wide. `up` records them; `down` writes the recorded values back.
 */
export const touchedSysctls = [
  "vm.overcommit_memory",
  "vm.panic_on_oom",
  "kernel.panic",
  "kernel.panic_on_oops",
  "kernel.keys.root_maxkeys",
  "kernel.keys.root_maxbytes",
  "net.ipv4.ip_forward",
  "net.ipv4.conf.all.forwarding",
  "net.ipv6.conf.all.forwarding",
  "net.ipv4.conf.all.route_localnet",
  "net.bridge.bridge-nf-call-iptables",
  "net.bridge.bridge-nf-call-ip6tables",
  "net.netfilter.nf_conntrack_max",
  "net.netfilter.nf_conntrack_tcp_timeout_established",
  "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
  "net.netfilter.nf_conntrack_tcp_be_liberal",
] as const;

/** The cgroup (in every hierarchy) under which kubelet puts every pod: ours alone. */
export const cgroupRoot = "mlmodel-node";

/** The machine-wide lock: /run is emptied at boot, like the processes the lock stands for. */
export const machineLockPath = "/run/mlmodel/real-node.lock";

export function nodePaths(clusterDir: string) {
  return nodePathsAt(join(clusterDir, "node"));
}

/** Where one node keeps its state, given its own root directory. */
export function nodePathsAt(root: string) {
  return {
    root,
    journal: join(root, "journal.json"),
    containerdConfig: join(root, "containerd.toml"),
    containerdRoot: join(root, "containerd", "root"),
    containerdState: join(root, "containerd", "state"),
    containerdSocket: join(root, "containerd", "containerd.sock"),
    runcRoot: join(root, "containerd", "runc"),
    containerdOpt: join(root, "containerd", "opt"),
    cniConfDir: join(root, "cni", "net.d"),
    cniIpamDir: join(root, "cni", "ipam"),
    kubeletRoot: join(root, "kubelet"),
    kubeletConfig: join(root, "kubelet-config.yaml"),
    kubeletCertDir: join(root, "kubelet-pki"),
    podLogs: join(root, "pod-logs"),
    resolvConf: join(root, "resolv.conf"),
    kubeProxyConfig: join(root, "kube-proxy-config.yaml"),
    provisionerConfig: join(root, "local-path-config.json"),
    provisionerHelperPod: join(root, "local-path-helper-pod.yaml"),
    volumes: join(root, "volumes"),
    images: join(root, "images"),
  };
}
export type NodePaths = ReturnType<typeof nodePaths>;

/**
 * Several real nodes on one machine (`up --real-nodes N`, N >= 2): each node runs in a network
 * namespace of its own, reached from the host over a veth pair on a bridge of ours, with a
 * pod CIDR of its own (routes between the namespaces carry pod traffic across nodes).
 */
export const multiNodeDefaults = {
  maxNodes: 4,
  /** The host's bridge: every node's veth is a port of it; the host's address is on it. */
  hostBridge: "mlmodel-nodes",
  /** The host side of the node network: the API server's advertised address, and where pods reach this machine. */
  hostIp: "10.78.0.1",
  nodeNetwork: "10.78.0.0/24",
  /** Every node's pod CIDR lies in this range (kube-proxy's clusterCIDR). */
  clusterPodCidr: "10.77.0.0/16",
  /** Zones the nodes are spread over, round-robin. */
  zones: ["zone-a", "zone-b", "zone-c"],
  /** The StorageClass whose volumes live on one node and pin their pods there (ReadWriteOnce). */
  localStorageClass: "local-path",
  /** The StorageClass whose volumes every node mounts at once (ReadWriteMany): one shared host directory. */
  sharedStorageClass: "shared-path",
} as const;

/** Name, addresses, zone and cgroup of node `index` (1-based) of a multi-node cluster. */
export function memberOf(index: number) {
  const name = `mlmodel-node-${index}`;
  return {
    index,
    name,
    nodeIp: `10.78.0.${10 + index}`,
    podCidr: `10.77.${index}.0/24`,
    /** The pod bridge's address inside the node's namespace: the pods' gateway. */
    podGateway: `10.77.${index}.1`,
    zone: multiNodeDefaults.zones[(index - 1) % multiNodeDefaults.zones.length]!,
    cgroupRoot: name,
    /** The host end of the node's veth pair (the node's end is eth0 in its namespace). */
    hostVeth: `mlmodel-veth${index}`,
  };
}
export type Member = ReturnType<typeof memberOf>;

/** Where a multi-node cluster keeps the state of its nodes. */
export function fleetPaths(clusterDir: string) {
  const root = join(clusterDir, "nodes");
  return {
    root,
    journal: join(root, "journal.json"),
    /** The ReadWriteMany class's volumes: one directory every node mounts. */
    shared: join(root, "shared"),
    provisionerConfig: (storageClass: string) => join(root, `${storageClass}-config.json`),
    member: (index: number) => memberPathsAt(join(root, `node-${index}`)),
  };
}

/** One node's state in a multi-node cluster: the one node's layout, its namespace's file and its certificates. */
export function memberPathsAt(root: string) {
  return { ...nodePathsAt(root), netns: join(root, "netns"), pki: join(root, "pki") };
}
