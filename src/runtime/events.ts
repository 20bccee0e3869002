/**
 * Event recorder (events.k8s.io/v1) with aggregation of repeats.
 *
 * A reconcile that fails in a loop records the same event again and again. The first
 * occurrence creates an Event; a repeat within `seriesWindowMs` of the previous one joins its
 * series: the count grows in memory and `series {count, lastObservedTime}` is written by the
 * repeat itself when the count reaches a power of two (2, 4, 8, ...) or `refreshIntervalMs`
 * after the last series write. So N repeats cost 1 create + about log2(N) patches, and every
 * write happens while the events happen: nothing is written from a timer, so a quiet
 * controller makes no writes (the previous design flushed counts 30 s later, which kept
 * patching after everything was Ready). The exact count is written at
 * shutdown (`flush`).
 *
 * client-go's events.k8s.io broadcaster (tools/events) writes the 2nd occurrence at once and
 * later counts only every 30 minutes, or 6 minutes after the series ended (a timer); this
 * keeps its immediate 2nd write and its 30-minute refresh, and replaces the end-of-series
 * timer by writes at powers of two. Recording never throws and never blocks a reconcile.
 */
import type { Logger } from "pino";
import type { KubeClient } from "./client.ts";
import { type Clock, realClock } from "./clock.ts";
import { builtinKinds } from "./kinds.ts";
import { microTime } from "./leader.ts";
import type { KubeObject } from "./types.ts";

// node:crypto through getBuiltinModule, not `import`: an ES import of a built-in reads every
// export, and node:crypto's webcrypto getters load internal modules the operator never uses
// (see src/runtime/server.ts).
const { randomBytes } = process.getBuiltinModule("node:crypto");

export type EventType = "Normal" | "Warning";

export interface EventRecorder {
  /** Records an event about `obj`. Never throws: events are best effort. */
  event(obj: KubeObject, type: EventType, reason: string, message: string, action?: string): void;
}

export interface EventRecorderOptions {
  /** events.k8s.io reportingController, e.g. "mlmodel.dev/operator". */
  reportingController: string;
  /** events.k8s.io reportingInstance, e.g. the pod name. */
  reportingInstance: string;
  clock?: Clock;
  log?: Logger;
  /** Repeats within this window join the series of the first event (default 6 min, like client-go). */
  seriesWindowMs?: number;
  /** A repeat writes the series if the last write is this old, power of two or not (default 30 min, like client-go). */
  refreshIntervalMs?: number;
  /** Remember at most this many distinct events (default 4096; oldest forgotten first). */
  maxTracked?: number;
}

/** The two writes a recorder makes (a KubeClient in production). */
export type EventSink = Pick<KubeClient, "create" | "patch">;

interface Tracked {
  namespace: string;
  name: string;
  count: number;
  written: number;
  lastSeen: number;
  /** When the series was last written (the create counts as one). */
  writtenAt: number;
  /** The create, then each series write after it: writes of one Event never overtake each other. */
  chain: Promise<boolean>;
}

/** Whether a repeat that brought the count to `count` writes the series now. */
export function seriesWriteDue(count: number, writtenAt: number, now: number, refreshMs: number): boolean {
  return (count & (count - 1)) === 0 || now - writtenAt >= refreshMs;
}

const NOTE_MAX = 1024;

export class KubeEventRecorder implements EventRecorder {
  readonly #client: EventSink;
  readonly #opts: EventRecorderOptions;
  readonly #clock: Clock;
  readonly #tracked = new Map<string, Tracked>();
  readonly #pending = new Set<Promise<unknown>>();
  /** Counts of API writes, for tests and the bench. */
  readonly writes = { created: 0, patched: 0, failed: 0 };

  constructor(client: EventSink, opts: EventRecorderOptions) {
    if (!opts.reportingController)
      throw new TypeError('event recorder needs reportingController, e.g. "example.com/podset"');
    if (!opts.reportingInstance)
      throw new TypeError("event recorder needs reportingInstance, e.g. the pod name");
    this.#client = client;
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
  }

