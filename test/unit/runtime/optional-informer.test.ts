import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ListResult, WatchOptions } from "../../../src/runtime/client.ts";
import { FakeClock, settle } from "../../../src/runtime/clock.ts";
import { ApiError } from "../../../src/runtime/errors.ts";
import { OptionalInformer } from "../../../src/runtime/optional-informer.ts";
import type { StoreChange } from "../../../src/runtime/store.ts";
import type { KubeObject, WatchEvent } from "../../../src/runtime/types.ts";
import { exampleKind, obj, PushSource } from "./scripted-source.ts";

const Widget = exampleKind("Widget", "widgets");

/** A source whose list fails with 404 while `gone` is set (the CRD deleted), else serves `inner`. */
class MaybeGoneSource extends PushSource {
  gone = false;
  lists = 0;
  override async list(): Promise<ListResult<KubeObject>> {
    this.lists++;
    if (this.gone) throw notFound();
    return super.list();
  }

  /** Ends the watch at the first event after `gone` is set; a new watch then gets 404. */
  override async *watch(opts: WatchOptions, signal: AbortSignal): AsyncGenerator<WatchEvent> {
    if (this.gone) throw notFound();
    for await (const event of super.watch(opts, signal)) {
      if (this.gone) return;
      yield event;
    }
  }
}

const notFound = () =>
  new ApiError(404, "the server could not find the requested resource", { reason: "NotFound" });

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000 && !cond(); i++) await settle();
  assert.ok(cond(), `timed out waiting for: ${what}`);
}

function setup(initiallyServed: boolean, items: KubeObject[] = []) {
  const clock = new FakeClock(1_000_000);
  const source = new MaybeGoneSource(items, "5");
  let served = initiallyServed;
  let asked = 0;
  const informer = new OptionalInformer(source, Widget, {
    pollIntervalMs: 30_000,
    healthGracePeriodMs: 10_000,
    watcher: { clock },
    discover: async () => {
      asked++;
      if (served === undefined) throw new Error("connection refused");
      return served;
    },
  });
  const changes: string[] = [];
  const servedChanges: boolean[] = [];
  informer.addHandler((c: StoreChange) => changes.push(`${c.type}:${c.object.metadata.name}`));
  informer.onServedChange((s) => servedChanges.push(s));
  const ac = new AbortController();
  const run = informer.run(ac.signal);
  return {
    clock,
    source,
    informer,
    changes,
    servedChanges,
    get asked() {
      return asked;
    },
    setServed(value: boolean | undefined) {
      served = value as boolean;
    },
    async stop() {
      ac.abort();
      await run;
    },
  };
}

describe("OptionalInformer", () => {
  it("is synced with an empty view and never lists while the kind is not served", async () => {
    const h = setup(false, [obj("Widget", "ns", "a", "1")]);
    assert.equal(await h.informer.waitForSync(), true);
    assert.deepEqual([h.informer.hasSynced(), h.informer.served(), h.informer.store.size], [true, false, 0]);
    await h.clock.advance(90_000);
    assert.equal(h.source.lists, 0, "no list of a kind that is not served");
    assert.equal(h.asked, 4, "discovery asked at start and every 30 s");
    await h.stop();
  });

  it("starts watching when the kind appears, then empties the store and says so when it goes", async () => {
    const h = setup(false, [obj("Widget", "ns", "a", "1"), obj("Widget", "ns", "b", "2")]);
    await h.informer.waitForSync();
    h.setServed(true);
    await h.clock.advance(30_000);
    await until(() => h.informer.served(), "served after the next poll");
    assert.deepEqual(h.changes.sort(), ["add:a", "add:b"]);
    assert.deepEqual(h.servedChanges, [true]);
    h.source.push("ADDED", obj("Widget", "ns", "c", "6"));
    await until(() => h.changes.includes("add:c"), "watch events flow while served");
    h.setServed(false);
    await h.clock.advance(30_000);
    await until(() => !h.informer.served(), "not served after the next poll");
    assert.deepEqual(h.informer.store.size, 0);
    assert.deepEqual(h.changes.slice(3).sort(), ["delete:a", "delete:b", "delete:c"]);
    assert.deepEqual(h.servedChanges, [true, false]);
    // And back again: a fresh list into the same store.
    h.setServed(true);
    await h.clock.advance(30_000);
    await until(() => h.informer.served(), "served again");
    assert.deepEqual(h.servedChanges, [true, false, true]);
    assert.equal(h.informer.store.size, 2, "the relist is the truth: c was not in the list");
    await h.stop();
  });

  it("waits for the full list before it reports synced when the kind is served from the start", async () => {
    const h = setup(true, [obj("Widget", "ns", "a", "1")]);
    assert.equal(await h.informer.waitForSync(), true);
    assert.deepEqual([h.informer.served(), h.informer.store.size], [true, 1]);
    assert.deepEqual(h.changes, ["add:a"]);
    await h.stop();
  });

  it("asks discovery at once when the watch gets a 404 (the CRD was deleted), not at the next poll", async () => {
    const h = setup(true, [obj("Widget", "ns", "a", "1")]);
    await h.informer.waitForSync();
    const askedBefore = h.asked;
    h.setServed(false);
    h.source.gone = true;
    // The watch ends, the relist gets 404: the informer asks discovery without waiting 30 s.
    h.source.push("ADDED", obj("Widget", "ns", "late", "9"));
    for (let i = 0; i < 10 && h.informer.served(); i++) await h.clock.advance(200);
    await until(() => !h.informer.served(), "not served after the 404");
    assert.ok(h.asked > askedBefore);
    assert.ok(h.clock.now() - 1_000_000 < 30_000, "well before the poll interval");
    assert.deepEqual(h.servedChanges, [true, false], "served at the first list, then gone");
    await h.stop();
  });

  it("reports discovery errors as unhealthy after the grace period, and recovers", async () => {
    const h = setup(false);
    await h.informer.waitForSync();
    h.setServed(undefined);
    await h.clock.advance(30_000);
    assert.equal(h.informer.health().healthy, true, "within the grace period");
    await h.clock.advance(30_000);
    const health = h.informer.health();
    assert.equal(health.healthy, false);
    assert.match(health.healthy ? "" : health.lastError, /connection refused/);
    h.setServed(false);
    await h.clock.advance(30_000);
    assert.equal(h.informer.health().healthy, true);
    await h.stop();
  });

  it("needs a discovery function over a custom source", () => {
    assert.throws(() => new OptionalInformer(new PushSource(), Widget), /needs opts.discover/);
  });
});
