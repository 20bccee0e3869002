/**
 * Event recorder (events.k8s.io/v1) with aggregation of repeats.
 *
 * A reconcile that fails in a loop records the same event again and again. The first
 * occurrence creates an Event; repeats within `seriesWindowMs` only bump a counter, and the
 * counter is written as `series {count, lastObservedTime}` at most once per
 * `flushIntervalMs`. So N identical events cost 1 create + at most one patch per interval,
 * not N writes. Recording never throws and never blocks a reconcile.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import type { KubeClient } from "./client.ts";
import { type Clock, realClock, type Timer } from "./clock.ts";
import { builtinKinds } from "./kinds.ts";
import { microTime } from "./leader.ts";
import type { KubeObject } from "./types.ts";

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
  /** Write accumulated series counts at most this often (default 30 s). */
  flushIntervalMs?: number;
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
  created: Promise<boolean>;
  flush: Timer | undefined;
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
    if (seen && now - seen.lastSeen < (this.#opts.seriesWindowMs ?? 360_000)) {
      seen.count++;
      seen.lastSeen = now;
      this.#scheduleFlush(seen);
      return;
    }
    this.#track(key, this.#create(obj, namespace, name, type, reason, message, action, now));
  }

  /** Waits for all writes started so far, and writes pending series counts now. */
  async flush(): Promise<void> {
    for (const t of this.#tracked.values()) {
      if (t.flush) {
        t.flush.cancel();
        t.flush = undefined;
        this.#background(this.#writeSeries(t));
      }
    }
    await Promise.all([...this.#pending]);
  }

  #track(key: string, t: Tracked): void {
    this.#tracked.set(key, t);
    const max = this.#opts.maxTracked ?? 4096;
    while (this.#tracked.size > max) {
      const oldest = this.#tracked.keys().next().value as string;
      this.#tracked.get(oldest)?.flush?.cancel();
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
    const created = this.#client.create(builtinKinds.Event, body).then(
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
    this.#background(created);
    return { namespace, name: eventName, count: 1, written: 1, lastSeen: now, created, flush: undefined };
  }

  #scheduleFlush(t: Tracked): void {
    if (t.flush) return;
    t.flush = this.#clock.setTimer(this.#opts.flushIntervalMs ?? 30_000, () => {
      t.flush = undefined;
      this.#background(this.#writeSeries(t));
    });
  }

  async #writeSeries(t: Tracked): Promise<void> {
    if (!(await t.created) || t.count === t.written) return;
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
