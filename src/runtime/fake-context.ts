/**
 * A ReconcileContext over a FakeClient, to call a reconciler directly in a unit test: its caches
 * are the fake's objects as a synced informer would hold them, read when a cache is first asked
 * for (`refresh()` reads them again, as informers catching up would), and the Events it records
 * are kept in `events`.
 */
import pino from "pino";
import type { EventType } from "./events.ts";
import type { FakeClient } from "./fake-client.ts";
import { kindName, type ResourceKind } from "./kinds.ts";
import type { ReconcileContext } from "./reconcile.ts";
import { MemoryStore, type Store, stripManagedFields } from "./store.ts";
import type { KubeObject, Request } from "./types.ts";

/** One Event a reconciler recorded. */
export interface RecordedEvent {
  kind: string;
  name: string;
  type: EventType;
  reason: string;
  message: string;
}

export interface FakeReconcileContext extends ReconcileContext {
  readonly events: RecordedEvent[];
  /** Reads every cache again from the fake: the informers caught up with the writes so far. */
  refresh(): void;
}

export function fakeReconcileContext(
  client: FakeClient,
  request: Request,
  opts: { signal?: AbortSignal; log?: ReconcileContext["log"] } = {},
): FakeReconcileContext {
  const caches = new Map<string, { kind: ResourceKind; store: MemoryStore }>();
  const fill = (kind: ResourceKind, store: MemoryStore) =>
    store.replace(client.objects(kind).map(stripManagedFields));
  const events: RecordedEvent[] = [];
  return {
    request,
    reconcileId: "fake",
    signal: opts.signal ?? new AbortController().signal,
    log: opts.log ?? pino({ level: "silent" }),
    client,
    cache<T extends KubeObject = KubeObject>(kind: ResourceKind): Store<T> {
      const id = kindName(kind);
      let entry = caches.get(id);
      if (!entry) {
        entry = { kind, store: new MemoryStore() };
        fill(kind, entry.store);
        caches.set(id, entry);
      }
      return entry.store as unknown as Store<T>;
    },
    served: () => true,
    recorder: {
      event(obj, type, reason, message) {
        events.push({ kind: obj.kind, name: obj.metadata.name ?? "", type, reason, message });
      },
    },
    events,
    refresh() {
      for (const { kind, store } of caches.values()) fill(kind, store);
    },
  };
}
