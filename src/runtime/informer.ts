/**
 * Reflector and Informer: the watcher's events written into a Store, and the store's changes
 * fanned out to handlers (controllers enqueue keys from them).
 *
 * The reflector buffers an (re)list and swaps it in at initDone, so readers never see a half
 * list, and deletions that happened while the watch was down come out as delete changes.
 */
import { KubeClient } from "./client.ts";
import { realClock } from "./clock.ts";
import { defaultHealthGracePeriodMs, type HealthStatus, WatchHealth } from "./health.ts";
import type { ResourceKind } from "./kinds.ts";
import { kindName } from "./kinds.ts";
import type { IndexFunc, Store, StoreChange } from "./store.ts";
import { MemoryStore, stripManagedFields } from "./store.ts";
import type { KubeObject } from "./types.ts";
import {
  clientSource,
  type Scope,
  type WatcherEvent,
  type WatcherOptions,
  type WatchSource,
  watcher,
} from "./watcher.ts";

/** Turns an object before it is stored; return a smaller object to save memory. */
export type Transform<T extends KubeObject = KubeObject> = (obj: T) => T;

/**
 * Writes watcher events into `store` and yields the resulting changes (pass-through style).
 * `transform` runs once per object before storing (default: strip managedFields).
 * After each (re)list it yields `{type: "synced"}` (also for an empty list, which has no changes).
 * Its first list's changes are `initial`, a relist's are not (MemoryStore.replace): also when
 * the store was filled before, by an earlier reflector (an optional kind served again).
 */
export async function* reflector<T extends KubeObject>(
  store: MemoryStore<T>,
  events: AsyncIterable<WatcherEvent<T>>,
  transform: Transform<T> = stripManagedFields,
): AsyncGenerator<StoreChange<T> | { type: "synced" }> {
  let buffer: T[] | undefined;
  let listed = false;
  for await (const event of events) {
    switch (event.type) {
      case "init":
        buffer = [];
        break;
      case "initApply":
        buffer?.push(transform(event.object));
        break;
      case "initDone":
        yield* store.replace(buffer ?? [], !listed);
        buffer = undefined;
        listed = true;
        yield { type: "synced" };
        break;
      case "apply": {
        const change = store.apply(transform(event.object));
        if (change) yield change;
        break;
      }
      case "delete": {
        const change = store.delete(transform(event.object));
        if (change) yield change;
        break;
      }
    }
  }
}

export type ChangeHandler<T extends KubeObject = KubeObject> = (change: StoreChange<T>) => void;

/**
 * True at once when already synced; else true when a waiter in `waiters` is called (the owner
 * calls them all on sync), false when `signal` aborts first.
 */
export function waitForSync(
  synced: boolean,
  waiters: (() => void)[],
  signal?: AbortSignal,
): Promise<boolean> {
  if (synced) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = () => resolve(false);
    signal?.addEventListener("abort", onAbort, { once: true });
    waiters.push(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    });
  });
}

export interface InformerOptions<T extends KubeObject = KubeObject> {
  scope?: Scope;
  /**
   * Runs once per object before it is stored (default: stripManagedFields, or none with
   * keepManagedFields).
   */
  transform?: Transform<T>;
  /**
   * Objects keep metadata.managedFields (default false: a KubeClient source cuts them from the
   * text before parsing, so a transform never sees them).
   */
  keepManagedFields?: boolean;
  indexes?: Record<string, IndexFunc<T>>;
  watcher?: Omit<WatcherOptions, "signal">;
  /** How long list/watch errors may go on before health() says unhealthy (default 10 s). */
  healthGracePeriodMs?: number;
  /** Write into this store instead of a new one (an OptionalInformer keeps one across runs). */
  store?: MemoryStore<T>;
}

/** One kind in one scope: a store kept current by a watcher, plus change handlers. */
export class Informer<T extends KubeObject = KubeObject> {
  readonly kind: ResourceKind;
  readonly scope: Scope;
  readonly store: MemoryStore<T>;
  readonly #source: WatchSource<T>;
  readonly #transform: Transform<T>;
  readonly #handlers: ChangeHandler<T>[] = [];
  readonly #watcherOpts: Omit<WatcherOptions, "signal">;
  readonly #health: WatchHealth;
  #syncWaiters: (() => void)[] = [];
  #running: Promise<void> | undefined;

  constructor(source: WatchSource<T> | KubeClient, kind: ResourceKind, opts: InformerOptions<T> = {}) {
    this.kind = kind;
    this.scope = opts.scope ?? {};
    const keepManagedFields = opts.keepManagedFields === true;
    this.#source =
      source instanceof KubeClient
        ? clientSource<T>(source, kind, this.scope, { keepManagedFields })
        : source;
    // stripManagedFields also for a KubeClient source: text laid out otherwise than expected
    // comes parsed whole (managed-fields.ts).
    this.#transform = opts.transform ?? (keepManagedFields ? (obj) => obj : stripManagedFields);
    this.#watcherOpts = opts.watcher ?? {};
    this.#health = new WatchHealth(
      this.#watcherOpts.clock ?? realClock,
      opts.healthGracePeriodMs ?? defaultHealthGracePeriodMs,
    );
    this.store = opts.store ?? new MemoryStore<T>(opts.indexes ?? {});
  }

  get name(): string {
    const parts = [kindName(this.kind)];
    if (this.scope.namespace) parts.push(`ns=${this.scope.namespace}`);
    if (this.scope.labelSelector) parts.push(`labels=${this.scope.labelSelector}`);
    return parts.join(" ");
  }

  /** Handlers run synchronously for every change, in registration order. Keep them cheap. */
  addHandler(fn: ChangeHandler<T>): void {
    this.#handlers.push(fn);
    // A handler added after sync still needs to see what is already there.
    if (this.store.hasSynced()) {
      for (const object of this.store.list()) fn({ type: "add", object, initial: true });
    }
  }

  hasSynced(): boolean {
    return this.store.hasSynced();
  }

  readonly view = (): Store<T> => this.store;

  /** Unhealthy once list/watch errors went on for the grace period with no answer between. */
  health(): HealthStatus {
    return this.#health.status();
  }

  /** Resolves when the store holds its first full list (or when `signal` aborts). */
  waitForSync(signal?: AbortSignal): Promise<boolean> {
    return waitForSync(this.store.hasSynced(), this.#syncWaiters, signal);
  }

  /** Runs until `signal` aborts. Starting twice returns the same run. */
  run(signal: AbortSignal): Promise<void> {
    this.#running ??= this.#run(signal);
    return this.#running;
  }

  async #run(signal: AbortSignal): Promise<void> {
    const w = this.#watcherOpts;
    const events = watcher(this.#source, {
      ...w,
      signal,
      onError: (err, state, retryInMs) => {
        this.#health.failed(err);
        w.onError?.(err, state, retryInMs);
      },
      onProgress: () => {
        this.#health.progress();
        w.onProgress?.();
      },
    });
    for await (const change of reflector(this.store, events, this.#transform)) {
      if (change.type === "synced") {
        for (const w of this.#syncWaiters.splice(0)) w();
        continue;
      }
      for (const h of this.#handlers) h(change);
    }
  }
}
