/**
 * Controller: sources (informers + mapping) -> WorkQueue -> workers running the reconciler.
 *
 * Three small parts, as in kube-rs: mapping store changes to keys (`requestsFor*`), the queue
 * (dedup, delay, exclusivity; queue.ts), and the worker loop that interprets a reconcile's
 * outcome (`outcomeOf`). Each is testable alone.
 */
import type { Logger } from "pino";
import type { KubeClient } from "./client.ts";
import { type Clock, realClock } from "./clock.ts";
import { ApiError, TerminalError } from "./errors.ts";
import type { EventRecorder } from "./events.ts";
import type { Informer } from "./informer.ts";
import type { ResourceKind } from "./kinds.ts";
import { kindName } from "./kinds.ts";
import type { RuntimeMetrics } from "./metrics.ts";
import { ownerRequest } from "./owners.ts";
import type { Predicate } from "./predicates.ts";
import { WorkQueue } from "./queue.ts";
import type { ReconcileContext, Reconciler } from "./reconcile.ts";
import type { Store, StoreChange } from "./store.ts";
import type { KubeObject, Request } from "./types.ts";
import { isDnsLabel, keyString, objectKey, parseKey } from "./types.ts";

// node:crypto through getBuiltinModule, not `import` (see src/runtime/events.ts).
const { randomUUID } = process.getBuiltinModule("node:crypto");

export type MapFunc<T extends KubeObject = KubeObject> = (obj: Readonly<T>) => Request[];

export interface SourceOptions {
  predicates?: Predicate[];
  /**
   * The kind may not be served (a CRD that may be missing): its cache runs only while it is
   * (see OptionalInformer), and when that changes every object of the controller's kind is
   * reconciled. Reconcilers ask `ctx.served(kind)`.
   */
  optional?: boolean;
}

/** A watched kind and how its changes become requests. */
export interface Source {
  kind: ResourceKind;
  predicates: Predicate[];
  toRequests(change: StoreChange): Request[];
  /** The kind may not be served: see SourceOptions.optional. */
  optional?: boolean;
}

/** The primary kind: each object is its own request. */
export function forSource(kind: ResourceKind, predicates: Predicate[] = []): Source {
  return { kind, predicates, toRequests: (c) => [objectKey(c.object)] };
}

/** An owned kind: the controlling owner of kind `ownerKind` (old and new on update). */
export function ownsSource(
  kind: ResourceKind,
  ownerKind: ResourceKind,
  predicates: Predicate[] = [],
): Source {
  return {
    kind,
    predicates,
    toRequests: (c) => {
      const objs = c.type === "update" ? [c.old, c.object] : [c.object];
      return objs.map((o) => ownerRequest(o, ownerKind)).filter((r): r is Request => r !== undefined);
    },
  };
}

/** Any kind, mapped by a function (applied to old and new on update). */
export function mapSource(kind: ResourceKind, map: MapFunc, predicates: Predicate[] = []): Source {
  return {
    kind,
    predicates,
    toRequests: (c) => (c.type === "update" ? [...map(c.old), ...map(c.object)] : map(c.object)),
  };
}

/**
 * Keys to enqueue for one change, each once: empty if a predicate rejects it. Once, because an
 * update maps old and new (usually to the same key), and the queue hands a key added to an idle
 * worker at once: a second add of the same change would find it processing and run it again,
 * for nothing.
 */
