import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import { KubeClient } from "../../../src/runtime/client.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import {
  Controller,
  ControllerBuilder,
  type ControllerDeps,
  type ControllerOptions,
  mapSource,
  outcomeOf,
  ownsSource,
  requestsFor,
} from "../../../src/runtime/controller.ts";
import { ApiError, TerminalError } from "../../../src/runtime/errors.ts";
import { logEventRecorder } from "../../../src/runtime/events.ts";
import { Informer } from "../../../src/runtime/informer.ts";
import { builtinKinds, type ResourceKind } from "../../../src/runtime/kinds.ts";
import { RuntimeMetrics } from "../../../src/runtime/metrics.ts";
import { generationChangedPredicate } from "../../../src/runtime/predicates.ts";
import type { Reconciler } from "../../../src/runtime/reconcile.ts";
import { exampleKind, obj, PushSource } from "./scripted-source.ts";

const PodSet: ResourceKind = {
  group: "example.com",
  version: "v1",
  kind: "PodSet",
  plural: "podsets",
  namespaced: true,
};
const log = pino({ level: "silent" });
// Never called: the reconcilers in these tests do not write.
const unusedClient = new KubeClient({ server: "http://unused.invalid", headers: async () => ({}) });

describe("mapping changes to requests", () => {
  const ownerRef = { apiVersion: "example.com/v1", kind: "PodSet", name: "ps", uid: "u", controller: true };

  it("owns: enqueues the controlling owner of the right kind, old and new on update", () => {
    const src = ownsSource(builtinKinds.Pod, PodSet);
    const pod = obj("Pod", "ns", "p", "1", { ownerReferences: [ownerRef] });
    assert.deepEqual(requestsFor(src, { type: "add", object: pod, initial: false }), [
      { namespace: "ns", name: "ps" },
    ]);
    const moved = obj("Pod", "ns", "p", "2", {
      ownerReferences: [{ ...ownerRef, name: "other", uid: "u2" }],
    });
    assert.deepEqual(requestsFor(src, { type: "update", old: pod, object: moved, initial: false }), [
      { namespace: "ns", name: "ps" },
      { namespace: "ns", name: "other" },
    ]);
    const updated = obj("Pod", "ns", "p", "3", { ownerReferences: [ownerRef] });
    assert.deepEqual(
      requestsFor(src, { type: "update", old: pod, object: updated, initial: false }),
      [{ namespace: "ns", name: "ps" }],
      "old and new with the same owner: its key once",
    );
    const foreign = obj("Pod", "ns", "p", "1", {
      ownerReferences: [{ ...ownerRef, kind: "ReplicaSet", apiVersion: "apps/v1" }],
    });
    assert.deepEqual(requestsFor(src, { type: "add", object: foreign, initial: false }), []);
    const notController = obj("Pod", "ns", "p", "1", {
      ownerReferences: [{ ...ownerRef, controller: false }],
    });
    assert.deepEqual(requestsFor(src, { type: "delete", object: notController, initial: false }), []);
  });

  it("watches: maps with a function; predicates filter first", () => {
    const src = mapSource(
      builtinKinds.ConfigMap,
      (o) => [{ namespace: "x", name: `for-${o.metadata.name}` }],
      [generationChangedPredicate()],
    );
    const a = obj("ConfigMap", "ns", "c", "1", { generation: 1 });
    const b = obj("ConfigMap", "ns", "c", "2", { generation: 1 });
    assert.deepEqual(requestsFor(src, { type: "update", old: a, object: b, initial: false }), []);
    const c = obj("ConfigMap", "ns", "c", "3", { generation: 2 });
    assert.deepEqual(requestsFor(src, { type: "update", old: a, object: c, initial: false }), [
      { namespace: "x", name: "for-c" },
    ]);
    const renamed = mapSource(builtinKinds.ConfigMap, (o) => [
      { namespace: "x", name: `v${o.metadata.resourceVersion}` },
    ]);
    assert.equal(requestsFor(renamed, { type: "update", old: a, object: c, initial: false }).length, 2);
  });
});

