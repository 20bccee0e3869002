/**
 * The sample scikit-learn model on a real node, end to end: trained in a pod of the MLServer
 * image (so the pickle is made by the scikit-learn that will load it), packed as the tar.gz a
 * model URI points at, served to the node's pods over HTTPS from the host, with a CA of its own
 * and an optional bandwidth limit (so a download's progress can be watched), and asked for
 * predictions through the model's Service.
 *
 * There is no cluster DNS on the real node (docs/real-node.md), so `http://<svc>.<ns>.svc:<port>`
 * (an MLModel's status.url) resolves nowhere. `serviceEndpoint` asks the API for that Service's
 * ClusterIP and keeps the URL's host as the Host header: the request takes the path a client in
 * the cluster takes (kube-proxy's rules for the ClusterIP, then a pod); only the name lookup goes
 * through the API instead of DNS. `curlCommand` does the same with curl's --resolve.
 *
 * Used by `mlmodel start --real-node`, the real-node e2e tests and the first-inference bench.
 */
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { listenForPods, servingCertificate } from "../cluster/index.ts";
import { recipeFor, sklearnSampleScript } from "./recipes.ts";

export interface SampleModel {
  /** The model's name inside MLServer (model-settings.json). */
  name: string;
  version: number;
  broken: boolean;
  /** `tar -czf` of model.joblib and model-settings.json (and padding.bin when asked for). */
  archive: Buffer;
  /** The archive's sha256, as `spec.model.sha256` takes it. */
  sha256: string;
  /** A V2 request's rows, and what scikit-learn predicted for them where it was trained. */
  inputs: number[][];
  predictions: number[];
}

export interface TrainOptions {
  namespace: string;
  name?: string;
  /** Rotates the training labels, so two versions answer the same rows differently. */
  version?: number;
  /** A model.joblib MLServer cannot load (a real crash loop). */
  broken?: boolean;
  /** Random bytes added as padding.bin (MLServer ignores it): a download long enough to watch. */
  paddingBytes?: number;
  /** The image to train with (default: the built-in runtime's MLServer image). */
  image?: string;
  /** How long the training pod may take (default 5 minutes). */
  timeoutMs?: number;
}

const outputMarker = "MLMODEL-SAMPLE";

/** The training pod: restricted-level settings, the script in its environment, no token. */
export function trainingPod(name: string, options: TrainOptions): V1Pod {
  const flags = [
    "--name",
    options.name ?? "iris",
    "--version",
    String(options.version ?? 1),
    ...(options.broken ? ["--broken"] : []),
  ];
  const padding = options.paddingBytes
    ? `head -c ${options.paddingBytes} /dev/urandom > /tmp/m/padding.bin && `
    : "";
  const files = `model.joblib model-settings.json${options.paddingBytes ? " padding.bin" : ""}`;
  // One line of expected predictions, one line of the archive, each after a marker: whatever
  // else python or tar print cannot be mistaken for them.
  const script = [
    `python3 -c "$TRAIN" --out /tmp/m ${flags.join(" ")} >&2`,
    `${padding}echo "${outputMarker}-EXPECTED $(cat /tmp/m/expected.json)"`,
    `echo "${outputMarker}-ARCHIVE $(tar -czf - -C /tmp/m ${files} | base64 -w0)"`,
  ].join(" && ");
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: { "app.kubernetes.io/name": "mlmodel-sample-training" } },
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 1000,
        seccompProfile: { type: "RuntimeDefault" },
      },
      containers: [
        {
          name: "train",
          image: options.image ?? recipeFor("mlserver").ref,
          imagePullPolicy: "IfNotPresent",
          command: ["sh", "-c", script],
          env: [{ name: "TRAIN", value: readFileSync(sklearnSampleScript, "utf8") }],
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
        },
      ],
    },
  };
}

