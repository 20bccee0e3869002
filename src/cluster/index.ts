/** The local control plane, as a library: the CLI and the test harness both use it. */
export { aptInstall } from "./apt.ts";
export { BinaryError, binaryNames, ensureBinaries, ensureNodeBinaries, nodeBinaryNames } from "./binaries.ts";
export {
  ClusterError,
  type ClusterState,
  type ComponentHealth,
  type DownResult,
  down,
  kubeconfigPath,
  loadImage,
  loadImageIfChanged,
  type NodeFault,
  nodeFault,
  nodeFaults,
  readState,
  realNodeCount,
  restartComponent,
  status,
  type UpOptions,
  up,
} from "./cluster.ts";
export { gatewayApiVersion, installGatewayApiCrds } from "./gateway-api.ts";
export { clusterNetwork } from "./network.ts";
export {
  fleetPaths,
  kwokTaint,
  machineLockPath,
  memberOf,
  multiNodeDefaults,
  nodePaths,
  podReachableHostPorts,
  realNodeDefaults,
} from "./node/config.ts";
export { DrainError, drainNode, podsToEvict, setSchedulable } from "./node/drain.ts";
export type { MemberHealth, RealNodesInfo } from "./node/fleet.ts";
export type { LocalImage, NodeImages } from "./node/images.ts";
export { listenForPods } from "./node/network.ts";
export {
  NodeError,
  type NodeHealth,
  type RealNodeInfo,
  readFleetJournal,
  releaseRealNode,
  reserveRealNode,
  teardownFleet,
  teardownNode,
} from "./node/node.ts";
export {
  type ArchiveLayer,
  archiveFormat,
  type ImageSettings,
  type LayerBlob,
  packImage,
  sha256Digest,
  writeImageArchive,
} from "./node/oci.ts";
export {
  ensureRealNodePrerequisites,
  PrerequisiteError,
  type RealNodeSupport,
  realNodePrerequisitesMissing,
  realNodeSupport,
} from "./node/prerequisites.ts";
export { defaultClusterDir } from "./paths.ts";
export { servingCertificate } from "./pki.ts";
export { versions } from "./versions.ts";
