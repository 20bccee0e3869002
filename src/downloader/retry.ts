// Retries with exponential backoff and full jitter, for transient failures only: a 403, a 404
// or a checksum mismatch fails at once, since trying again cannot change the answer.
import { setTimeout as sleep } from "node:timers/promises";
import { type DownloadError, toDownloadError } from "./errors.ts";

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const defaultRetryPolicy: RetryPolicy = { attempts: 6, baseDelayMs: 500, maxDelayMs: 30_000 };

/** The delay before attempt `n` (1 = the first retry): random in [0, min(max, base·2^(n-1))]. */
export function backoffDelay(policy: RetryPolicy, n: number, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (n - 1));
  return Math.floor(random() * ceiling);
}

export async function withRetry<T>(
  policy: RetryPolicy,
  signal: AbortSignal,
  attempt: (n: number) => Promise<T>,
  onRetry: (err: DownloadError, n: number, delayMs: number) => void = () => {},
): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (raw) {
      const err = toDownloadError(raw);
      if (!err.transient || n + 1 >= policy.attempts || signal.aborted) throw err;
      const delay = backoffDelay(policy, n + 1);
      onRetry(err, n + 1, delay);
      await sleep(delay, undefined, { signal });
    }
  }
}
