/**
 * An informer for a kind the cluster may not serve (a CRD that is installed, or not, or later,
 * or removed again): watching it only while it is served.
 *
 * A plain Informer of a kind the API server does not serve gets 404 on its list forever: its
 * cache never syncs, so a Manager would never start its controllers and /readyz would fail.
 * controller-runtime has the same gap (its "conditional controllers" proposal,
 * kubernetes-sigs/controller-runtime#1527, was never merged); operators work around it by
 * checking once at start and restarting when the CRD appears. Here instead:
 *
 *   not served ──discovery says served──▶ listing ──synced──▶ served ──discovery says gone──▶ not served
 *        ▲                                                       │       (or the watch gets 404)    │
 *        └──────────────────── store emptied (deletes emitted) ◀─┴──────────────────────────────────┘
 *
 * - Discovery (GET /apis/<group>/<version>, open to every authenticated user, so no RBAC rule)
 *   is asked every pollIntervalMs (default 30 s), and at once when the watch gets a 404.
 * - hasSynced() is true from the first answer: "not served" is a complete (empty) view, so
 *   the Manager starts controllers without waiting for a CRD that may never come.
 * - served() is true only once the cache holds a full list: a reconciler that reads it then
 *   sees every object, and one that reads it before knows the kind is not (yet) usable.
 * - onServedChange handlers hear each change (a controller reconciles all its objects then,
 *   since any of them may decide differently).
 * - health() is the inner watch's while served, else discovery's own errors'.
 *
 * ML-agnostic: nothing here knows which kind it is.
 */
import { KubeClient } from "./client.ts";
import { type Clock, realClock } from "./clock.ts";
import { isNotFound } from "./errors.ts";
import { defaultHealthGracePeriodMs, type HealthStatus, WatchHealth } from "./health.ts";
import { type ChangeHandler, Informer, type InformerOptions, waitForSync } from "./informer.ts";
import { kindName, type ResourceKind } from "./kinds.ts";
import { MemoryStore } from "./store.ts";
import type { KubeObject } from "./types.ts";
import { clientSource, type Scope, type WatchSource } from "./watcher.ts";

export const defaultServedPollIntervalMs = 30_000;

export interface OptionalInformerOptions<T extends KubeObject = KubeObject> extends InformerOptions<T> {
  /** How often to ask discovery whether the kind is served (default 30 s). */
  pollIntervalMs?: number;
  /** Whether the kind is served now. Default: discovery through the client. */
  discover?: (signal: AbortSignal) => Promise<boolean>;
}

/** Whether the API server serves `kind`: its group version is served and lists its plural. */
export async function isServed(
  client: KubeClient,
  kind: ResourceKind,
  signal?: AbortSignal,
): Promise<boolean> {
  const resources = await client.apiResources(kind.group, kind.version, signal ? { signal } : {});
  return resources?.some((r) => r.name === kind.plural) ?? false;
}

interface Inner<T extends KubeObject> {
  informer: Informer<T>;
  abort: AbortController;
  run: Promise<void>;
  unlink: () => void;
}

export class OptionalInformer<T extends KubeObject = KubeObject> {
  readonly kind: ResourceKind;
  readonly scope: Scope;
  /** One store for the life of the informer: emptied while the kind is not served. */
  readonly store: MemoryStore<T>;
  readonly #source: WatchSource<T>;
  readonly #discover: (signal: AbortSignal) => Promise<boolean>;
  readonly #opts: OptionalInformerOptions<T>;
  readonly #clock: Clock;
  readonly #pollIntervalMs: number;
  readonly #discoveryHealth: WatchHealth;
  readonly #handlers: ChangeHandler<T>[] = [];
  readonly #servedHandlers: ((served: boolean) => void)[] = [];
  #syncWaiters: (() => void)[] = [];
  #decided = false;
  #served = false;
  #inner: Inner<T> | undefined;
  #wake: (() => void) | undefined;
  #running: Promise<void> | undefined;

