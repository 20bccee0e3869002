import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { type EventSink, KubeEventRecorder } from "../../../src/runtime/events.ts";
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
function recorder(opts: { flushIntervalMs?: number; seriesWindowMs?: number } = {}) {
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

  it("aggregates a storm of repeats: 1000 identical events -> 1 create + 1 series patch per interval", async () => {
    const { clock, calls, r } = recorder({ flushIntervalMs: 30_000 });
    for (let i = 0; i < 1000; i++) {
      r.event(podset, "Warning", "ReconcileError", "boom");
      await clock.advance(10); // 1000 events over 10 s
    }
    await clock.advance(30_000);
    await r.flush();
    assert.deepEqual(
      calls.map((c) => c.op),
      ["create", "patch"],
    );
    assert.equal((calls[1]!.body["series"] as { count: number }).count, 1000);
    // A different message is a different event.
    r.event(podset, "Warning", "ReconcileError", "other");
    await r.flush();
    assert.equal(calls.filter((c) => c.op === "create").length, 2);
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
