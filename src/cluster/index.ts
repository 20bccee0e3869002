/** The local control plane, as a library: the CLI and the test harness both use it. */
export { BinaryError, binaryNames, ensureBinaries } from "./binaries.ts";
export {
  ClusterError,
  type ClusterState,
  type ComponentHealth,
  down,
  kubeconfigPath,
  readState,
  restartComponent,
  status,
  type UpOptions,
  up,
} from "./cluster.ts";
export { gatewayApiVersion, installGatewayApiCrds } from "./gateway-api.ts";
export { defaultClusterDir } from "./paths.ts";
export { versions } from "./versions.ts";
