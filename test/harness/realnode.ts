/**
 * What the tests on the run's real node share (`// test-needs: real-node`): the real-node
 * cluster scripts/test.ts started for the run. Reaching a model's Service from this machine
 * (there is no cluster DNS) is src/images/sample-model.ts's serviceEndpoint and inferV2.
 */
import { join } from "node:path";
import {
  type ClusterState,
  down,
  readState,
  releaseRealNode,
  reserveRealNode,
  up,
} from "../../src/cluster/index.ts";
import { ensureImage, imageNames } from "../../src/images/index.ts";
import { nodeLockWaitMs } from "../integration/realnode/harness.ts";

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

/**
 * The real-node cluster of a file that declares `// test-needs: own-real-node`: `realNodes` real
 * nodes with the built images imported, the machine's node held from before `up` to
 * {@link stopOwnRealNodes}, and this process pointed at it (KUBECONFIG, MLMODEL_TEST_CLUSTER_DIR,
 * and with one node MLMODEL_TEST_REAL_NODE_DIR, so `useRealNodeCluster` and the fixtures work).
 */
export async function startOwnRealNodes(
  dir: string,
  realNodes: number,
  progress: (line: string) => void,
): Promise<ClusterState> {
  await reserveRealNode(dir, { waitMs: nodeLockWaitMs, progress });
  const images: string[] = [];
  for (const name of imageNames) images.push((await ensureImage(name)).archive);
  const state = await up({
    dir,
    ...(realNodes === 1 ? { realNode: true } : { realNodes }),
    images,
    stopWhenGone: process.pid,
    nodeLockWaitMs: nodeLockWaitMs,
    progress,
  });
  process.env.KUBECONFIG = state.kubeconfig;
  process.env.MLMODEL_TEST_CLUSTER_DIR = dir;
  if (realNodes === 1) process.env[realNodeDirEnv] = dir;
  return state;
}

/** Its teardown: the cluster down, whatever it reached, then the machine's node let go. */
export async function stopOwnRealNodes(dir: string): Promise<void> {
  await down(dir).catch((err: Error) => console.error(`# down: ${err.message}`));
  await releaseRealNode(dir).catch(() => {});
}
