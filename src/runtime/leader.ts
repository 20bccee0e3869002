/**
 * Leader election on a coordination.k8s.io/v1 Lease (client-go's algorithm).
 *
 * - Expiry is judged on the LOCAL clock from when we last saw the lease record change, never
 *   from the timestamps inside it, so clock skew between machines does not matter. A
 *   follower therefore waits up to a full leaseDuration after it last saw a renewal.
 * - Writes carry the resourceVersion read, so two candidates racing for one lease cannot
 *   both win: the loser gets 409 and tries again next period.
 * - The leader renews every retryPeriod; if it cannot renew for renewDeadline (< lease
 *   duration) it gives up leadership before anyone else may take it. Each attempt is bounded
 *   by what is left of that deadline: a request that hangs (a partitioned node, a half-open
 *   connection) is aborted and counts as a failed renewal, so the deadline check is always
 *   reached and two leaders never overlap.
 * - On cancel the leader releases the lease (empty holder), so a successor starts at once.
 */
import type { KubeClient } from "./client.ts";
import { type Clock, realClock, sleep } from "./clock.ts";
import { ApiError } from "./errors.ts";
import { builtinKinds } from "./kinds.ts";
import type { KubeObject } from "./types.ts";

export interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  acquireTime?: string | null;
  renewTime?: string | null;
  leaseTransitions?: number;
}

export interface Lease extends KubeObject {
  spec?: LeaseSpec;
}

/**
 * Lease reads and optimistic writes; KubeClient-backed in production. `signal` aborts a
 * request that outlives the attempt's deadline.
 */
export interface LeaseClient {
  get(signal?: AbortSignal): Promise<Lease | undefined>;
  create(lease: Lease, signal?: AbortSignal): Promise<Lease>;
  /** PUT with metadata.resourceVersion: 409 when someone else wrote first. */
  update(lease: Lease, signal?: AbortSignal): Promise<Lease>;
}

export function kubeLeaseClient(client: KubeClient, namespace: string, name: string): LeaseClient {
  const kind = builtinKinds.Lease;
  const opts = (signal: AbortSignal | undefined) => (signal ? { signal } : {});
  return {
    get: (signal) => client.get<Lease>(kind, { namespace, name }, opts(signal)),
    create: (lease, signal) => client.create<Lease>(kind, lease, opts(signal)),
    update: (lease, signal) => client.replace<Lease>(kind, lease, opts(signal)),
  };
}

/** Why an attempt was abandoned: it outlived the time left before the renew deadline. */
export class LeaseAttemptTimeout extends Error {
  constructor(ms: number) {
    super(`lease request did not finish within ${ms} ms (what was left of the renew deadline)`);
    this.name = "LeaseAttemptTimeout";
  }
}

export interface LeaderElectionOptions {
  name: string;
  namespace: string;
  /** Unique per process; default hostname + random suffix. */
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Release the lease when the run is cancelled (default true). */
  releaseOnCancel?: boolean;
}

/**
 * How leadership was won, on this process's clock (ms since the epoch): what a log needs to
 * show why a takeover took as long as it did.
 */
export interface Acquisition {
  /**
   * The holder the lease was taken from: "" when it was free, released or not yet created; this
   * process's own identity when the lease was already its own.
   */
  from: string;
  /** When the winning attempt started: its `acquireTime`. */
  attemptAt: number;
  /** Taken from a holder: when this process first saw the record it then waited out. */
  observedAt?: number;
  /** Taken from a holder: when that record's lease ran out (observedAt + its duration). */
  expiredAt?: number;
  /** How much later than planned the wait before the winning attempt ended (the timer's lateness). */
  wakeLateMs: number;
  /**
   * The last attempts of the campaign, oldest first, ending with the winning one: where the
   * time between seeing the holder's last renewal and taking over went.
   */
  attempts: AttemptAccount[];
}

/** One attempt of a campaign for the lease. */
export interface AttemptAccount {
  /** When it started (ms since the epoch on this process's clock). */
  at: number;
  /** How much later than planned the wait before it ended. */
  wakeLateMs: number;
  /** How long the Lease read took; absent when it failed or timed out before answering. */
  readMs?: number;
  /**
   * What it found: another holder's record as the attempt before saw it (`held`) or not (`new
   * record`: a renewal, or the campaign's first read), the lease `won`, a write that lost a
   * race (`conflict`), a request error (`failed`), no answer within the budget (`timed out`).
   */
  outcome: "held" | "new record" | "won" | "conflict" | "failed" | "timed out";
}

/** How many of a campaign's attempts an acquisition reports: a lease duration's worth, and more. */
const attemptsReported = 12;

/** What an attempt that holds the lease afterwards knows of how it came to hold it. */
type Won = Omit<Acquisition, "wakeLateMs" | "attempts">;

/** One attempt's result: how the lease is held afterwards (when it is), and what the attempt saw. */
interface AttemptResult {
  won?: Won;
  readMs?: number;
  outcome: AttemptAccount["outcome"];
}