  constructor(
    source: WatchSource<T> | KubeClient,
    kind: ResourceKind,
    opts: OptionalInformerOptions<T> = {},
  ) {
    this.kind = kind;
    this.scope = opts.scope ?? {};
    this.#opts = opts;
    this.#clock = opts.watcher?.clock ?? realClock;
    this.#pollIntervalMs = opts.pollIntervalMs ?? defaultServedPollIntervalMs;
    if (!(this.#pollIntervalMs > 0))
      throw new RangeError(`pollIntervalMs must be > 0, got ${this.#pollIntervalMs}`);
    if (source instanceof KubeClient) {
      const client = source;
      this.#source = clientSource<T>(client, kind, this.scope, {
        keepManagedFields: opts.keepManagedFields === true,
      });
      this.#discover = opts.discover ?? ((signal) => isServed(client, kind, signal));
    } else {
      if (!opts.discover) throw new TypeError("an OptionalInformer over a custom source needs opts.discover");
      this.#source = source;
      this.#discover = opts.discover;
    }
    this.#discoveryHealth = new WatchHealth(
      this.#clock,
      opts.healthGracePeriodMs ?? defaultHealthGracePeriodMs,
    );
    this.store = new MemoryStore<T>(opts.indexes ?? {});
  }

  get name(): string {
    const parts = [`${kindName(this.kind)} (when served)`];
    if (this.scope.namespace) parts.push(`ns=${this.scope.namespace}`);
    if (this.scope.labelSelector) parts.push(`labels=${this.scope.labelSelector}`);
    return parts.join(" ");
  }

  /** True while the kind is served and the cache holds its full list. */
  served(): boolean {
    return this.#served;
  }

  /** True once the first answer is in: not served (an empty view), or served and listed. */
  hasSynced(): boolean {
    return this.#decided;
  }

  waitForSync(signal?: AbortSignal): Promise<boolean> {
    return waitForSync(this.#decided, this.#syncWaiters, signal);
  }

  /** Handlers see every change, including the deletes when the kind stops being served. */
  addHandler(fn: ChangeHandler<T>): void {
    this.#handlers.push(fn);
    if (this.#served) for (const object of this.store.list()) fn({ type: "add", object, initial: true });
  }

  /** Called with the new value each time served() changes. */
  onServedChange(fn: (served: boolean) => void): void {
    this.#servedHandlers.push(fn);
  }

  health(): HealthStatus {
    return this.#inner ? this.#inner.informer.health() : this.#discoveryHealth.status();
  }

  /** Runs until `signal` aborts. Starting twice returns the same run. */
  run(signal: AbortSignal): Promise<void> {
    this.#running ??= this.#run(signal);
    return this.#running;
  }

  async #run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      let served: boolean | undefined;
      try {
        served = await this.#discover(signal);
        this.#discoveryHealth.progress();
      } catch (err) {
        if (signal.aborted) break;
        this.#discoveryHealth.failed(err);
      }
      if (served === true && !this.#inner) this.#start(signal);
      if (served === false) {
        if (this.#inner) await this.#stop(true);
        this.#decide();
      }
      await this.#pause(signal);
    }
    if (this.#inner) await this.#stop(false);
  }

  #start(signal: AbortSignal): void {
    const abort = new AbortController();
    const follow = () => abort.abort(signal.reason);
    signal.addEventListener("abort", follow, { once: true });
    const watcher = this.#opts.watcher ?? {};
    const informer = new Informer<T>(this.#source, this.kind, {
      ...this.#opts,
      store: this.store,
      watcher: {
        ...watcher,
        onError: (err, state, retryInMs) => {
          watcher.onError?.(err, state, retryInMs);
          // The kind may be gone (its CRD deleted): ask discovery now rather than at the next poll.
          if (isNotFound(err)) this.#wake?.();
        },
      },
    });
    informer.addHandler((change) => this.#emit(change));
    const run = informer.run(abort.signal).catch(() => {});
    const inner = { informer, abort, run, unlink: () => signal.removeEventListener("abort", follow) };
    this.#inner = inner;
    void informer.waitForSync(abort.signal).then((synced) => {
      if (!synced || this.#inner !== inner) return;
      this.#served = true;
      this.#decide();
      for (const fn of this.#servedHandlers) fn(true);
    });
  }

  /** Stops watching; with `forget`, empties the store and tells handlers what went. */
  async #stop(forget: boolean): Promise<void> {
    const inner = this.#inner!;
    this.#inner = undefined;
    inner.unlink();
    inner.abort.abort();
    await inner.run;
    const wasServed = this.#served;
    this.#served = false;
    if (!forget) return;
    for (const change of this.store.replace([])) this.#emit(change);
    if (wasServed) for (const fn of this.#servedHandlers) fn(false);
  }

  #emit(change: Parameters<ChangeHandler<T>>[0]): void {
    for (const h of this.#handlers) h(change);
  }

  #decide(): void {
    if (this.#decided) return;
    this.#decided = true;
    for (const w of this.#syncWaiters.splice(0)) w();
  }

  /** Waits a poll interval, or less when woken (a 404 from the watch) or aborted. */
  #pause(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        timer.cancel();
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      const timer = this.#clock.setTimer(this.#pollIntervalMs, done);
      signal.addEventListener("abort", done, { once: true });
      this.#wake = done;
    });
  }
}
