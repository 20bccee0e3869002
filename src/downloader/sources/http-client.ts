// One HTTP client for the stores spoken to over plain HTTP (https URLs, the HF hub, the GCS JSON
// API): undici with the configured CA bundle, redirects followed, ranged GETs and error mapping.
// Credentials (configured headers, a bearer token, an OAuth token) go only to the origin they
// were configured for: a redirect or a next-page link to another origin is followed without them.
import type { Readable } from "node:stream";
import { Agent, type Dispatcher, request } from "undici";
import { DownloadError, errorForStatus, isTimeout, requestTimedOut, toDownloadError } from "../errors.ts";
import { redactUri } from "../redact.ts";
import { type OpenedBody, parseContentRange } from "./source.ts";

export interface HttpClientOptions {
  ca?: string[];
  /** Headers sent with every request to credentialOrigin (auth). */
  headers?: Record<string, string>;
  /** Headers computed per request to credentialOrigin (a short-lived OAuth token). */
  dynamicHeaders?: () => Promise<Record<string, string>>;
  /** The only origin (`https://host:port`) that receives `headers` and `dynamicHeaders`. */
  credentialOrigin: string;
  /** Hint for 401/403, e.g. "check HF_TOKEN in Secret x". */
  authHint: string;
  /** How long a server may keep silent: before the response headers, and between body bytes. */
  requestTimeoutMs: number;
}

const maxRedirects = 10;
const redirectStatuses = new Set([301, 302, 303, 307, 308]);
const userAgent = { "user-agent": "mlmodel-downloader" };

/** The origin of a URL (scheme, host, port), or undefined for a string that is not one. */
function originOf(url: string): string | undefined {
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

export class HttpClient {
  readonly dispatcher: Dispatcher;
  readonly authHint: string;
  private readonly headers: Record<string, string>;
  private readonly credentialOrigin: string | undefined;
  private readonly dynamicHeaders: (() => Promise<Record<string, string>>) | undefined;
  private readonly timeoutMs: number;
  constructor(opts: HttpClientOptions) {
    this.timeoutMs = opts.requestTimeoutMs;
    // A stalled server fails the attempt (and it is retried) instead of hanging the Job.
    this.dispatcher = new Agent({
      connect: opts.ca ? { ca: opts.ca } : {},
      headersTimeout: opts.requestTimeoutMs,
      bodyTimeout: opts.requestTimeoutMs,
    });
    this.headers = opts.headers ?? {};
    this.credentialOrigin = originOf(opts.credentialOrigin);
    this.authHint = opts.authHint;
    this.dynamicHeaders = opts.dynamicHeaders;
  }

  async getJson<T>(url: string, signal: AbortSignal): Promise<{ data: T; headers: Record<string, unknown> }> {
    const res = await this.send(url, {}, signal);
    try {
      return { data: (await res.body.json()) as T, headers: res.headers };
    } catch (err) {
      throw isTimeout(err)
        ? requestTimedOut(`GET ${redactUri(url)}`, this.timeoutMs, err)
        : toDownloadError(err);
    }
  }

  /**
   * GET from `offset`. With `version` (an ETag from an earlier response) the server is asked
   * for the range only if the object is unchanged (If-Range); otherwise it sends it whole.
   */
  async getRange(
    url: string,
    offset: number,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    const headers: Record<string, string> = {};
    if (offset > 0) {
      headers.range = `bytes=${offset}-`;
      if (version) headers["if-range"] = version;
    }
    const res = await this.send(url, headers, signal, offset > 0);
    if (res.statusCode === 416) {
      // Asked past the end: the part on disk is as long as (or longer than) the object.
      await res.body.dump();
      return this.getRange(url, 0, undefined, signal);
    }
    return openedBody(res, offset);
  }

  /** POSTs a form (an OAuth token request) and returns the JSON answer. */
  async postForm<T>(url: string, form: Record<string, string>, signal?: AbortSignal): Promise<T> {
    let res: Dispatcher.ResponseData;
    try {
      res = await request(url, {
        dispatcher: this.dispatcher,
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...userAgent },
        body: new URLSearchParams(form).toString(),
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      throw isTimeout(err)
        ? requestTimedOut(`POST ${redactUri(url)}`, this.timeoutMs, err)
        : toDownloadError(err);
    }
    if (res.statusCode >= 300) {
      const text = await res.body.text();
      throw errorForStatus(res.statusCode, `POST ${redactUri(url)}: ${text.slice(0, 200)}`, this.authHint);
    }
    return (await res.body.json()) as T;
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }

  /** The configured and the computed credential headers. */
  private async credentials(): Promise<Record<string, string>> {
    const dynamic = this.dynamicHeaders ? await this.dynamicHeaders() : {};
    return { ...this.headers, ...dynamic };
  }

  /**
   * GETs `url`, following redirects itself: a hop to another origin drops the credentials for
   * the rest of the chain (undici's own redirects drop only Authorization and Cookie, and would
   * pass a configured X-Api-Key on).
   */
  private async send(url: string, extra: Record<string, string>, signal: AbortSignal, ranged = false) {
    let at = url;
    let trusted = true;
    for (let hop = 0; ; hop++) {
      trusted &&= this.credentialOrigin !== undefined && originOf(at) === this.credentialOrigin;
      const credentials = trusted ? await this.credentials() : {};
      let res: Dispatcher.ResponseData;
      try {
        res = await request(at, {
          dispatcher: this.dispatcher,
          headers: { ...userAgent, ...credentials, ...extra },
          signal,
        });
      } catch (err) {
        throw isTimeout(err)
          ? requestTimedOut(`GET ${redactUri(url)}`, this.timeoutMs, err)
          : toDownloadError(err);
      }
      const location = redirectStatuses.has(res.statusCode) ? header(res, "location") : undefined;
      if (location !== undefined) {
        await res.body.dump();
        if (hop >= maxRedirects) {
          throw new DownloadError(
            "ServerError",
            `GET ${redactUri(url)}: more than ${maxRedirects} redirects`,
            {
              hint: "check the URI: the server keeps redirecting",
            },
          );
        }
        at = new URL(location, at).href;
        continue;
      }
      if (ranged && res.statusCode === 416) return res;
      if (res.statusCode >= 300) {
        await res.body.dump();
        throw errorForStatus(res.statusCode, `GET ${redactUri(url)}`, this.authHint);
      }
      return res;
    }
  }
}

function header(res: Dispatcher.ResponseData, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function openedBody(res: Dispatcher.ResponseData, asked: number): OpenedBody {
  const etag = header(res, "etag") ?? header(res, "last-modified");
  const version = etag && !etag.startsWith("W/") ? etag : undefined;
  const length = header(res, "content-length");
  const body = res.body as unknown as Readable;
  if (res.statusCode === 206) {
    const range = parseContentRange(header(res, "content-range"));
    if (!range || range.start !== asked) {
      throw new DownloadError("ServerError", `server answered a Range request with range ${range?.start}`, {
        hint: `asked for bytes from ${asked}`,
      });
    }
    return withOptional({ body, offset: asked }, range.total, version);
  }
  return withOptional({ body, offset: 0 }, length === undefined ? undefined : Number(length), version);
}

function withOptional(b: OpenedBody, size: number | undefined, version: string | undefined): OpenedBody {
  if (size !== undefined && Number.isFinite(size)) b.size = size;
  if (version !== undefined) b.version = version;
  return b;
}