export interface LeaderCallbacks {
  /** Called once leadership is won; `signal` aborts when it is lost or the run is cancelled. */
  onStartedLeading(signal: AbortSignal, acquisition: Acquisition): void;
  onStoppedLeading?(): void;
  onNewLeader?(identity: string): void;
  onError?(err: unknown): void;
}

/** MicroTime as the API wants it (RFC 3339 with exactly 6 fraction digits). */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export class LeaderElector {
  readonly identity: string;
  readonly leaseDurationMs: number;
  readonly renewDeadlineMs: number;
  readonly retryPeriodMs: number;
  readonly #opts: LeaderElectionOptions;
  readonly #leases: LeaseClient;
  readonly #clock: Clock;
  #observed: { record: string; at: number; lease: Lease } | undefined;
  #isLeader = false;

  constructor(leases: LeaseClient, opts: LeaderElectionOptions, clock: Clock = realClock) {
    this.#leases = leases;
    this.#opts = opts;
    this.#clock = clock;
    this.identity =
      opts.identity ?? `${process.env["HOSTNAME"] ?? "local"}_${crypto.randomUUID().slice(0, 8)}`;
    this.leaseDurationMs = opts.leaseDurationMs ?? 15_000;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? 10_000;
    this.retryPeriodMs = opts.retryPeriodMs ?? 2_000;
    if (!(this.leaseDurationMs > this.renewDeadlineMs)) {
      throw new RangeError(
        `leaderElection.leaseDurationMs (${this.leaseDurationMs}) must be greater than renewDeadlineMs (${this.renewDeadlineMs})`,
      );
    }
    if (!(this.renewDeadlineMs > this.retryPeriodMs)) {
      throw new RangeError(
        `leaderElection.renewDeadlineMs (${this.renewDeadlineMs}) must be greater than retryPeriodMs (${this.retryPeriodMs})`,
      );
    }
  }

  get isLeader(): boolean {
    return this.#isLeader;
  }

  /**
   * Campaigns until leader, leads until the lease is lost or `signal` aborts. Resolves
   * "lost" (leadership lost: the caller should stop and exit) or "cancelled".
   */
  async run(signal: AbortSignal, cb: LeaderCallbacks): Promise<"lost" | "cancelled"> {
    // Acquire.
    let won: Won | undefined;
    let wakeLateMs = 0;
    const attempts: AttemptAccount[] = [];
    while (!signal.aborted) {
      const at = this.#clock.now();
      const { won: wonNow, ...seen } = await this.#attempt(cb, this.renewDeadlineMs, at);
      attempts.push({ at, wakeLateMs, ...seen });
      if (attempts.length > attemptsReported) attempts.shift();
      won = wonNow;
      if (won) break;
      const planned = this.#untilNextAttempt();
      const sleptAt = this.#clock.now();
      if (!(await this.#wait(planned, signal))) return "cancelled";
      wakeLateMs = this.#clock.now() - sleptAt - planned;
    }
    if (signal.aborted || !won) return "cancelled";
    this.#isLeader = true;
    const leading = new AbortController();
    cb.onStartedLeading(leading.signal, { ...won, wakeLateMs, attempts });
    // Renew.
    let lastRenew = this.#clock.now();
    let outcome: "lost" | "cancelled" = "cancelled";
    while (!signal.aborted) {
      if (!(await this.#wait(this.retryPeriodMs, signal))) break;
      const started = this.#clock.now();
      const left = lastRenew + this.renewDeadlineMs - started;
      if (left > 0 && (await this.#attempt(cb, left, started)).won) {
        // From when the renewal was sent: the lease may have been written at any moment since.
        lastRenew = started;
        continue;
      }
      const held = this.#observed?.lease.spec?.holderIdentity;
      if ((held && held !== this.identity) || this.#clock.now() - lastRenew >= this.renewDeadlineMs) {
        outcome = "lost";
        break;
      }
    }
    this.#isLeader = false;
    leading.abort(new Error(outcome === "lost" ? "leader election lost" : "leader election cancelled"));
    if (outcome === "cancelled" && (this.#opts.releaseOnCancel ?? true)) await this.#release(cb);
    cb.onStoppedLeading?.();
    return outcome;
  }

  /**
   * One acquire-or-renew attempt started at `now`, bounded by `budgetMs`; a timeout counts as
   * "not held".
   */
  #attempt(cb: LeaderCallbacks, budgetMs: number, now: number): Promise<AttemptResult> {
    return this.#bounded(cb, budgetMs, { outcome: "timed out" }, (signal) =>
      this.#tryAcquireOrRenew(cb, signal, now),
    );
  }

  /**
   * Runs `fn` for at most `budgetMs` on our clock, then aborts its request and settles with
   * `onTimeout` whether or not the transport honours the abort: a hung request must not hold
   * the loop.
   */
  async #bounded<T>(
    cb: LeaderCallbacks,
    budgetMs: number,
    onTimeout: T,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const bound = new AbortController();
    let timer: { cancel(): void } | undefined;
    const expired = new Promise<T>((resolve) => {
      timer = this.#clock.setTimer(budgetMs, () => {
        bound.abort(new LeaseAttemptTimeout(budgetMs));
        cb.onError?.(bound.signal.reason);
        resolve(onTimeout);
      });
    });
    try {
      return await Promise.race([fn(bound.signal), expired]);
    } finally {
      timer?.cancel();
    }
  }

  /** One attempt: how we hold the lease afterwards, if we do. Errors count as "not held". */
  async #tryAcquireOrRenew(cb: LeaderCallbacks, signal: AbortSignal, now: number): Promise<AttemptResult> {
    let readMs: number | undefined;
    try {
      const current = await this.#leases.get(signal);
      if (signal.aborted) return { outcome: "timed out" };
      readMs = this.#clock.now() - now;
      if (!current) {
        const created = await this.#leases.create(this.#leaseObject(undefined, now, 0), signal);
        this.#observe(created, now);
        return { won: { from: "", attemptAt: now }, readMs, outcome: "won" };
      }
      this.#observe(current, now, cb);
      const spec = current.spec ?? {};
      const holder = spec.holderIdentity ?? "";
      const heldByOther = holder !== "" && holder !== this.identity;
      if (heldByOther && this.#observed && this.#observed.at + this.#leaseDurationOf(spec) > now)
        return { readMs, outcome: this.#observed.at === now ? "new record" : "held" };
      const transitions = (spec.leaseTransitions ?? 0) + (holder === this.identity ? 0 : 1);
      const acquire = holder === this.identity ? (spec.acquireTime ?? microTime(now)) : microTime(now);
      const waitedOut = heldByOther && this.#observed ? this.#observed.at : undefined;
      const updated = await this.#leases.update(
        this.#leaseObject(current, now, transitions, acquire),
        signal,
      );
      if (signal.aborted) return { readMs, outcome: "timed out" };
      this.#observe(updated, now);
      const won: Won = { from: holder, attemptAt: now };
      if (waitedOut !== undefined) {
        won.observedAt = waitedOut;
        won.expiredAt = waitedOut + this.#leaseDurationOf(spec);
      }
      return { won, readMs, outcome: "won" };
    } catch (err) {
      const conflict = err instanceof ApiError && err.code === 409;
      if (!signal.aborted && !conflict) cb.onError?.(err);
      const outcome = signal.aborted ? "timed out" : conflict ? "conflict" : "failed";
      return readMs === undefined ? { outcome } : { readMs, outcome };
    }
  }

  async #release(cb: LeaderCallbacks): Promise<void> {
    const lease = this.#observed?.lease;
    if (!lease || lease.spec?.holderIdentity !== this.identity) return;
    const now = this.#clock.now();
    const released: Lease = {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: null,
        leaseDurationSeconds: 1,
        renewTime: microTime(now),
        acquireTime: microTime(now),
      },
    };
    await this.#bounded(cb, this.renewDeadlineMs, undefined, async (signal) => {
      try {
        await this.#leases.update(released, signal);
      } catch (err) {
        if (!signal.aborted) cb.onError?.(err);
      }
    });
  }

  #leaseObject(
    current: Lease | undefined,
    now: number,
    transitions: number,
    acquireTime = microTime(now),
  ): Lease {
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: current
        ? { ...current.metadata }
        : { name: this.#opts.name, namespace: this.#opts.namespace },
      spec: {
        holderIdentity: this.identity,
        leaseDurationSeconds: Math.ceil(this.leaseDurationMs / 1000),
        acquireTime,
        renewTime: microTime(now),
        leaseTransitions: transitions,
      },
    };
  }

  /**
   * How long a candidate waits before its next attempt: the retry period, or less when another
   * holder's lease, as observed, expires sooner. Waking at the expiry rather than up to a retry
   * period after it bounds a takeover by the lease duration plus one retry period: the lag in
   * seeing the holder's last renewal. A lease already expired (an attempt that failed anyway)
   * waits the full period, so errors never make the loop spin.
   */
  #untilNextAttempt(): number {
    const spec = this.#observed?.lease.spec;
    if (!this.#observed || !spec?.holderIdentity || spec.holderIdentity === this.identity)
      return this.retryPeriodMs;
    const expiresInMs = this.#observed.at + this.#leaseDurationOf(spec) - this.#clock.now();
    return expiresInMs > 0 ? Math.min(this.retryPeriodMs, expiresInMs + 1) : this.retryPeriodMs;
  }

  #leaseDurationOf(spec: LeaseSpec): number {
    return (spec.leaseDurationSeconds ?? Math.ceil(this.leaseDurationMs / 1000)) * 1000;
  }

  /** Remembers when the lease record last changed, on our clock. */
  #observe(lease: Lease, now: number, cb?: LeaderCallbacks): void {
    const record = JSON.stringify(lease.spec ?? {});
    if (this.#observed?.record === record) {
      this.#observed.lease = lease;
      return;
    }
    const prevHolder = this.#observed?.lease.spec?.holderIdentity;
    this.#observed = { record, at: now, lease };
    const holder = lease.spec?.holderIdentity;
    if (holder && holder !== prevHolder) cb?.onNewLeader?.(holder);
  }

  async #wait(ms: number, signal: AbortSignal): Promise<boolean> {
    try {
      await sleep(this.#clock, ms, signal);
      return true;
    } catch {
      return false;
    }
  }
}
