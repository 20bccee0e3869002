/**
 * Live traffic against a model while something changes under it (a rollout, a rollback, a
 * canary): requests sent at a fixed rate whatever the answers (an open loop, as independent
 * clients send them), each answer judged and labelled (which model version answered), bounded in
 * count and in time so that a stuck rollout cannot make a test run forever.
 *
 * The e2e tests assert on the counts and the order of labels (never on latency); the benchmark
 * reports the latencies. `versionClassifier` labels V2 answers by the predictions each model
 * version is known to give.
 */

/** How one answer is judged: served (with a label, e.g. "v1") or failed (with why). */
export type Judgement = { ok: true; label: string } | { ok: false; error: string };

export interface TrafficOptions<T> {
  /** Sends one request. A rejection is a failed request. */
  send: () => Promise<T>;
  judge: (answer: T) => Judgement;
  /** Requests started per second (at least 1). */
  ratePerSecond: number;
  /** Stop after this many requests ... */
  maxRequests: number;
  /** ... or after this long, whichever comes first. */
  maxDurationMs: number;
  /** Requests in flight at most; a tick that finds this many is counted as `dropped` (default 200). */
  maxInFlight?: number;
}

export interface Sample {
  /** Milliseconds since the traffic started. */
  at: number;
  latencyMs: number;
  judgement: Judgement;
}

export interface TrafficReport {
  sent: number;
  served: number;
  failed: number;
  /** Ticks skipped because maxInFlight requests were still waiting (the client's limit, not the server's). */
  dropped: number;
  byLabel: Record<string, number>;
  failures: { at: number; error: string }[];
  latencyMs: { p50?: number; p99?: number; max?: number };
  durationMs: number;
  /** The labels of served answers in the order the requests were sent. */
  labels: string[];
}

/** The p-th percentile (0..100) by nearest rank. */
function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  return sorted[Math.max(1, Math.ceil((p / 100) * sorted.length)) - 1];
}

/** The figures of `samples` (any slice of a run's samples). */
export function summarize(samples: readonly Sample[], dropped = 0): TrafficReport {
  const ordered = [...samples].sort((a, b) => a.at - b.at);
  const byLabel: Record<string, number> = {};
  const failures: TrafficReport["failures"] = [];
  const labels: string[] = [];
  for (const s of ordered) {
    if (s.judgement.ok) {
      byLabel[s.judgement.label] = (byLabel[s.judgement.label] ?? 0) + 1;
      labels.push(s.judgement.label);
    } else failures.push({ at: Math.round(s.at), error: s.judgement.error });
  }
  const latencies = ordered.map((s) => s.latencyMs).sort((a, b) => a - b);
  const round = (v: number | undefined) => (v === undefined ? undefined : Math.round(v * 10) / 10);
  return {
    sent: ordered.length,
    served: ordered.length - failures.length,
    failed: failures.length,
    dropped,
    byLabel,
    failures,
    latencyMs: {
      p50: round(percentile(latencies, 50)),
      p99: round(percentile(latencies, 99)),
      max: round(latencies.at(-1)),
    },
    durationMs: ordered.length ? Math.round(ordered.at(-1)!.at + ordered.at(-1)!.latencyMs) : 0,
    labels,
  };
}

export class Traffic<T> {
  readonly samples: Sample[] = [];
  private readonly marks: { name: string; at: number }[] = [];
  private readonly options: TrafficOptions<T>;
  private started = 0;
  private inFlight = new Set<Promise<void>>();
  private dropped = 0;
  private timer: NodeJS.Timeout | undefined;
  private finished!: () => void;
  /** Resolves once the traffic has stopped (asked, or its bounds reached) and every answer is in. */
  readonly done: Promise<void>;

  constructor(options: TrafficOptions<T>) {
    if (options.ratePerSecond < 1)
      throw new RangeError(`ratePerSecond ${options.ratePerSecond} must be >= 1`);
    this.options = options;
    this.done = new Promise((resolve) => {
      this.finished = resolve;
    });
  }

  /** Milliseconds since start. */
  now(): number {
    return performance.now() - this.started;
  }

