// Publishes download progress into the MLModel's status.download with server-side apply on the
// status subresource, under the downloader's own field manager: it owns only the fields it
// sends, so it can never clobber what the operator writes. Throttled to one patch per interval,
// never two in flight, and best effort: a failing patch is logged and the download goes on.
import http from "node:http";
import https from "node:https";
import type { DownloadStatus } from "./contract.ts";
import { mlmodelResource, modelNameEnv, modelNamespaceEnv, progressFieldManager } from "./contract.ts";
import type { Env } from "./credentials.ts";

export interface StatusTarget {
  name: string;
  namespace: string;
}

export function statusTargetFromEnv(env: Env): StatusTarget | undefined {
  const name = env[modelNameEnv];
  const namespace = env[modelNamespaceEnv];
  return name && namespace ? { name, namespace } : undefined;
}

export function statusPatchPath(t: StatusTarget): string {
  const r = mlmodelResource;
  const q = new URLSearchParams({ fieldManager: progressFieldManager, force: "true" });
  return `/apis/${r.group}/${r.version}/namespaces/${encodeURIComponent(t.namespace)}/${r.plural}/${encodeURIComponent(t.name)}/status?${q}`;
}

/** The apply configuration: identity plus the one field this manager owns. */
export function statusApplyBody(t: StatusTarget, status: DownloadStatus): string {
  return JSON.stringify({
    apiVersion: `${mlmodelResource.group}/${mlmodelResource.version}`,
    kind: mlmodelResource.kind,
    metadata: { name: t.name, namespace: t.namespace },
    status: { download: status },
  });
}

/** Sends one apply-patch; resolves to the HTTP status code. */
export type PatchSender = (path: string, body: string) => Promise<number>;

/** A sender over the kubeconfig's connection (in-cluster service account in a pod, or KUBECONFIG). */
export async function kubeConfigSender(): Promise<PatchSender> {
  const { KubeConfig } = await import("@kubernetes/client-node");
  const kc = new KubeConfig();
  kc.loadFromDefault();
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error("no Kubernetes API server in the kubeconfig or the pod's environment");
  const base = new URL(server);
  const options: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(options);
  return (path, body) =>
    new Promise((resolve, reject) => {
      const url = new URL(base.pathname.replace(/\/$/, "") + path, base);
      const send = url.protocol === "http:" ? http.request : https.request;
      const req = send(url, {
        ...options,
        method: "PATCH",
        timeout: 10_000,
        headers: {
          ...options.headers,
          "content-type": "application/apply-patch+yaml",
          accept: "application/json",
        },
      });
      req.on("response", (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
      req.on("timeout", () => req.destroy(new Error("status patch timed out")));
      req.on("error", reject);
      req.end(body);
    });
}

export class StatusReporter {
  private readonly target: StatusTarget;
  private readonly send: PatchSender;
  private readonly log: (line: string) => void;
  private inFlight: Promise<void> | undefined;
  private lastError = "";
  sent = 0;
  constructor(target: StatusTarget, send: PatchSender, log: (line: string) => void) {
    this.target = target;
    this.send = send;
    this.log = log;
  }

  /** Called every interval: skips the tick while the previous patch is still out. */
  tick(status: DownloadStatus): void {
    if (this.inFlight) return;
    this.inFlight = this.report(status).finally(() => {
      this.inFlight = undefined;
    });
  }

  /** The last word (Complete or Failed): waits for any patch out, then sends this one. */
  async flush(status: DownloadStatus): Promise<void> {
    await this.inFlight;
    await this.report(status);
  }

  private async report(status: DownloadStatus): Promise<void> {
    try {
      const code = await this.send(statusPatchPath(this.target), statusApplyBody(this.target, status));
      this.sent++;
      if (code >= 300)
        this.warnOnce(`status patch of ${this.target.namespace}/${this.target.name}: HTTP ${code}`);
    } catch (err) {
      this.warnOnce(
        `status patch of ${this.target.namespace}/${this.target.name}: ${(err as Error).message}`,
      );
    }
  }

  /** Repeats of the same failure are not logged every 2 s. */
  private warnOnce(message: string): void {
    if (message === this.lastError) return;
    this.lastError = message;
    this.log(`warning: ${message} (progress is not shown in status; the download goes on)`);
  }
}
