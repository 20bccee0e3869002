/**
 * What the tests on the run's real node share (`// test-needs: real-node`): the real-node
 * cluster scripts/test.ts started for the run. Reaching a model's Service from this machine
 * (there is no cluster DNS) is src/images/sample-model.ts's serviceEndpoint and inferV2.
 */
import { join } from "node:path";
import { type ClusterState, readState } from "../../src/cluster/index.ts";

/** Set by scripts/test.ts for the files that declare `// test-needs: real-node`. */
export const realNodeDirEnv = "MLMODEL_TEST_REAL_NODE_DIR";

export interface RealNodeCluster {
  dir: string;
  kubeconfig: string;
  state: ClusterState;
  /** The node's bridge address: where pods reach this machine. */
  nodeIp: string;
}

/**
 * Points this test process at the run's real-node cluster (KUBECONFIG, MLMODEL_TEST_CLUSTER_DIR),
 * so that every harness helper (kubeConfig, createNamespace, the operator test bed) works on it.
 */
export async function useRealNodeCluster(): Promise<RealNodeCluster> {
  const dir = process.env[realNodeDirEnv];
  if (!dir)
    throw new Error(
      `${realNodeDirEnv} is not set: run this file through npm test (scripts/test.ts), which starts the run's real-node cluster for files that declare "// test-needs: real-node"`,
    );
  const state = await readState(dir);
  if (!state?.realNode) throw new Error(`${realNodeDirEnv}=${dir} holds no running cluster with a real node`);
  process.env.KUBECONFIG = state.kubeconfig;
  process.env.MLMODEL_TEST_CLUSTER_DIR = dir;
  return { dir, kubeconfig: state.kubeconfig, state, nodeIp: state.realNode.nodeIp };
}

/** The node's local-path directory of a claim's volume (`<pv>_<namespace>_<claim>`). */
export function volumeDir(cluster: RealNodeCluster, pv: string, namespace: string, claim: string): string {
  return join(cluster.dir, "node", "volumes", `${pv}_${namespace}_${claim}`);
}