  start(): this {
    this.started = performance.now();
    let sent = 0;
    const interval = 1000 / this.options.ratePerSecond;
    // Each tick sends as many requests as are due, so a late timer does not lower the rate.
    this.timer = setInterval(
      () => {
        const due = Math.min(Math.floor(this.now() / interval) + 1, this.options.maxRequests);
        while (sent < due) {
          sent++;
          if (this.inFlight.size >= (this.options.maxInFlight ?? 200)) this.dropped++;
          else this.sendOne();
        }
        if (sent >= this.options.maxRequests || this.now() >= this.options.maxDurationMs) void this.stop();
      },
      Math.min(interval, 20),
    );
    return this;
  }

  private sendOne(): void {
    const at = this.now();
    const record = (judgement: Judgement) => {
      this.samples.push({ at, latencyMs: this.now() - at, judgement });
    };
    const request = this.options
      .send()
      .then(
        (answer) => record(this.options.judge(answer)),
        (err: unknown) => record({ ok: false, error: err instanceof Error ? err.message : String(err) }),
      )
      .finally(() => this.inFlight.delete(request));
    this.inFlight.add(request);
  }

  /** Remembers a moment (e.g. "v2 applied") to slice the samples by later. */
  mark(name: string): void {
    this.marks.push({ name, at: this.now() });
  }

  markAt(name: string): number {
    const mark = this.marks.find((m) => m.name === name);
    if (!mark) throw new Error(`no mark "${name}" (marks: ${this.marks.map((m) => m.name).join(", ")})`);
    return mark.at;
  }

  /** Stops sending and waits for the answers still on their way. */
  async stop(): Promise<TrafficReport> {
    if (this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
      await Promise.all(this.inFlight);
      this.finished();
    }
    await this.done;
    return this.report();
  }

  /** The figures of the requests sent between two marks (or from the start / up to now). */
  report(from?: string, to?: string): TrafficReport {
    const start = from ? this.markAt(from) : 0;
    const end = to ? this.markAt(to) : Number.POSITIVE_INFINITY;
    return summarize(
      this.samples.filter((s) => s.at >= start && s.at < end),
      from || to ? 0 : this.dropped,
    );
  }

  /** True while requests are being sent (until `stop`, or until a bound is reached). */
  get running(): boolean {
    return this.timer !== undefined;
  }
}

/**
 * Labels a V2 answer by which model version's predictions it carries: "v1", "v2"... as named
 * in `versions`; an answer that matches none (or a non-200) is a failure saying what came back.
 */
export function versionClassifier(
  versions: Record<string, readonly number[]>,
): (answer: { status: number; data?: number[]; body: string }) => Judgement {
  const known = Object.entries(versions);
  const same = (a: readonly number[], b: readonly number[]) =>
    a.length === b.length && a.every((x, i) => x === b[i]);
  const labels = known.map(([label]) => label);
  for (let i = 0; i < known.length; i++)
    for (let j = i + 1; j < known.length; j++)
      if (same(known[i]![1], known[j]![1]))
        throw new Error(
          `versions ${labels[i]} and ${labels[j]} give the same predictions: answers could not tell them apart`,
        );
  return (answer) => {
    if (answer.status !== 200 || !answer.data) {
      // A Python traceback's last line names the exception: the line worth reading.
      const last = answer.body.trim().split("\n").at(-1) ?? "";
      return { ok: false, error: `HTTP ${answer.status}: ${last.slice(0, 300)}` };
    }
    const match = known.find(([, predictions]) => same(predictions, answer.data!));
    return match
      ? { ok: true, label: match[0] }
      : { ok: false, error: `predictions ${JSON.stringify(answer.data)} match none of ${labels.join(", ")}` };
  };
}

/**
 * How the labels of served answers changed over time, as runs: ["v1", "v2"] for a clean
 * switch, ["v1", "v2", "v1", "v2"] when both served for a while (one pod of each behind the
 * Service during the roll).
 */
export function labelRuns(labels: readonly string[]): string[] {
  const runs: string[] = [];
  for (const label of labels) if (runs.at(-1) !== label) runs.push(label);
  return runs;
}
