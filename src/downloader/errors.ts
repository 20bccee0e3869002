// Errors of the downloader. Each failure carries a reason (one word, see contract.ts), a hint
// a person can act on, and whether trying again could help: retries happen only for transient
// failures, never for a 403 or a checksum mismatch.
import type { FailureReason } from "./contract.ts";

export class DownloadError extends Error {
  readonly reason: FailureReason;
  readonly hint: string;
  readonly transient: boolean;
  constructor(
    reason: FailureReason,
    message: string,
    opts: { hint?: string; transient?: boolean; cause?: unknown } = {},
  ) {
    super(message, { cause: opts.cause });
    this.name = "DownloadError";
    this.reason = reason;
    this.hint = opts.hint ?? "";
    this.transient = opts.transient ?? false;
  }
}

/** Error codes of sockets and TLS that a later attempt may not hit again. */
const transientNetworkCodes = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "UND_ERR_SOCKET",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_CLOSED",
  "ERR_STREAM_PREMATURE_CLOSE",
]);

const tlsCodes = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

function errorCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Codes and names the HTTP clients give an error when a server kept silent past their timeout. */
const timeoutCodes = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"]);

/**
 * Whether `err`, as an HTTP client threw it (undici, the AWS SDK, our Azure policy), says a
 * request timed out. A DownloadError is already mapped: false.
 */
export function isTimeout(err: unknown): boolean {
  if (err instanceof DownloadError) return false;
  const code = errorCode(err);
  return (
    (code !== undefined && timeoutCodes.has(code)) || (err as Error | undefined)?.name === "TimeoutError"
  );
}

/**
 * A server that took the request and kept silent longer than the request timeout (before its
 * answer, or in the middle of a body). Transient: the attempt is retried, and resumed.
 */
export function requestTimedOut(what: string, timeoutMs: number, cause?: unknown): DownloadError {
  return new DownloadError(
    "NetworkError",
    `${what}: no answer within ${timeoutMs / 1000}s (the request timeout)`,
    {
      cause,
      transient: true,
      hint: "the server took the request and kept silent: check that the endpoint is the storage server and is healthy (each request is tried --retries times; mlmodel download --request-timeout sets the bound)",
    },
  );
}

/** Maps an HTTP status of a storage server to a failure; 408/429/5xx are transient. */
export function errorForStatus(status: number, what: string, hint: string): DownloadError {
  if (status === 401 || status === 403)
    return new DownloadError("AccessDenied", `${what}: HTTP ${status}`, { hint });
  if (status === 404) return new DownloadError("NotFound", `${what}: HTTP 404`, { hint: "check the URI" });
  const transient = status === 408 || status === 429 || status >= 500;
  return new DownloadError(transient ? "ServerError" : "InvalidArgument", `${what}: HTTP ${status}`, {
    transient,
    hint: transient ? "the server failed; it was retried" : "check the URI and the credentials",
  });
}

/** Turns anything thrown by a source (socket, TLS, SDK) into a DownloadError. */
export function toDownloadError(err: unknown, hint = ""): DownloadError {
  if (err instanceof DownloadError) return err;
  const code = errorCode(err);
  const message = err instanceof Error ? err.message : String(err);
  if (code && tlsCodes.has(code)) {
    return new DownloadError("TLSError", `${code}: ${message}`, {
      cause: err,
      hint: "the server's certificate is not trusted: add its CA as ca.crt in the credentials Secret",
    });
  }
  if (code && transientNetworkCodes.has(code)) {
    return new DownloadError("NetworkError", `${code}: ${message}`, {
      cause: err,
      transient: true,
      hint: "check the endpoint is reachable from the cluster",
    });
  }
  return new DownloadError("Internal", message, { cause: err, hint });
}

/** The one-line failure message of the contract: `<uri>: <Reason>: <message>; <hint>`. */
export function failureLine(uri: string, err: DownloadError): string {
  const detail = err.hint ? `${err.message}; ${err.hint}` : err.message;
  return `${uri}: ${err.reason}: ${detail}`.replace(/\s*\n\s*/g, " ");
}