export function requestsFor(source: Source, change: StoreChange): Request[] {
  if (!source.predicates.every((p) => p(change))) return [];
  const requests = source.toRequests(change);
  if (requests.length < 2) return requests;
  const seen = new Set<string>();
  return requests.filter((r) => {
    const key = keyString(r);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

export type Outcome =
  /** replaces: the reconcile returned replacesRequeue (its key's pending requeue is withdrawn). */
  | { result: "success"; replaces?: true }
  | { result: "requeue_after"; ms: number; replaces?: true }
  | { result: "requeue"; reason: "conflict" }
  | { result: "requeue"; reason: "throttled"; ms: number }
  | { result: "error"; terminal: boolean; error: unknown };

/** What a reconcile's return value or error means for the queue. */
export function outcomeOf(
  settled: { ok: true; value: Awaited<ReturnType<Reconciler>> } | { ok: false; error: unknown },
): Outcome {
  if (settled.ok) {
    const ms = settled.value?.requeueAfterMs;
    const replaces = settled.value?.replacesRequeue === true ? { replaces: true as const } : {};
    if (ms === undefined) return { result: "success", ...replaces };
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      return {
        result: "error",
        terminal: false,
        error: new TypeError(
          `reconcile returned requeueAfterMs=${String(ms)}; it must be a finite number >= 0`,
        ),
      };
    }
    return ms === 0 ? { result: "success", ...replaces } : { result: "requeue_after", ms, ...replaces };
  }
  const { error } = settled;
  if (error instanceof TerminalError) return { result: "error", terminal: true, error };
  if (error instanceof ApiError && error.code === 409) return { result: "requeue", reason: "conflict" };
  if (error instanceof ApiError && error.code === 429 && error.retryAfterSeconds !== undefined) {
    return { result: "requeue", reason: "throttled", ms: error.retryAfterSeconds * 1000 };
  }
  return { result: "error", terminal: false, error };
}

/** What a controller needs of an informer: its changes, its sync, and (optional kinds) served changes. */
export type SourceInformer = Pick<Informer, "addHandler" | "waitForSync"> & {
  onServedChange?(fn: (served: boolean) => void): void;
};

/** What a controller needs from its manager. */
export interface ControllerDeps {
  informer(kind: ResourceKind): SourceInformer | SourceInformer[];
  store(kind: ResourceKind): Store;
  /** Whether the cluster serves `kind` (false only for an optional kind that is not served). */
  served?(kind: ResourceKind): boolean;
  client: KubeClient;
  recorder: EventRecorder;
  log: Logger;
  metrics?: RuntimeMetrics;
  clock?: Clock;
}

export interface ControllerOptions {
  name: string;
  forKind: ResourceKind;
  sources: Source[];
  reconciler: Reconciler;
  concurrency: number;
}

export class Controller {
  readonly name: string;
  readonly forKind: ResourceKind;
  readonly sources: readonly Source[];
  readonly concurrency: number;
  readonly queue: WorkQueue;
  readonly #reconciler: Reconciler;
  readonly #deps: ControllerDeps;
  readonly #clock: Clock;
  readonly #inFlight = new Map<string, AbortController>();
  #reconciled = 0;
  #started = false;

  constructor(opts: ControllerOptions, deps: ControllerDeps) {
    this.name = opts.name;
    this.forKind = opts.forKind;
    this.sources = opts.sources;
    this.concurrency = checkedConcurrency(opts.name, opts.concurrency);
    this.#reconciler = opts.reconciler;
    this.#deps = deps;
    this.#clock = deps.clock ?? realClock;
    const queueOpts: ConstructorParameters<typeof WorkQueue>[0] = { clock: this.#clock };
    if (deps.metrics) queueOpts.metrics = deps.metrics.queueHooks(opts.name);
    this.queue = new WorkQueue(queueOpts);
    // At registration, not at start: start waits for leadership and for the caches.
    deps.metrics?.initController(opts.name, this.concurrency);
  }

  /** Keys whose reconcile is running now. */
  get inFlight(): string[] {
    return [...this.#inFlight.keys()];
  }

  /** Reconciles finished since start, whatever their outcome. */
  get reconciled(): number {
    return this.#reconciled;
  }

  /**
   * Attaches to the informers and runs workers until stop(). Informers must be running; the
   * workers start once every source has synced, so the first reconciles see a full cache.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error(`controller "${this.name}" started twice`);
    this.#started = true;
    const informers: SourceInformer[] = [];
    for (const source of this.sources) {
      for (const inf of [this.#deps.informer(source.kind)].flat()) {
        informers.push(inf);
        inf.addHandler((change) => this.#enqueue(source, change));
        // A kind that appears or goes may change every object's decision, not just its owners'.
        inf.onServedChange?.(() => this.#enqueueAll());
      }
    }
    await Promise.all(informers.map((i) => i.waitForSync()));
    const workers = Array.from({ length: this.concurrency }, () => this.#worker());
    await Promise.all(workers);
  }

  /**
   * Stops taking keys and waits for in-flight reconciles up to `deadlineMs`; past it, their
   * signals are aborted. Resolves true if all finished within the deadline.
   */
  async stop(deadlineMs: number): Promise<boolean> {
    const drained = this.queue.shutdown();
    let timer: { cancel(): void } | undefined;
    const timedOut = new Promise<false>((resolve) => {
      timer = this.#clock.setTimer(deadlineMs, () => resolve(false));
    });
    const finished = await Promise.race([drained.then(() => true as const), timedOut]);
    timer?.cancel();
    if (!finished) {
      this.#deps.log.warn(
        { controller: this.name, keys: this.inFlight },
        "drain deadline passed; aborting reconciles",
      );
      this.abortInFlight(new Error(`controller ${this.name} shutdown deadline of ${deadlineMs} ms passed`));
    }
    return finished;
  }

  abortInFlight(reason: unknown): void {
    for (const ac of this.#inFlight.values()) ac.abort(reason);
  }

  #enqueueAll(): void {
    for (const obj of this.#deps.store(this.forKind).list()) this.queue.add(keyString(objectKey(obj)), "low");
  }

  #enqueue(source: Source, change: StoreChange): void {
    for (const req of requestsFor(source, change)) {
      this.queue.add(keyString(req), change.initial ? "low" : "high");
    }
  }

  async #worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.#reconcileKey(key);
      } finally {
        this.queue.done(key);
      }
    }
  }

  async #reconcileKey(key: string): Promise<void> {
    const request = parseKey(key);
    const reconcileId = randomUUID();
    const log = this.#deps.log.child({
      controller: this.name,
      kind: kindName(this.forKind),
      namespace: request.namespace,
      name: request.name,
      reconcileId,
    });
    const abort = new AbortController();
    this.#inFlight.set(key, abort);
    const metrics = this.#deps.metrics;
    const labels = { controller: this.name };
    metrics?.activeWorkers.inc(labels);
    const started = this.#clock.now();
    const ctx: ReconcileContext = {
      request,
      reconcileId,
      signal: abort.signal,
      log,
      client: this.#deps.client,
      cache: <T extends KubeObject>(kind: ResourceKind) => this.#deps.store(kind) as unknown as Store<T>,
      served: (kind: ResourceKind) => this.#deps.served?.(kind) ?? true,
      recorder: this.#deps.recorder,
    };
    let settled: Parameters<typeof outcomeOf>[0];
    try {
      settled = { ok: true, value: await this.#reconciler(ctx) };
    } catch (error) {
      settled = { ok: false, error };
    } finally {
      this.#inFlight.delete(key);
      this.#reconciled++;
      metrics?.activeWorkers.dec(labels);
      metrics?.reconcileTime.observe(labels, (this.#clock.now() - started) / 1000);
    }
    this.#apply(key, outcomeOf(settled), log);
  }

  #apply(key: string, outcome: Outcome, log: Logger): void {
    const metrics = this.#deps.metrics;
    const labels = { controller: this.name };
    metrics?.reconcileTotal.inc({ ...labels, result: outcome.result });
    if ((outcome.result === "success" || outcome.result === "requeue_after") && outcome.replaces)
      this.queue.cancelAfter(key);
    switch (outcome.result) {
      case "success":
        this.queue.forget(key);
        log.debug("reconciled");
        return;
      case "requeue_after":
        this.queue.forget(key);
        this.queue.addAfter(key, outcome.ms);
        log.debug({ requeueAfterMs: outcome.ms }, "reconciled; requeue after delay");
        return;
      case "requeue":
        if (outcome.reason === "throttled") {
          // 429 with Retry-After: the server said when; that is not our failure.
          this.queue.addAfter(key, outcome.ms);
          log.debug({ retryAfterMs: outcome.ms }, "throttled (429); requeued after Retry-After");
          return;
        }
        // 409: someone changed the object since we read it; a fresh read will do. Backoff
        // still applies so a hot conflict does not spin.
        this.queue.addRateLimited(key);
        log.debug("conflict (409); requeued");
        return;
      case "error":
        metrics?.reconcileErrors.inc(labels);
        if (outcome.terminal) {
          metrics?.terminalErrors.inc(labels);
          this.queue.forget(key);
          log.error({ err: outcome.error }, "reconcile failed with a terminal error; not retrying");
        } else {
          this.queue.addRateLimited(key);
          log.error(
            { err: outcome.error, failures: this.queue.failures(key) },
            "reconcile failed; retrying with backoff",
          );
        }
        return;
    }
  }
}

