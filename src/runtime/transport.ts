/**
 * HTTP/1.1 to the API server over Node's own http/https modules, with one keep-alive
 * connection pool per TLS identity.
 *
 * Why not fetch (undici): measured on this machine, a 5 KiB JSON PATCH round trip over TLS
 * cost 400 µs of CPU through undici's fetch and 120 µs through node:https, and importing
 * undici alone costs about 20 MiB of resident memory.
 * A controller makes a handful of small JSON requests per object and a few long watches:
 * the fetch API's streams buy it nothing.
 */
import type * as Http from "node:http";
import type * as Https from "node:https";
import { isIP } from "node:net";
import tls from "node:tls";

// node:http and node:https through getBuiltinModule, not `import`: an ES import of a built-in
// reads every export, and node:http's WebSocket, CloseEvent and MessageEvent getters load
// Node's bundled undici (see src/runtime/server.ts).
const http = process.getBuiltinModule("node:http");
const https = process.getBuiltinModule("node:https");

/** TLS of the connection: the server's CA, SNI name, verification, and a client certificate. */
export interface TlsSettings {
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  rejectUnauthorized?: boolean;
  servername?: string;
}

/** An answer whose status and headers have arrived; the body is read once, by one of the two. */
export interface HttpResponse {
  status: number;
  header(name: string): string | undefined;
  text(): Promise<string>;
  /**
   * Reads the body to its end and drops it (the connection goes back to the pool): for an
   * answer nobody reads, without collecting or decoding it.
   */
  discard(): Promise<void>;
  /** The body as it arrives (watches). Breaking out of the loop closes the connection. */
  body: AsyncIterable<Uint8Array>;
}

export interface HttpRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
  signal?: AbortSignal | undefined;
}

/** A pool of keep-alive connections to one server, rebuilt when its TLS settings change. */
export class NodeTransport {
  readonly #https: boolean;
  readonly #target: Target | undefined;
  #agent: Http.Agent | undefined;
  #tls: TlsSettings | undefined;

  constructor(server: string) {
    this.#https = server.startsWith("https:");
    this.#target = targetOf(server);
  }