  event(obj: KubeObject, type: EventType, reason: string, message: string, action = reason): void {
    if (type !== "Normal" && type !== "Warning") {
      this.#opts.log?.error(
        { type },
        `event type must be "Normal" or "Warning", got "${String(type)}"; event dropped`,
      );
      return;
    }
    const { namespace = "default", name, uid } = obj.metadata;
    if (!name) {
      this.#opts.log?.error({ kind: obj.kind }, "event about an object without metadata.name dropped");
      return;
    }
    const key = [uid ?? `${namespace}/${name}`, type, reason, action, message].join("\u0000");
    const now = this.#clock.now();
    const seen = this.#tracked.get(key);
    if (seen && now - seen.lastSeen < this.#seriesWindowMs) {
      seen.count++;
      seen.lastSeen = now;
      if (seriesWriteDue(seen.count, seen.writtenAt, now, this.#opts.refreshIntervalMs ?? 1_800_000))
        this.#writeSeries(seen);
      return;
    }
    // Re-inserted: the map's order is the order of last creation, oldest first.
    this.#tracked.delete(key);
    this.#track(key, this.#create(obj, namespace, name, type, reason, message, action, now));
  }

  /** Writes every series count not written yet, and waits for all writes started so far. */
  async flush(): Promise<void> {
    for (const t of this.#tracked.values()) if (t.count !== t.written) this.#writeSeries(t);
    await Promise.all([...this.#pending]);
  }

  get #seriesWindowMs(): number {
    return this.#opts.seriesWindowMs ?? 360_000;
  }

  /** Remembers `t`; forgets events whose series window has passed, and the oldest beyond maxTracked. */
  #track(key: string, t: Tracked): void {
    this.#tracked.set(key, t);
    const max = this.#opts.maxTracked ?? 4096;
    for (const [oldest, o] of this.#tracked) {
      const expired = t.lastSeen - o.lastSeen >= this.#seriesWindowMs && o.count === o.written;
      if (!expired && this.#tracked.size <= max) break;
      this.#tracked.delete(oldest);
    }
  }

  #create(
    obj: KubeObject,
    namespace: string,
    name: string,
    type: EventType,
    reason: string,
    message: string,
    action: string,
    now: number,
  ): Tracked {
    const eventName = `${name}.${randomBytes(8).toString("hex")}`;
    const body: KubeObject = {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: eventName, namespace },
      eventTime: microTime(now),
      reportingController: this.#opts.reportingController,
      reportingInstance: this.#opts.reportingInstance,
      action: action.slice(0, 128),
      reason: reason.slice(0, 128),
      type,
      note: message.length > NOTE_MAX ? `${message.slice(0, NOTE_MAX - 3)}...` : message,
      regarding: {
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        name,
        namespace: obj.metadata.namespace,
        uid: obj.metadata.uid,
        resourceVersion: obj.metadata.resourceVersion,
      },
    };
    const chain = this.#client.create(builtinKinds.Event, body).then(
      () => {
        this.writes.created++;
        return true;
      },
      (err: unknown) => {
        this.writes.failed++;
        this.#opts.log?.warn({ err, reason }, "could not create event");
        return false;
      },
    );
    this.#background(chain);
    return { namespace, name: eventName, count: 1, written: 1, lastSeen: now, writtenAt: now, chain };
  }

  /** Queues a write of the series as it is when the write runs (after the Event's earlier writes). */
  #writeSeries(t: Tracked): void {
    t.writtenAt = this.#clock.now();
    const write = async (created: boolean): Promise<boolean> => {
      if (!created || t.count === t.written) return created;
      const count = t.count;
      try {
        await this.#client.patch(
          builtinKinds.Event,
          { namespace: t.namespace, name: t.name },
          { series: { count, lastObservedTime: microTime(t.lastSeen) } },
          "merge",
        );
        t.written = count;
        this.writes.patched++;
      } catch (err) {
        this.writes.failed++;
        this.#opts.log?.warn({ err }, "could not update event series");
      }
      return created;
    };
    t.chain = t.chain.then(write);
    this.#background(t.chain);
  }

  #background(p: Promise<unknown>): void {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }
}

/** A recorder that only logs; for tests of reconcilers and for dry runs. */
export function logEventRecorder(log: Logger): EventRecorder {
  return {
    event(obj, type, reason, message) {
      log.info({ kind: obj.kind, name: obj.metadata.name, type, reason }, message);
    },
  };
}
