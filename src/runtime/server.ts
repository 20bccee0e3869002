/**
 * The manager's two small HTTP servers: /metrics, and /healthz + /readyz probes.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";

// node:http through getBuiltinModule, not `import`: an ES import of a built-in reads every
// export, and node:http's WebSocket, CloseEvent and MessageEvent are getters that load
// Node's bundled undici (with http2, zlib and web streams: 75 more internal modules, about
// 3 MiB of an idle operator's memory). The same goes for every
// module of the operator's process that imports node:http.
const { createServer } = process.getBuiltinModule("node:http");

export type Check = () => { ok: true } | { ok: false; reason: string };

/** Parses "host:port", ":port" or "port"; "0" alone means disabled (controller-runtime's rule). */
export function parseBindAddress(field: string, value: string): { host: string; port: number } | undefined {
  if (value === "0") return undefined;
  const m = /^(?:(\[[^\]]+\]|[^:]*):)?(\d+)$/.exec(value);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535) {
    throw new TypeError(
      `${field} "${value}" must be "host:port", ":port" (all interfaces) or "0" (disabled)`,
    );
  }
  const host = (m[1] ?? "").replace(/^\[|\]$/g, "") || "0.0.0.0";
  return { host, port };
}

export interface Routes {
  [path: string]: () => Promise<{ status: number; type: string; body: string }>;
}

/** Starts a server for `routes`; resolves with it and its "host:port" once listening. */
export async function serve(
  bind: { host: string; port: number },
  routes: Routes,
): Promise<{ server: Server; address: string }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const route = routes[path];
    if (!route || (req.method !== "GET" && req.method !== "HEAD")) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    route().then(
      (r) => res.writeHead(r.status, { "content-type": r.type }).end(r.body),
      (err: unknown) => res.writeHead(500, { "content-type": "text/plain" }).end(`${String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(bind.port, bind.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  return { server, address: `${host}:${addr.port}` };
}

/** A probe route: 200 "ok" when every check passes, else 500 listing the failures. */
export function probe(checks: Record<string, Check>): Routes[string] {
  return async () => {
    const failed: string[] = [];
    for (const [name, check] of Object.entries(checks)) {
      const r = check();
      if (!r.ok) failed.push(`[-]${name} failed: ${r.reason}`);
    }
    return failed.length === 0
      ? { status: 200, type: "text/plain", body: "ok\n" }
      : { status: 500, type: "text/plain", body: `${failed.join("\n")}\n` };
  };
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
