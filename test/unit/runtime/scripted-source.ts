/**
 * A scripted list/watch source for unit tests: it replays what a test pushes, nothing more.
 * Not an API server: no storage, no resourceVersion rules, no HTTP.
 */
import type { ListResult, WatchOptions } from "../../../src/runtime/client.ts";
import type { ResourceKind } from "../../../src/runtime/kinds.ts";
import type { KubeObject, WatchEvent } from "../../../src/runtime/types.ts";
import type { WatchSource } from "../../../src/runtime/watcher.ts";

export class PushSource implements WatchSource {
  readonly watches: WatchOptions[] = [];
  #list: ListResult<KubeObject>;
  #queue: WatchEvent[] = [];
  #wake: (() => void) | undefined;

  constructor(items: KubeObject[] = [], resourceVersion = "1") {
    this.#list = { items, resourceVersion };
  }

  async list(): Promise<ListResult<KubeObject>> {
    return this.#list;
  }

  /** Sends a watch event to the current (or next) watch. */
  push(type: WatchEvent["type"], object: KubeObject): void {
    this.#queue.push({ type, object });
    this.#wake?.();
  }

  async *watch(opts: WatchOptions, signal: AbortSignal): AsyncGenerator<WatchEvent> {
    this.watches.push(opts);
    while (!signal.aborted) {
      const e = this.#queue.shift();
      if (e) {
        yield e;
        continue;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        signal.addEventListener("abort", () => resolve(), { once: true });
      });
    }
  }
}

export function obj(
  kind: string,
  ns: string,
  name: string,
  rv: string,
  meta: Partial<KubeObject["metadata"]> = {},
): KubeObject {
  return {
    apiVersion: kind === "PodSet" ? "example.com/v1" : "v1",
    kind,
    metadata: { namespace: ns, name, resourceVersion: rv, uid: `uid-${name}`, ...meta },
  };
}

/** A namespaced kind of the example.com/v1 group, for tests of kinds the cluster may not serve. */
export function exampleKind(kind: string, plural: string): ResourceKind {
  return { group: "example.com", version: "v1", kind, plural, namespaced: true };
}