describe("outcomeOf", () => {
  it("classifies results and errors", () => {
    assert.deepEqual(outcomeOf({ ok: true, value: undefined }), { result: "success" });
    assert.deepEqual(outcomeOf({ ok: true, value: { requeueAfterMs: 0 } }), { result: "success" });
    assert.deepEqual(outcomeOf({ ok: true, value: { requeueAfterMs: 500 } }), {
      result: "requeue_after",
      ms: 500,
    });
    assert.deepEqual(outcomeOf({ ok: false, error: new ApiError(409, "conflict") }), {
      result: "requeue",
      reason: "conflict",
    });
    assert.deepEqual(
      outcomeOf({ ok: false, error: new ApiError(429, "slow down", { retryAfterSeconds: 3 }) }),
      {
        result: "requeue",
        reason: "throttled",
        ms: 3000,
      },
    );
    const t = outcomeOf({ ok: false, error: new TerminalError("bad spec") });
    assert.equal(t.result === "error" && t.terminal, true);
    const e = outcomeOf({ ok: false, error: new Error("x") });
    assert.equal(e.result === "error" && !e.terminal, true);
    assert.deepEqual(outcomeOf({ ok: true, value: { replacesRequeue: true } }), {
      result: "success",
      replaces: true,
    });
    assert.deepEqual(outcomeOf({ ok: true, value: { requeueAfterMs: 500, replacesRequeue: true } }), {
      result: "requeue_after",
      ms: 500,
      replaces: true,
    });
    assert.deepEqual(outcomeOf({ ok: true, value: { requeueAfterMs: 500, replacesRequeue: false } }), {
      result: "requeue_after",
      ms: 500,
    });
    const bad = outcomeOf({ ok: true, value: { requeueAfterMs: Number.NaN } });
    assert.ok(
      bad.result === "error" && /requeueAfterMs=NaN; it must be a finite number >= 0/.test(String(bad.error)),
    );
  });
});

/** A controller over pushed sources, with a fake clock. */
function harness(reconciler: Reconciler, concurrency = 1) {
  const clock = new FakeClock(1_000_000);
  const sources = { PodSet: new PushSource(), Pod: new PushSource() };
  const informers = {
    PodSet: new Informer(sources.PodSet, PodSet),
    Pod: new Informer(sources.Pod, builtinKinds.Pod),
  };
  const metrics = new RuntimeMetrics({ defaultMetrics: false });
  const built: Controller[] = [];
  const register = (opts: ControllerOptions) => {
    const c = new Controller(opts, {
      informer: (k) => (k.kind === "PodSet" ? informers.PodSet : informers.Pod) as Informer,
      store: (k) => (k.kind === "PodSet" ? informers.PodSet.store : informers.Pod.store),
      client: unusedClient,
      recorder: logEventRecorder(log),
      log,
      metrics,
      clock,
    });
    built.push(c);
    return c;
  };
  const ctrl = new ControllerBuilder("podset", register)
    .for(PodSet)
    .owns(builtinKinds.Pod)
    .concurrency(concurrency)
    .reconcile(reconciler);
  const ac = new AbortController();
  const runs = [informers.PodSet.run(ac.signal), informers.Pod.run(ac.signal)];
  const started = ctrl.start();
  return {
    clock,
    sources,
    ctrl,
    metrics,
    async stop() {
      await ctrl.stop(1000);
      await started;
      ac.abort();
      await Promise.all(runs);
    },
  };
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 10_000 && !cond(); i++) await settle();
  assert.ok(cond(), `timed out waiting for: ${what}`);
}