/** Reconciles of one controller at once: a whole number >= 1, or a RangeError naming the controller. */
function checkedConcurrency(controller: string, n: number): number {
  if (!Number.isInteger(n) || n < 1) {
    throw new RangeError(`controller "${controller}" concurrency must be an integer >= 1, got ${n}`);
  }
  return n;
}

/** Fluent builder: mgr.controller(name).for(kind).owns(kind).watches(kind, map).reconcile(fn). */
export class ControllerBuilder {
  readonly #name: string;
  readonly #register: (opts: ControllerOptions) => Controller;
  #forKind: ResourceKind | undefined;
  readonly #sources: Source[] = [];
  // owns() sources need the owner kind, known for sure only at reconcile() (for() may come later).
  readonly #owned: { kind: ResourceKind; predicates: Predicate[]; optional?: boolean }[] = [];
  #concurrency = 1;

  constructor(name: string, register: (opts: ControllerOptions) => Controller) {
    if (!isDnsLabel(name)) {
      throw new TypeError(
        `controller name "${name}" must be lowercase letters, digits and '-', at most 63 (e.g. "podset")`,
      );
    }
    this.#name = name;
    this.#register = register;
  }

  for(kind: ResourceKind, opts: SourceOptions = {}): this {
    if (this.#forKind) {
      throw new Error(
        `controller "${this.#name}": for() called twice (${kindName(this.#forKind)}, ${kindName(kind)})`,
      );
    }
    this.#forKind = kind;
    this.#sources.unshift(forSource(kind, opts.predicates));
    return this;
  }

  owns(kind: ResourceKind, opts: SourceOptions = {}): this {
    this.#owned.push({
      kind,
      predicates: opts.predicates ?? [],
      ...(opts.optional ? { optional: true } : {}),
    });
    return this;
  }

  watches<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    map: MapFunc<T>,
    opts: SourceOptions = {},
  ): this {
    this.#sources.push({
      ...mapSource(kind, map as MapFunc, opts.predicates),
      ...(opts.optional ? { optional: true } : {}),
    });
    return this;
  }

  concurrency(n: number): this {
    this.#concurrency = checkedConcurrency(this.#name, n);
    return this;
  }

  reconcile(fn: Reconciler): Controller {
    const forKind = this.#forKind;
    if (!forKind) throw new Error(`controller "${this.#name}": call for(kind) before reconcile()`);
    const sources = [
      ...this.#sources,
      ...this.#owned.map((o) => ({
        ...ownsSource(o.kind, forKind, o.predicates),
        ...(o.optional ? { optional: true } : {}),
      })),
    ];
    return this.#register({
      name: this.#name,
      forKind,
      sources,
      reconciler: fn,
      concurrency: this.#concurrency,
    });
  }
}