/** Reads the training pod's output: the expected predictions and the archive. */
export function parseTrainingOutput(log: string): Pick<SampleModel, "archive" | "inputs" | "predictions"> {
  const line = (tag: string) =>
    log
      .split("\n")
      .find((l) => l.startsWith(`${outputMarker}-${tag} `))
      ?.slice(`${outputMarker}-${tag} `.length);
  const expected = line("EXPECTED");
  const archive = line("ARCHIVE");
  if (!expected || !archive) throw new Error(`the training pod printed no model:\n${log.slice(-2000)}`);
  const { inputs, predictions } = JSON.parse(expected) as { inputs: number[][]; predictions: number[] };
  return { archive: Buffer.from(archive, "base64"), inputs, predictions };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Trains the sample model in a pod of `options.namespace` and returns it packed. */
export async function trainSampleModel(kc: KubeConfig, options: TrainOptions): Promise<SampleModel> {
  const core = kc.makeApiClient(CoreV1Api);
  const { namespace } = options;
  const name = `train-sample-${randomBytes(4).toString("hex")}`;
  await core.createNamespacedPod({ namespace, body: trainingPod(name, options) });
  try {
    const deadline = Date.now() + (options.timeoutMs ?? 300_000);
    let pod = await core.readNamespacedPod({ name, namespace });
    while (pod.status?.phase !== "Succeeded" && pod.status?.phase !== "Failed") {
      if (Date.now() > deadline)
        throw new Error(
          `the training pod ${namespace}/${name} did not finish: ${JSON.stringify(pod.status)}`,
        );
      await sleep(500);
      pod = await core.readNamespacedPod({ name, namespace });
    }
    const log = await core.readNamespacedPodLog({ name, namespace, container: "train" });
    if (pod.status.phase === "Failed")
      throw new Error(`training the sample model failed:\n${log.slice(-3000)}`);
    const output = parseTrainingOutput(log);
    return {
      name: options.name ?? "iris",
      version: options.version ?? 1,
      broken: options.broken ?? false,
      ...output,
      sha256: createHash("sha256").update(output.archive).digest("hex"),
    };
  } finally {
    await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 }).catch(() => {});
  }
}

export interface ModelFileServer {
  /** `https://<host>:<port>` */
  url: string;
  /** The CA that signed the server's certificate: the download Job's `ca.crt`. */
  ca: string;
  /** Serves `body` at `/<name>`; returns its URL. */
  add(name: string, body: Buffer): string;
  /** Bytes per second each response is sent at (0: as fast as possible). */
  bytesPerSecond: number;
  /** How many times each path was requested. */
  requests: Map<string, number>;
  /** Body bytes handed to the connection per path (a response cut short counts what it sent): the access log's bytes. */
  bytesSent: Map<string, number>;
  stop(): Promise<void>;
}

/**
 * An HTTPS file server on `host` (the node's bridge address: pods reach the host there and
 * nowhere else, at the ports `listenForPods` picks from), with a certificate for that address
 * from a CA of its own.
 */