describe("Controller", () => {
  it("reconciles the owner when an owned pod changes; never runs one key twice at once", async () => {
    let running = 0;
    let maxRunning = 0;
    const perKey = new Map<string, number>();
    let overlap = 0;
    const active = new Set<string>();
    let release: (() => void) | undefined;
    const h = harness(async (ctx) => {
      const key = `${ctx.request.namespace}/${ctx.request.name}`;
      if (active.has(key)) overlap++;
      active.add(key);
      running++;
      maxRunning = Math.max(maxRunning, running);
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
      if (key === "ns/a" && !release) await new Promise<void>((r) => (release = r));
      running--;
      active.delete(key);
    }, 4);
    h.sources.PodSet.push("ADDED", obj("PodSet", "ns", "a", "2"));
    await until(() => release !== undefined, "first reconcile of a");
    // While a's reconcile hangs: more changes for a (direct and via owned pods), and for b.
    const ref = { apiVersion: "example.com/v1", kind: "PodSet", name: "a", uid: "uid-a", controller: true };
    for (let i = 0; i < 5; i++)
      h.sources.Pod.push("ADDED", obj("Pod", "ns", `p${i}`, `${10 + i}`, { ownerReferences: [ref] }));
    h.sources.PodSet.push("MODIFIED", obj("PodSet", "ns", "a", "20"));
    h.sources.PodSet.push("ADDED", obj("PodSet", "ns", "b", "21"));
    await until(() => perKey.get("ns/b") === 1, "b reconciled while a is busy");
    assert.equal(perKey.get("ns/a"), 1, "a is not run again while its first run is in flight");
    release!();
    await until(() => perKey.get("ns/a") === 2, "a runs once more after the first run");
    for (let i = 0; i < 20; i++) await settle();
    assert.equal(perKey.get("ns/a"), 2, "six adds while busy collapse into one re-run");
    assert.equal(overlap, 0);
    assert.ok(maxRunning >= 2, "different keys run in parallel");
    await h.stop();
  });

  it("requeueAfter runs again after the delay; errors back off; TerminalError is not retried; 409 requeues", async () => {
    const calls: { key: string; at: number }[] = [];
    const behaviour: Record<string, () => unknown> = {
      after: () => ({ requeueAfterMs: 60_000 }),
      flaky: () => {
        throw new Error("transient");
      },
      terminal: () => {
        throw new TerminalError("spec.replicas must be >= 0");
      },
      conflict: () => {
        throw new ApiError(409, "conflict");
      },
    };
    const h = harness(async (ctx) => {
      calls.push({ key: ctx.request.name, at: h.clock.now() });
      return behaviour[ctx.request.name]?.() as undefined;
    });
    for (const name of Object.keys(behaviour)) h.sources.PodSet.push("ADDED", obj("PodSet", "ns", name, "1"));
    await until(() => calls.length >= 4, "first round");
    const t0 = h.clock.now();
    const times = (name: string) => calls.filter((c) => c.key === name).map((c) => c.at - t0);
    await h.clock.advance(5);
    await h.clock.advance(10);
    await h.clock.advance(20);
    await until(() => times("flaky").length >= 4, "flaky retried 3 times");
    assert.deepEqual(times("flaky"), [0, 5, 15, 35], "5 ms doubling backoff");
    assert.deepEqual(times("conflict"), [0, 5, 15, 35], "409 requeues with backoff");
    assert.deepEqual(times("terminal"), [0], "terminal errors are not retried");
    assert.deepEqual(times("after"), [0]);
    await h.clock.advance(60_000);
    await until(() => times("after").length === 2, "requeueAfter fired");
    assert.equal(times("after")[1], 60_000, "requeued exactly requeueAfterMs later");
    const text = await h.metrics.registry.metrics();
    assert.match(text, /controller_runtime_reconcile_total\{controller="podset",result="requeue_after"\} 2/);
    assert.match(text, /controller_runtime_terminal_reconcile_errors_total\{controller="podset"\} 1/);
    assert.match(text, /workqueue_retries_total\{name="podset",controller="podset"\} [1-9]/);
    await h.stop();
  });

  it("replacesRequeue: the key's earlier requeue is withdrawn, and the result's own is the only one left", async () => {
    const calls: { key: string; at: number }[] = [];
    // Each key's first reconcile asks to come back in 60 s; its second (woken before then) says:
    const second: Record<string, () => unknown> = {
      withdrawn: () => ({ replacesRequeue: true }),
      later: () => ({ requeueAfterMs: 90_000, replacesRequeue: true }),
      kept: () => undefined,
    };
    const h = harness(async (ctx) => {
      const key = ctx.request.name;
      calls.push({ key, at: h.clock.now() });
      const n = calls.filter((c) => c.key === key).length;
      return (n === 1 ? { requeueAfterMs: 60_000 } : n === 2 ? second[key]!() : undefined) as undefined;
    });
    for (const name of Object.keys(second)) h.sources.PodSet.push("ADDED", obj("PodSet", "ns", name, "1"));
    await until(() => calls.length === 3, "first round");
    const t0 = h.clock.now();
    const times = (name: string) => calls.filter((c) => c.key === name).map((c) => c.at - t0);
    await h.clock.advance(1000);
    for (const name of Object.keys(second)) h.sources.PodSet.push("MODIFIED", obj("PodSet", "ns", name, "2"));
    await until(() => calls.length === 6, "woken before the requeue");
    await h.clock.advance(59_000);
    await until(() => times("kept").length === 3, "kept: the first requeue still runs");
    await h.clock.advance(31_000);
    await until(() => times("later").length === 3, "later: its own requeue runs");
    await h.clock.advance(60_000);
    assert.deepEqual(times("withdrawn"), [0, 1000], "withdrawn: no run at 60 s");
    assert.deepEqual(times("later"), [0, 1000, 91_000], "later: not at 60 s, at 1 + 90 s");
    assert.deepEqual(times("kept"), [0, 1000, 60_000]);
    assert.equal(h.ctrl.queue.delayed, 0);
    await h.stop();
  });

  it("has every reconcile series from registration, before it starts or reconciles, as controller-runtime does", async () => {
    const metrics = new RuntimeMetrics({ defaultMetrics: false });
    const notStarted = (): never => {
      throw new Error("a registered controller that has not started reads no informer");
    };
    new Controller(
      { name: "podset", forKind: PodSet, sources: [], reconciler: async () => {}, concurrency: 3 },
      {
        informer: notStarted,
        store: notStarted,
        client: unusedClient,
        recorder: logEventRecorder(log),
        log,
        metrics,
      },
    );
    const text = await metrics.registry.metrics();
    const series = text.split("\n").filter((l) => l.startsWith("controller_runtime_"));
    assert.deepEqual(series.sort(), [
      'controller_runtime_active_workers{controller="podset"} 0',
      'controller_runtime_max_concurrent_reconciles{controller="podset"} 3',
      'controller_runtime_reconcile_errors_total{controller="podset"} 0',
      'controller_runtime_reconcile_total{controller="podset",result="error"} 0',
      'controller_runtime_reconcile_total{controller="podset",result="requeue"} 0',
      'controller_runtime_reconcile_total{controller="podset",result="requeue_after"} 0',
      'controller_runtime_reconcile_total{controller="podset",result="success"} 0',
      'controller_runtime_terminal_reconcile_errors_total{controller="podset"} 0',
    ]);
  });

  it("stop() drains in-flight reconciles, and aborts them past the deadline", async () => {
    let aborted = false;
    const h = harness(async (ctx) => {
      await new Promise<void>((resolve) =>
        ctx.signal.addEventListener("abort", () => {
          aborted = true;
          resolve();
        }),
      );
    });
    h.sources.PodSet.push("ADDED", obj("PodSet", "ns", "slow", "1"));
    await until(() => h.ctrl.inFlight.length === 1, "reconcile started");
    const stopping = h.ctrl.stop(5000);
    await h.clock.advance(4999);
    assert.equal(aborted, false, "not aborted before the deadline");
    await h.clock.advance(1);
    assert.equal(await stopping, false, "reports that the deadline passed");
    assert.equal(aborted, true);
    await h.stop();
  });

  it("builder rejects bad input with the field and value", () => {
    assert.throws(
      () => new ControllerBuilder("PodSet!", () => assert.fail()),
      /controller name "PodSet!" must be/,
    );
    assert.throws(
      () => new ControllerBuilder("a".repeat(64), () => assert.fail()),
      /must be lowercase letters, digits and '-', at most 63/,
    );
    assert.throws(
      () => new ControllerBuilder("x", () => assert.fail()).concurrency(0),
      /concurrency must be an integer >= 1, got 0/,
    );
    assert.throws(
      () =>
        new Controller(
          { name: "x", forKind: builtinKinds.Pod, sources: [], reconciler: async () => {}, concurrency: 1.5 },
          {} as ControllerDeps,
        ),
      /controller "x" concurrency must be an integer >= 1, got 1.5/,
      "the Controller checks as its builder does",
    );
    assert.throws(
      () => new ControllerBuilder("x", () => assert.fail()).reconcile(async () => {}),
      /call for\(kind\) before/,
    );
  });
});

