/**
 * Watches one kind in one namespace from the benchmark's side (admin client, the runtime's own
 * informer) and records when each named object first meets a condition: the moment a model
 * turned Ready, or a floor Deployment had its pod ready.
 */
import {
  Informer,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
  type StoreChange,
} from "../../src/runtime/index.ts";

interface Waiter {
  pending: Set<string>;
  reached: Map<string, number>;
  test: (obj: KubeObject) => boolean;
  resolve: (reached: Map<string, number>) => void;
}

export class Tracker<T extends KubeObject = KubeObject> {
  readonly informer: Informer<T>;
  readonly #abort = new AbortController();
  #waiter: Waiter | undefined;

  constructor(client: KubeClient, kind: ResourceKind, namespace: string) {
    this.informer = new Informer<T>(client, kind, { scope: { namespace } });
    this.informer.addHandler((change: StoreChange<T>) => {
      if (change.type !== "delete") this.#check(change.object);
    });
  }

  async start(): Promise<void> {
    void this.informer.run(this.#abort.signal);
    await this.informer.waitForSync(this.#abort.signal);
  }

  stop(): void {
    this.#abort.abort();
  }

  /**
   * Resolves with the time (performance.now()) at which each of `names` first met `test`;
   * rejects after `timeoutMs` (a liveness bound, not a measurement) naming what is missing.
   */
  until(
    names: readonly string[],
    test: (obj: T) => boolean,
    timeoutMs: number,
  ): Promise<Map<string, number>> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        pending: new Set(names),
        reached: new Map(),
        test: test as (obj: KubeObject) => boolean,
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      };
      const timer = setTimeout(() => {
        this.#waiter = undefined;
        const sample = [...waiter.pending].slice(0, 3).map((n) => {
          const obj = this.informer.store.get({ namespace: this.informer.scope.namespace, name: n });
          return `${n}: ${JSON.stringify((obj as { status?: unknown } | undefined)?.status ?? "absent").slice(0, 300)}`;
        });
        reject(
          new Error(
            `${waiter.pending.size} of ${names.length} not done after ${timeoutMs / 1000}s; e.g. ${sample.join("; ")}`,
          ),
        );
      }, timeoutMs);
      this.#waiter = waiter;
      for (const obj of this.informer.store.list()) this.#check(obj as T);
    });
  }

  #check(obj: Readonly<T>): void {
    const w = this.#waiter;
    const name = obj.metadata.name!;
    if (!w?.pending.has(name) || !w.test(obj as KubeObject)) return;
    w.pending.delete(name);
    w.reached.set(name, performance.now());
    if (w.pending.size === 0) {
      this.#waiter = undefined;
      w.resolve(w.reached);
    }
  }
}
