import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { type EventSink, KubeEventRecorder, seriesWriteDue } from "../../../src/runtime/events.ts";
import type { KubeObject } from "../../../src/runtime/types.ts";

/** Records the writes a recorder makes. */
function sink() {
  const calls: { op: string; body: Record<string, unknown> }[] = [];
  const s = {
    create: async (_k: unknown, body: KubeObject) => {
      calls.push({ op: "create", body });
      return body;
    },
    patch: async (_k: unknown, _key: unknown, body: unknown) => {
      calls.push({ op: "patch", body: body as Record<string, unknown> });
      return {} as KubeObject;
    },
  } as unknown as EventSink;
  return { s, calls };
}

/** A recorder on a fake clock writing to a recording sink. */
function recorder(opts: { refreshIntervalMs?: number; seriesWindowMs?: number; maxTracked?: number } = {}) {
  const clock = new FakeClock(0);
  const { s, calls } = sink();
  const r = new KubeEventRecorder(s, { reportingController: "c", reportingInstance: "i", clock, ...opts });
  return { clock, calls, r };
}

const podset: KubeObject = {
  apiVersion: "example.com/v1",
  kind: "PodSet",
  metadata: { namespace: "ns", name: "ps", uid: "u1", resourceVersion: "7" },
};

describe("KubeEventRecorder", () => {
  it("creates an events.k8s.io/v1 Event that names the object", async () => {
    const { s, calls } = sink();
    const r = new KubeEventRecorder(s, {
      reportingController: "example.com/podset",
      reportingInstance: "pod-1",
    });
    r.event(podset, "Normal", "Created", "created pod ps-abc");
    await r.flush();
    assert.equal(calls.length, 1);
    const e = calls[0]!.body;
    assert.equal(e["apiVersion"], "events.k8s.io/v1");
    assert.equal(e["reason"], "Created");
    assert.equal(e["note"], "created pod ps-abc");
    assert.equal(e["reportingController"], "example.com/podset");
    assert.match(String(e["eventTime"]), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    assert.deepEqual(e["regarding"], {
      apiVersion: "example.com/v1",
      kind: "PodSet",
      name: "ps",
      namespace: "ns",
      uid: "u1",
      resourceVersion: "7",
    });
  });

  it("aggregates a storm of repeats: 1 create and a series write at each power of two, none after the storm", async () => {
    const { clock, calls, r } = recorder();
    for (let i = 0; i < 1000; i++) {
      r.event(podset, "Warning", "ReconcileError", "boom");
      await clock.advance(10); // 1000 events over 10 s
    }
    await settle();
    const counts = () => calls.slice(1).map((c) => (c.body["series"] as { count: number }).count);
    assert.equal(calls[0]!.op, "create");
    assert.deepEqual(counts(), [2, 4, 8, 16, 32, 64, 128, 256, 512]);
    // Nothing is written from a timer: a controller that went quiet makes no writes.
    await clock.advance(3_600_000);
    await settle();
    assert.equal(calls.length, 10);
    // Shutdown writes the exact count.
    await r.flush();
    assert.deepEqual(counts().at(-1), 1000);
    // A different message is a different event.
    r.event(podset, "Warning", "ReconcileError", "other");
    await r.flush();
    assert.equal(calls.filter((c) => c.op === "create").length, 2);
  });

  it("writes a series that keeps going at least every refresh interval, and never before its create", async () => {
    let release: () => void = () => {};
    const calls: string[] = [];
    const slow = {
      create: async () => {
        await new Promise<void>((r) => {
          release = r;
        });
        calls.push("create");
        return {} as KubeObject;
      },
      patch: async (_k: unknown, _key: unknown, body: { series: { count: number } }) => {
        calls.push(`patch ${body.series.count}`);
        return {} as KubeObject;
      },
    } as unknown as EventSink;
    const clock = new FakeClock(0);
    const r = new KubeEventRecorder(slow, {
      reportingController: "c",
      reportingInstance: "i",
      clock,
      refreshIntervalMs: 60_000,
    });
    r.event(podset, "Warning", "Failing", "x");
    r.event(podset, "Warning", "Failing", "x"); // the 2nd occurrence is written at once...
    await settle();
    assert.deepEqual(calls, [], "...but not before the Event exists");
    release();
    await settle();
    assert.deepEqual(calls, ["create", "patch 2"]);
    await clock.advance(30_000);
    r.event(podset, "Warning", "Failing", "x"); // 3: not a power of two, 30 s after the last write
    await settle();
    assert.deepEqual(calls, ["create", "patch 2"]);
    await clock.advance(30_000);
    r.event(podset, "Warning", "Failing", "x"); // 4: a power of two
    await clock.advance(30_000);
    r.event(podset, "Warning", "Failing", "x"); // 5: 30 s after the last write
    await clock.advance(30_000);
    r.event(podset, "Warning", "Failing", "x"); // 6: 60 s after the last write
    await settle();
    assert.deepEqual(calls, ["create", "patch 2", "patch 4", "patch 6"]);
  });

  it("decides a series write by power of two or refresh age", () => {
    assert.deepEqual(
      [2, 3, 4, 5, 8, 1000, 1024].map((n) => seriesWriteDue(n, 0, 1000, 60_000)),
      [true, false, true, false, true, false, true],
    );
    assert.equal(seriesWriteDue(3, 0, 60_000, 60_000), true);
  });

  it("forgets events whose series window has passed, and the oldest beyond maxTracked", async () => {
    const { clock, calls, r } = recorder({ seriesWindowMs: 1000, maxTracked: 2 });
    const obj = (name: string): KubeObject => ({
      ...podset,
      metadata: { ...podset.metadata, name, uid: name },
    });
    r.event(obj("a"), "Normal", "R", "m");
    r.event(obj("b"), "Normal", "R", "m");
    r.event(obj("c"), "Normal", "R", "m"); // a is forgotten (capacity)
    r.event(obj("a"), "Normal", "R", "m"); // so this is a new Event, not a repeat
    await r.flush();
    assert.deepEqual(
      calls.map((c) => c.op),
      ["create", "create", "create", "create"],
    );
    await clock.advance(1500);
    r.event(obj("b"), "Normal", "R", "m"); // its window passed: a new Event too
    await r.flush();
    assert.equal(calls.filter((c) => c.op === "create").length, 5);
  });

  it("starts a new event after the series window; drops bad input without throwing", async () => {
    const { clock, calls, r } = recorder({ seriesWindowMs: 1000 });
    r.event(podset, "Normal", "R", "m");
    await clock.advance(2000);
    r.event(podset, "Normal", "R", "m");
    r.event(podset, "Info" as "Normal", "R", "m");
    r.event({ ...podset, metadata: {} }, "Normal", "R", "m");
    await settle();
    await r.flush();
    assert.equal(calls.filter((c) => c.op === "create").length, 2);
  });

  it("requires reportingController and reportingInstance", () => {
    assert.throws(
      () => new KubeEventRecorder(sink().s, { reportingController: "", reportingInstance: "i" }),
      /reportingController/,
    );
  });
});