export async function startModelFileServer(options: {
  host: string;
  bytesPerSecond?: number;
}): Promise<ModelFileServer> {
  const tls = await servingCertificate({ caName: "mlmodel-sample-models", ips: [options.host] });
  const files = new Map<string, Buffer>();
  const requests = new Map<string, number>();
  const bytesSent = new Map<string, number>();
  const server = https.createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    const path = new URL(req.url ?? "/", "https://x").pathname;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    const body = files.get(path);
    if (!body || req.method !== "GET") {
      res.writeHead(body ? 405 : 404).end();
      return;
    }
    res.writeHead(200, { "content-length": body.length, "content-type": "application/gzip" });
    sendThrottled(res, body, served.bytesPerSecond, (bytes) =>
      bytesSent.set(path, (bytesSent.get(path) ?? 0) + bytes),
    );
  });
  // A port pods may reach: the real node's guard drops the others (podReachableHostPorts).
  const port = await listenForPods(server, options.host);
  const url = `https://${options.host}:${port}`;
  const served: ModelFileServer = {
    url,
    ca: tls.ca,
    bytesPerSecond: options.bytesPerSecond ?? 0,
    requests,
    bytesSent,
    add(name, body) {
      files.set(`/${name}`, body);
      return `${url}/${name}`;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return served;
}

/** Writes `body` in ten slices a second at about `bytesPerSecond` (all at once when 0); `sent` counts each slice. */
function sendThrottled(
  res: http.ServerResponse,
  body: Buffer,
  bytesPerSecond: number,
  sent: (bytes: number) => void,
): void {
  if (!bytesPerSecond) {
    sent(body.length);
    res.end(body);
    return;
  }
  const step = Math.max(1, Math.floor(bytesPerSecond / 10));
  let at = 0;
  const timer = setInterval(() => {
    const chunk = body.subarray(at, at + step);
    at += step;
    sent(chunk.length);
    if (at >= body.length) {
      clearInterval(timer);
      res.end(chunk);
    } else res.write(chunk);
  }, 100);
  res.on("close", () => clearInterval(timer));
}

/** A V2 inference request body: the rows as one FP64 tensor. */
export function v2Request(inputs: number[][]): string {
  return JSON.stringify({
    inputs: [
      { name: "input-0", shape: [inputs.length, inputs[0]!.length], datatype: "FP64", data: inputs.flat() },
    ],
  });
}

/** Where to send a request for a Service URL: its ClusterIP, and the URL's host as the Host header. */
export interface ServiceEndpoint {
  /** `http://<ClusterIP>:<port>` */
  base: string;
  /** The URL's `host:port`, sent as the Host header. */
  host: string;
}

/** Resolves `http://<svc>.<ns>.svc[.cluster.local]:<port>` through the API (no cluster DNS here). */
export async function serviceEndpoint(core: CoreV1Api, url: string): Promise<ServiceEndpoint> {
  const parsed = new URL(url);
  const [name, namespace, svc] = parsed.hostname.split(".");
  if (!name || !namespace || svc !== "svc") throw new Error(`${url} is not a Service URL (<svc>.<ns>.svc)`);
  const service = await core.readNamespacedService({ name, namespace });
  const clusterIp = service.spec?.clusterIP;
  if (!clusterIp || clusterIp === "None") throw new Error(`Service ${namespace}/${name} has no ClusterIP`);
  return { base: `http://${clusterIp}:${parsed.port || 80}`, host: parsed.host };
}

export interface V2Answer {
  status: number;
  /** The first output's data, when the server answered 200. */
  data?: number[];
  body: string;
}

export interface InferOptions {
  /** How long to wait for the whole answer (default 10 s). */
  timeoutMs?: number;
  /** The connection's source port (default: one the kernel picks). */
  localPort?: number;
}

/**
 * One V2 inference request (`POST /v2/models/<model>/infer`, one FP64 tensor) on a connection
 * of its own: each request is balanced anew by kube-proxy, as a request from a new client is.
 */
export function inferV2(
  endpoint: ServiceEndpoint,
  model: string,
  inputs: number[][],
  { timeoutMs = 10_000, localPort }: InferOptions = {},
): Promise<V2Answer> {
  const body = v2Request(inputs);
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${endpoint.base}/v2/models/${model}/infer`,
      {
        method: "POST",
        agent: false,
        headers: { host: endpoint.host, "content-type": "application/json", connection: "close" },
        timeout: timeoutMs,
        localPort,
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

/**
 * A curl command that sends the V2 request to the model's status URL from this machine: the
 * Service's name resolved to its ClusterIP with --resolve, since nothing resolves it here.
 */
export function curlCommand(
  url: string,
  endpoint: ServiceEndpoint,
  model: string,
  inputs: number[][],
): string {
  const { hostname, port } = new URL(url);
  const clusterIp = new URL(endpoint.base).hostname;
  return [
    "curl -s",
    `--resolve ${hostname}:${port || 80}:${clusterIp}`,
    "-H 'content-type: application/json'",
    `-d '${v2Request(inputs)}'`,
    `${url}/v2/models/${model}/infer`,
  ].join(" ");
}
