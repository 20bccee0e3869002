// A real HTTP(S) file server on loopback for the downloader's tests: Range and If-Range, ETags,
// redirects, bearer auth, and faults a test switches on (503s, a connection cut mid-body, a
// slow body). It records every request so tests can assert what the downloader sent.
import { createHash } from "node:crypto";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";

export interface ServedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
}

export interface Faults {
  /** Answer the next N file requests with 503. */
  fail503?: number;
  /** Cut the connection after this many body bytes, on the next `cutTimes` file requests. */
  cutAfterBytes?: number;
  cutTimes?: number;
  /** Send the body at about this many bytes per second. */
  bytesPerSecond?: number;
  /**
   * With bytesPerSecond: stop sending once this many bytes of the body went out, until `until`
   * settles, so a test can observe a download mid-file however late its observer runs.
   */
  holdAt?: { bytes: number; until: Promise<unknown> };
}

export type Route = (req: http.IncomingMessage, res: http.ServerResponse) => boolean | Promise<boolean>;

export interface FileServerOptions {
  tls?: { key: string; cert: string };
  host?: string;
  bearerToken?: string;
}

export class FileServer {
  readonly files = new Map<string, Buffer>();
  readonly requests: ServedRequest[] = [];
  readonly routes: Route[] = [];
  faults: Faults = {};
  private readonly server: http.Server;
  private readonly opts: FileServerOptions;
  url = "";

  constructor(opts: FileServerOptions = {}) {
    this.opts = opts;
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
      this.handle(req, res).catch((err: unknown) => {
        res.destroy(err as Error);
      });
    };
    this.server = opts.tls ? https.createServer(opts.tls, handler) : http.createServer(handler);
  }

  async start(): Promise<this> {
    const host = this.opts.host ?? "127.0.0.1";
    await new Promise<void>((resolve) => this.server.listen(0, host, resolve));
    const port = (this.server.address() as AddressInfo).port;
    const shown = host === "::1" ? "[::1]" : host;
    this.url = `${this.opts.tls ? "https" : "http"}://${shown}:${port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  fileRequests(path: string): ServedRequest[] {
    return this.requests.filter((r) => r.path === path);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    this.requests.push({ method: req.method ?? "GET", path, headers: req.headers });
    if (this.opts.bearerToken && req.headers.authorization !== `Bearer ${this.opts.bearerToken}`) {
      res.writeHead(401).end("unauthorized");
      return;
    }
    for (const route of this.routes) if (await route(req, res)) return;
    const body = this.files.get(path);
    if (!body) {
      res.writeHead(404).end("not found");
      return;
    }
    if (this.faults.fail503 && this.faults.fail503 > 0) {
      this.faults.fail503--;
      res.writeHead(503).end("busy");
      return;
    }
    this.serveBody(req, res, body);
  }

  private serveBody(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): void {
    const etag = `"${createHash("sha256").update(body).digest("hex").slice(0, 16)}"`;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    const ifRange = req.headers["if-range"];
    const honourRange = range && (ifRange === undefined || ifRange === etag);
    let start = 0;
    if (honourRange) {
      start = Number(range[1]);
      if (start >= body.length) {
        res.writeHead(416, { "content-range": `bytes */${body.length}` }).end();
        return;
      }
      res.writeHead(206, {
        etag,
        "content-length": body.length - start,
        "content-range": `bytes ${start}-${body.length - 1}/${body.length}`,
        "accept-ranges": "bytes",
      });
    } else {
      res.writeHead(200, { etag, "content-length": body.length, "accept-ranges": "bytes" });
    }
    this.writeSlice(res, body.subarray(start));
  }

  private writeSlice(res: http.ServerResponse, slice: Buffer): void {
    const { cutAfterBytes, bytesPerSecond } = this.faults;
    if (cutAfterBytes !== undefined && (this.faults.cutTimes ?? 1) > 0) {
      this.faults.cutTimes = (this.faults.cutTimes ?? 1) - 1;
      res.write(slice.subarray(0, cutAfterBytes), () => res.destroy());
      return;
    }
    if (!bytesPerSecond) {
      res.end(slice);
      return;
    }
    // Slow body: 10 chunks a second, so a test can kill the client mid-file.
    const step = Math.max(1, Math.floor(bytesPerSecond / 10));
    const { holdAt } = this.faults;
    let held = holdAt !== undefined;
    void holdAt?.until.finally(() => {
      held = false;
    });
    let at = 0;
    const timer = setInterval(() => {
      if (res.destroyed) return clearInterval(timer);
      if (held && at >= holdAt!.bytes) return;
      const chunk = slice.subarray(at, at + step);
      at += step;
      if (at >= slice.length) {
        clearInterval(timer);
        res.end(chunk);
      } else res.write(chunk);
    }, 100);
    res.on("close", () => clearInterval(timer));
  }
}