  /**
   * Sends one request. `tls` is read for every request: a different object (a client
   * certificate an exec plugin renewed) opens a new pool; the old one's connections close
   * when their requests end.
   */
  async send(req: HttpRequest, tls: TlsSettings | undefined): Promise<HttpResponse> {
    const agent = this.#agentFor(tls);
    try {
      return await once(req, agent, this.#target);
    } catch (err) {
      // A pooled connection the server closed while idle fails at once with ECONNRESET and
      // the request never reached the server: Node's documented remedy is to send it again.
      if ((err as { reusedSocket?: boolean }).reusedSocket && !req.signal?.aborted)
        return await once(req, agent, this.#target);
      throw err;
    }
  }

  /** Closes idle connections (in-flight requests finish). */
  close(): void {
    this.#agent?.destroy();
    this.#agent = undefined;
  }

  #agentFor(tls: TlsSettings | undefined): Http.Agent {
    if (this.#agent && tls === this.#tls) return this.#agent;
    // The previous pool's free sockets go now; its busy ones close when their request ends.
    const old = this.#agent;
    this.#tls = tls;
    // LIFO: the few most recently used connections stay warm, the others go idle. noDelay:
    // a request is one write, and Nagle would only hold back the tail of a larger one (as
    // undici, we send at once).
    const common = { keepAlive: true, scheduling: "lifo" as const, noDelay: true };
    this.#agent = this.#https
      ? new https.Agent({ ...common, ...tlsOptions(tls, this.#target) })
      : new http.Agent(common);
    if (old) for (const sockets of Object.values(old.freeSockets)) for (const s of sockets ?? []) s.destroy();
    return this.#agent;
  }
}

/**
 * One SecureContext for the pool: without it every new connection parses the CA and the
 * client key again (Node builds a context per tls.connect when given PEM options).
 */
function tlsOptions(settings: TlsSettings | undefined, target: Target | undefined): Https.AgentOptions {
  const { ca, cert, key, rejectUnauthorized } = settings ?? {};
  // The SNI name as Node would work it out from the Host header for every request (an IP
  // address sends none), worked out once: that took a tenth of each request's client CPU.
  const servername = settings?.servername ?? target?.servername;
  return {
    secureContext: tls.createSecureContext({
      ...(ca ? { ca } : {}),
      ...(cert ? { cert } : {}),
      ...(key ? { key } : {}),
    }),
    ...(rejectUnauthorized !== undefined ? { rejectUnauthorized } : {}),
    ...(servername !== undefined ? { servername } : {}),
  };
}

/**
 * The server's origin, parsed once: a request to it is sent with host, port and path, so Node
 * does not parse the URL of every request again.
 */
interface Target {
  origin: string;
  protocol: string;
  hostname: string;
  port: string;
  /** "" for an IP address (no SNI), else the host name. */
  servername: string;
}

function targetOf(server: string): Target | undefined {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return undefined;
  }
  if (url.username || url.password) return undefined; // Node takes those from the URL: let it
  const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
  return {
    origin: `${url.protocol}//${url.host}`,
    protocol: url.protocol,
    hostname,
    port: url.port,
    servername: isIP(hostname) ? "" : hostname,
  };
}

/** Where `url` goes: the parsed server's host with the path, or the URL itself elsewhere. */
function destination(url: string, target: Target | undefined): string | Http.RequestOptions {
  if (!target || !url.startsWith(target.origin)) return url;
  const path = url.slice(target.origin.length);
  if (path !== "" && path[0] !== "/" && path[0] !== "?") return url; // another host, e.g. origin:8443
  const { protocol, hostname, port } = target;
  return { protocol, hostname, ...(port ? { port } : {}), path: path || "/" };
}

function once(req: HttpRequest, agent: Http.Agent, target: Target | undefined): Promise<HttpResponse> {
  const headers: Record<string, string | number> = { ...req.headers };
  if (req.body !== undefined) headers["Content-Length"] = Buffer.byteLength(req.body);
  const send = req.url.startsWith("https:") ? https.request : http.request;
  const where = destination(req.url, target);
  const options: Http.RequestOptions = {
    method: req.method,
    headers,
    agent,
    ...(req.signal ? { signal: req.signal } : {}),
  };
  return new Promise((resolve, reject) => {
    const request = typeof where === "string" ? send(where, options) : send({ ...where, ...options });
    request.once("error", (err) => {
      if (request.reusedSocket && (err as { code?: string }).code === "ECONNRESET")
        Object.assign(err, { reusedSocket: true });
      reject(err);
    });
    request.once("response", (res) => {
      resolve({
        status: res.statusCode ?? 0,
        header: (name) => {
          const v = res.headers[name.toLowerCase()];
          return Array.isArray(v) ? v.join(", ") : v;
        },
        text: () => readAll(res, req.signal),
        discard: () => drain(res, req.signal),
        // Made when asked for (watches): most answers are read whole, by text or discard.
        get body() {
          return chunks(res, req.signal);
        },
      });
    });
    request.end(req.body);
  });
}

/**
 * The body's chunks. An abort while the body streams surfaces from Node as a plain "aborted"
 * error; it is reported as the AbortError it is (as before headers arrived, and as fetch does).
 */
async function* chunks(res: Http.IncomingMessage, signal: AbortSignal | undefined): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of res) yield chunk as Buffer;
  } catch (err) {
    if (signal?.aborted) throw abortError(err);
    throw err;
  } finally {
    if (!res.complete) res.destroy();
  }
}

/**
 * The whole body as text. Read through "data" events, not an async iterator: an answer is one
 * or a few chunks, and the iterator's promises per chunk cost more than the chunks.
 */
function readAll(res: Http.IncomingMessage, signal: AbortSignal | undefined): Promise<string> {
  const parts: Buffer[] = [];
  return read(res, signal, (chunk) => parts.push(chunk)).then(() =>
    parts.length === 1 ? parts[0]!.toString("utf8") : Buffer.concat(parts).toString("utf8"),
  );
}

/** Reads `res` to its end without keeping a byte; rejects as readAll does when it is cut short. */
function drain(res: Http.IncomingMessage, signal: AbortSignal | undefined): Promise<void> {
  return read(res, signal, undefined);
}

/**
 * Reads `res` to its end, handing each chunk to `onChunk` (none: dropped). Rejects when the
 * body is cut short: with the AbortError of an abort, else the connection's error.
 */
function read(
  res: Http.IncomingMessage,
  signal: AbortSignal | undefined,
  onChunk: ((chunk: Buffer) => void) | undefined,
): Promise<void> {
  if (res.complete && res.readableEnded) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const fail = (err: unknown) => reject(signal?.aborted ? abortError(err) : err);
    res.once("end", resolve);
    res.once("error", fail);
    // A connection closed before the end emits "close" without "end" (and maybe no error).
    res.once("close", () => {
      if (!res.complete) fail(Object.assign(new Error("aborted"), { code: "ECONNRESET" }));
    });
    if (onChunk) res.on("data", onChunk);
    else res.resume();
  });
}

function abortError(cause: unknown): Error {
  return Object.assign(new Error("This operation was aborted", { cause }), {
    name: "AbortError",
    code: "ABORT_ERR",
  });
}