describe("Controller with an optional source (a kind the cluster may not serve)", () => {
  const Route = exampleKind("Route", "routes");

  it("reconciles every object when the kind appears or goes, and tells the reconciler", async () => {
    const clock = new FakeClock(1_000_000);
    const podsets = new Informer(
      new PushSource([obj("PodSet", "ns", "a", "1"), obj("PodSet", "ns", "b", "2")]),
      PodSet,
    );
    let served = false;
    const servedHandlers: ((s: boolean) => void)[] = [];
    const routes = {
      addHandler: () => {},
      waitForSync: async () => true,
      onServedChange: (fn: (s: boolean) => void) => servedHandlers.push(fn),
    };
    const seen: string[] = [];
    let captured: ControllerOptions | undefined;
    const ctrl = new ControllerBuilder("podset", (opts) => {
      captured = opts;
      return new Controller(opts, {
        informer: (k) => (k.kind === "PodSet" ? podsets : routes),
        store: () => podsets.store,
        served: (k) => k.kind !== "Route" || served,
        client: unusedClient,
        recorder: logEventRecorder(log),
        log,
        clock,
      });
    })
      .for(PodSet)
      .owns(Route, { optional: true })
      .reconcile(async (ctx) => {
        seen.push(`${ctx.request.name}:${ctx.served(Route) ? "served" : "absent"}`);
      });
    assert.deepEqual(
      captured?.sources.map((s) => [s.kind.kind, s.optional ?? false]),
      [
        ["PodSet", false],
        ["Route", true],
      ],
    );
    const ac = new AbortController();
    const run = podsets.run(ac.signal);
    const started = ctrl.start();
    await until(() => seen.length === 2, "initial reconciles");
    assert.deepEqual(seen.sort(), ["a:absent", "b:absent"]);
    served = true;
    for (const fn of servedHandlers) fn(true);
    await until(() => seen.length === 4, "every object again once the kind is served");
    assert.deepEqual(seen.slice(2).sort(), ["a:served", "b:served"]);
    await ctrl.stop(1000);
    await started;
    ac.abort();
    await run;
  });
});
