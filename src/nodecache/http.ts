// The small HTTP client every side of the node cache uses (agent to peer, cache-copy and
// download to their node's agent): node:http, streamed bodies, and a bound on silence rather
// than on the whole request, so a 100 GB file may take as long as it needs while a peer that
// stops sending fails fast.
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import http from "node:http";
import { dirname } from "node:path";
import type { Readable } from "node:stream";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";

export interface RequestOptions {
  method?: string;
  body?: string | Buffer | Readable;
  headers?: http.OutgoingHttpHeaders;
  /** How long the other side may keep silent (connect, answer, or inside a body). */
  idleTimeoutMs: number;
  signal?: AbortSignal;
}

/** An answer that is not 2xx: the status and the server's own words. */
export class HttpStatusError extends Error {
  readonly status: number;
  constructor(url: string, status: number, detail: string) {
    super(`${url}: HTTP ${status}${detail ? `: ${detail}` : ""}`);
    this.name = "HttpStatusError";
    this.status = status;
  }
}

/** Resolves with the response once its headers arrive; the body is the caller's to read. */
export function send(url: string, opts: RequestOptions): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: opts.method ?? "GET",
      headers: opts.headers,
      timeout: opts.idleTimeoutMs,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    req.on("timeout", () => req.destroy(new Error(`${url}: no answer within ${opts.idleTimeoutMs / 1000}s`)));
    req.on("error", reject);
    req.on("response", (res) => {
      res.setTimeout(opts.idleTimeoutMs, () =>
        res.destroy(new Error(`${url}: the body stalled for ${opts.idleTimeoutMs / 1000}s`)),
      );
      resolve(res);
    });
    const body = opts.body;
    if (body === undefined || typeof body === "string" || Buffer.isBuffer(body)) req.end(body);
    else pipeline(body, req).catch((err: unknown) => req.destroy(err as Error));
  });
}

export async function readText(res: http.IncomingMessage, limit = 1 << 20): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      res.destroy();
      throw new Error(`an answer over ${limit} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** The `error` member of an agent's JSON error body, or the text as it came. */
function errorDetail(text: string): string {
  try {
    const e = (JSON.parse(text) as { error?: unknown }).error;
    return typeof e === "string" ? e : text.trim();
  } catch {
    return text.trim().slice(0, 300);
  }
}

/** Sends a request and reads a 2xx answer's text; anything else is an HttpStatusError. */
export async function requestText(url: string, opts: RequestOptions): Promise<string> {
  const res = await send(url, opts);
  const text = await readText(res);
  const status = res.statusCode ?? 0;
  if (status < 200 || status >= 300) throw new HttpStatusError(url, status, errorDetail(text));
  return text;
}

/** Sends a request and parses a 2xx JSON answer; anything else is an HttpStatusError. */
export async function requestJson<T>(url: string, opts: RequestOptions): Promise<T> {
  return JSON.parse(await requestText(url, opts)) as T;
}

/**
 * GETs `url` into `target` (through `target`.part, renamed when whole) and returns the size and
 * sha256 of the bytes received, hashed on the way.
 */
export async function downloadTo(
  url: string,
  target: string,
  opts: {
    idleTimeoutMs: number;
    signal?: AbortSignal;
    headers?: http.OutgoingHttpHeaders;
    onBytes?: (n: number) => void;
  },
): Promise<{ size: number; sha256: string }> {
  const res = await send(url, opts);
  const status = res.statusCode ?? 0;
  if (status !== 200) throw new HttpStatusError(url, status, errorDetail(await readText(res)));
  return saveHashed(res, target, opts.onBytes);
}

/** A pass-through stream that counts and hashes what goes through it (told each chunk's size). */
export function hashingTap(onBytes?: (n: number) => void): {
  tap: Transform;
  result: () => { size: number; sha256: string };
} {
  const hash = createHash("sha256");
  let size = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      size += chunk.length;
      onBytes?.(chunk.length);
      done(null, chunk);
    },
  });
  return { tap, result: () => ({ size, sha256: hash.digest("hex") }) };
}

/**
 * Writes `source` to `target` through a part file of its own (two writers of one path never
 * share one), renamed when whole; returns the size and sha256 of the bytes, hashed on the way.
 */
export async function saveHashed(
  source: Readable,
  target: string,
  onBytes?: (n: number) => void,
): Promise<{ size: number; sha256: string }> {
  await mkdir(dirname(target), { recursive: true });
  const part = `${target}.${randomBytes(4).toString("hex")}.part`;
  const { tap, result } = hashingTap(onBytes);
  try {
    await pipeline(source, tap, createWriteStream(part));
    await rename(part, target);
  } catch (err) {
    await rm(part, { force: true });
    throw err;
  }
  return result();
}
