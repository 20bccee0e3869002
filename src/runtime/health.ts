/**
 * Watch health: is an informer still hearing from the API server? Feeds the manager's
 * `/readyz` so that readiness shows an API server outage (the "synced" flag alone stays true
 * forever after the first list).
 *
 * A small state machine driven by the watcher's callbacks, with time read from a Clock only:
 *
 *   Healthy ──error──▶ Failing(since, lastError) ──(grace period passes)──▶ Unhealthy
 *      ▲                     │ more errors: keep `since`, update lastError        │
 *      └──── progress ◀──────┴─────────────────────────────────────────────────────┘
 *
 * "Progress" is any answer from the API server: a list page, a watch that opened, a watch
 * event or a bookmark. A quiet watch is healthy however long it stays quiet: only errors start
 * the clock, so an idle cluster never looks unready. The grace period starts at the FIRST
 * error after the last progress (not at the last progress), and recovery is immediate.
 */
import type { Clock } from "./clock.ts";

export const defaultHealthGracePeriodMs = 10_000;

export type HealthStatus =
  | { healthy: true }
  | { healthy: false; failingForMs: number; errors: number; lastError: string };

export class WatchHealth {
  readonly #clock: Clock;
  readonly #gracePeriodMs: number;
  #failingSince: number | undefined;
  #errors = 0;
  #lastError = "";

  /** `gracePeriodMs`: how long errors may go on before unhealthy; Infinity never reports. */
  constructor(clock: Clock, gracePeriodMs = defaultHealthGracePeriodMs) {
    if (!(gracePeriodMs >= 0)) throw new RangeError(`gracePeriodMs must be >= 0, got ${gracePeriodMs}`);
    this.#clock = clock;
    this.#gracePeriodMs = gracePeriodMs;
  }

  /** The API server answered (list page, watch opened, event, bookmark). */
  progress(): void {
    this.#failingSince = undefined;
    this.#errors = 0;
  }

  /** A list or watch failed (any error: refused connection, 5xx, 403, 429, 410, silence). */
  failed(err: unknown): void {
    this.#failingSince ??= this.#clock.now();
    this.#errors++;
    this.#lastError = describeError(err);
  }

  status(): HealthStatus {
    if (this.#failingSince === undefined) return { healthy: true };
    const failingForMs = this.#clock.now() - this.#failingSince;
    if (failingForMs < this.#gracePeriodMs) return { healthy: true };
    return { healthy: false, failingForMs, errors: this.#errors, lastError: this.#lastError };
  }
}

/**
 * One line for an error, with the socket-level cause undici hides behind "fetch failed"
 * (e.g. "fetch failed (ECONNREFUSED)").
 */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause as { code?: unknown; message?: unknown } | undefined;
  const detail = typeof cause?.code === "string" ? cause.code : undefined;
  const message = err.message.split("\n")[0] ?? err.message;
  return detail && !message.includes(detail) ? `${message} (${detail})` : message;
}

/**
 * The `/readyz` check over many informers: fails naming every unhealthy one with how long it
 * has been failing and its last error.
 */
export function watchHealthCheck(
  informers: readonly { name: string; health(): HealthStatus }[],
): { ok: true } | { ok: false; reason: string } {
  const failing: string[] = [];
  for (const informer of informers) {
    const h = informer.health();
    if (!h.healthy) {
      const seconds = (h.failingForMs / 1000).toFixed(1);
      failing.push(`${informer.name}: ${h.errors} list/watch errors in ${seconds} s, last: ${h.lastError}`);
    }
  }
  return failing.length === 0
    ? { ok: true }
    : { ok: false, reason: `list/watch failing: ${failing.join("; ")}` };
}
