/**
 * What the tests on the run's real node share (`// test-needs: real-node`): the real-node
 * cluster scripts/test.ts started for the run, the sample model's file server on the node's
 * bridge, and a way to reach a model's Service from this machine.
 *
 * There is no cluster DNS on the real node (docs/real-node.md), so `http://<svc>.<ns>.svc:<port>`
 * (an MLModel's status.url) resolves nowhere. `serviceEndpoint` asks the API for that Service's
 * ClusterIP and keeps the URL's host as the Host header: the request takes the path a client in
 * the cluster would take (kube-proxy's rules for the ClusterIP, then a pod), only the name lookup
 * is done through the API instead of DNS.
 */
import http from "node:http";
import { join } from "node:path";
import { type ClusterState, readState, realNodeDefaults } from "../../src/cluster/index.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../src/runtime/index.ts";

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

export const nodeIp = realNodeDefaults.nodeIp;

/** Where to send a request for a Service URL: its ClusterIP, and the URL's host as the Host header. */
export interface ServiceEndpoint {
  /** `http://<ClusterIP>:<port>` */
  base: string;
  /** The URL's `host:port`, sent as the Host header. */
  host: string;
}

/** Resolves `http://<svc>.<ns>.svc[.cluster.local]:<port>` through the API (no cluster DNS here). */
export async function serviceEndpoint(client: KubeClient, url: string): Promise<ServiceEndpoint> {
  const parsed = new URL(url);
  const [name, namespace, svc] = parsed.hostname.split(".");
  if (!name || !namespace || svc !== "svc") throw new Error(`${url} is not a Service URL (<svc>.<ns>.svc)`);
  const service = await client.get<KubeObject & { spec?: { clusterIP?: string } }>(builtinKinds.Service, {
    namespace,
    name,
  });
  const clusterIp = service?.spec?.clusterIP;
  if (!clusterIp || clusterIp === "None") throw new Error(`Service ${namespace}/${name} has no ClusterIP`);
  return { base: `http://${clusterIp}:${parsed.port || 80}`, host: parsed.host };
}

export interface V2Answer {
  status: number;
  /** The first output's data, when the server answered 200. */
  data?: number[];
  body: string;
}

/**
 * One V2 inference request (`POST /v2/models/<model>/infer`, one FP64 tensor) on a connection
 * of its own: each request is balanced anew by kube-proxy, as a request from a new client is.
 */
export function inferV2(
  endpoint: ServiceEndpoint,
  model: string,
  inputs: number[][],
  timeoutMs = 10_000,
): Promise<V2Answer> {
  const body = JSON.stringify({
    inputs: [
      { name: "input-0", shape: [inputs.length, inputs[0]!.length], datatype: "FP64", data: inputs.flat() },
    ],
  });
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${endpoint.base}/v2/models/${model}/infer`,
      {
        method: "POST",
        agent: false,
        headers: { host: endpoint.host, "content-type": "application/json", connection: "close" },
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          const status = res.statusCode ?? 0;
          if (status !== 200) return resolve({ status, body: text });
          try {
            const answer = JSON.parse(text) as { outputs: { data: number[] }[] };
            resolve({ status, body: text, data: answer.outputs[0]?.data });
          } catch (err) {
            reject(
              new Error(`status 200 with a body that is not V2 JSON (${(err as Error).message}): ${text}`),
            );
          }
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}
