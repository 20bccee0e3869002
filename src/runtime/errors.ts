import type { Status } from "./types.ts";

/** An error answer of the API server, with the fields a controller decides on. */
export class ApiError extends Error {
  readonly code: number;
  readonly reason?: string;
  /** From the Retry-After header or the Status details (429, some 5xx). */
  readonly retryAfterSeconds?: number;
  readonly status?: Status;
  readonly verb?: string;
  readonly path?: string;

  constructor(
    code: number,
    message: string,
    opts: { reason?: string; retryAfterSeconds?: number; status?: Status; verb?: string; path?: string } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    if (opts.reason !== undefined) this.reason = opts.reason;
    if (opts.retryAfterSeconds !== undefined) this.retryAfterSeconds = opts.retryAfterSeconds;
    if (opts.status !== undefined) this.status = opts.status;
    if (opts.verb !== undefined) this.verb = opts.verb;
    if (opts.path !== undefined) this.path = opts.path;
  }

  /** Builds an ApiError from a Status body (HTTP error or watch ERROR event). */
  static fromStatus(
    status: Status,
    httpCode: number,
    ctx: { verb?: string; path?: string; retryAfter?: string | null } = {},
  ): ApiError {
    const code = status.code ?? httpCode;
    const retryAfter = parseRetryAfter(ctx.retryAfter) ?? status.details?.retryAfterSeconds;
    const where = ctx.verb && ctx.path ? `${ctx.verb} ${ctx.path}: ` : "";
    const opts: ConstructorParameters<typeof ApiError>[2] = { status };
    if (status.reason) opts.reason = status.reason;
    if (retryAfter !== undefined) opts.retryAfterSeconds = retryAfter;
    if (ctx.verb) opts.verb = ctx.verb;
    if (ctx.path) opts.path = ctx.path;
    return new ApiError(code, `${where}${code} ${status.reason ?? ""} ${status.message ?? ""}`.trim(), opts);
  }
}

/** Seconds from a Retry-After header; HTTP dates are turned into seconds from now. */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value == null || value === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(value);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - now) / 1000));
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.code === 404;
}
export function isConflict(err: unknown): boolean {
  return err instanceof ApiError && err.code === 409;
}
export function isGone(err: unknown): boolean {
  return err instanceof ApiError && err.code === 410;
}
export function isTooManyRequests(err: unknown): boolean {
  return err instanceof ApiError && err.code === 429;
}

/**
 * A reconcile error that retrying cannot fix (bad spec, missing permission the user must
 * grant). It is logged and counted, and the key is not requeued: the next change retriggers.
 */
export class TerminalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TerminalError";
  }
}

/**
 * Socket-level codes that mean "no answer from the server" (refused, reset, unreachable, timed
 * out connecting, closed mid-stream): retrying is cheap for the server, which is not there.
 */
const unreachableCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "EAI_AGAIN",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
]);

/**
 * True when a request failed without any HTTP answer because the connection could not be made
 * or broke (undici's "fetch failed" / "terminated" with such a cause). An ApiError (the server
 * answered, e.g. 429 or 503: "slow down") is never unreachable, nor are TLS or header-timeout
 * errors (a server that accepted but did not answer may be overloaded).
 */
export function isUnreachable(err: unknown): boolean {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e instanceof Error; depth++) {
    if (e instanceof ApiError) return false;
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && unreachableCodes.has(code)) return true;
    e = e.cause;
  }
  return false;
}
