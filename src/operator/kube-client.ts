/**
 * A KubeClient for a kubeconfig with its TLS settings applied eagerly.
 *
 * Workaround: KubeClient.fromKubeConfig builds its TLS dispatcher lazily behind a getter, and
 * the KubeClient constructor copies the connection with a spread, which reads the getter once
 * (undefined) and so drops the cluster CA: every request fails with "unable to verify the first
 * certificate". Until the runtime fixes that, the operator builds the connection itself.
 */
import type { RequestOptions } from "node:https";
import type { KubeConfig } from "@kubernetes/client-node";
import { Agent } from "undici";
import { KubeClient } from "../runtime/index.ts";

export async function kubeClientFor(kc: KubeConfig): Promise<KubeClient> {
  const cluster = kc.getCurrentCluster();
  if (!cluster)
    throw new TypeError(`kubeconfig has no current cluster (context "${kc.getCurrentContext()}")`);
  const tls: RequestOptions = {};
  await kc.applyToHTTPSOptions(tls);
  const connect: Record<string, unknown> = {};
  if (tls.ca) connect.ca = tls.ca;
  if (tls.cert) connect.cert = tls.cert;
  if (tls.key) connect.key = tls.key;
  if (tls.rejectUnauthorized !== undefined) connect.rejectUnauthorized = tls.rejectUnauthorized;
  if (cluster.tlsServerName) connect.servername = cluster.tlsServerName;
  const dispatcher = cluster.server.startsWith("https:")
    ? new Agent({ connect, bodyTimeout: 0, keepAliveTimeout: 30_000 })
    : undefined;
  return new KubeClient(
    {
      server: cluster.server,
      ...(dispatcher ? { dispatcher } : {}),
      // Re-read per request: tokens from exec plugins and files rotate.
      async headers() {
        const fresh: RequestOptions = {};
        await kc.applyToHTTPSOptions(fresh);
        const out: Record<string, string> = {};
        for (const [name, value] of Object.entries(fresh.headers ?? {}))
          if (value !== undefined) out[name] = String(value);
        return out;
      },
    },
    { userAgent: "mlmodel-operator" },
  );
}
