import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { settle } from "../../../src/runtime/clock.ts";
import { Informer, reflector } from "../../../src/runtime/informer.ts";
import { builtinKinds } from "../../../src/runtime/kinds.ts";
import { MemoryStore, type StoreChange } from "../../../src/runtime/store.ts";
import type { WatcherEvent } from "../../../src/runtime/watcher.ts";
import { obj, PushSource } from "./scripted-source.ts";

async function* from<T>(items: T[]): AsyncGenerator<T> {
  for (const i of items) yield i;
}

const summary = (c: StoreChange | { type: "synced" }) =>
  c.type === "synced" ? "synced" : `${c.type}:${c.object.metadata.name}${c.initial ? ":initial" : ""}`;

describe("reflector", () => {
  it("swaps a (re)list in at initDone, emitting deletes for objects that vanished; only the first list is initial", async () => {
    const store = new MemoryStore();
    const events: WatcherEvent[] = [
      { type: "init" },
      { type: "initApply", object: obj("ConfigMap", "a", "x", "1") },
      { type: "initApply", object: obj("ConfigMap", "a", "y", "2") },
      { type: "initDone", resourceVersion: "2" },
      { type: "apply", object: obj("ConfigMap", "a", "x", "3") },
      { type: "init" },
      { type: "initApply", object: obj("ConfigMap", "a", "x", "3") },
      { type: "initApply", object: obj("ConfigMap", "a", "z", "5") },
      { type: "initDone", resourceVersion: "5" },
    ];
    const out: string[] = [];
    for await (const c of reflector(store, from(events))) out.push(summary(c));
    assert.deepEqual(out, [
      "add:x:initial",
      "add:y:initial",
      "synced",
      "update:x",
      "add:z",
      "delete:y",
      "synced",
    ]);
    assert.deepEqual(
      store
        .list()
        .map((o) => o.metadata.name)
        .sort(),
      ["x", "z"],
    );
  });

  it("a reflector's first list is initial even on a store listed before (an optional kind served again)", async () => {
    const store = new MemoryStore();
    store.replace([obj("ConfigMap", "a", "old", "1")]);
    store.replace([]);
    const events: WatcherEvent[] = [
      { type: "init" },
      { type: "initApply", object: obj("ConfigMap", "a", "back", "2") },
      { type: "initDone", resourceVersion: "2" },
    ];
    const out: string[] = [];
    for await (const c of reflector(store, from(events))) out.push(summary(c));
    assert.deepEqual(out, ["add:back:initial", "synced"]);
  });

  it("does not touch the store before initDone (readers never see half a list)", async () => {
    const store = new MemoryStore();
    store.replace([obj("ConfigMap", "a", "old", "1")]);
    const gen = reflector(
      store,
      from<WatcherEvent>([
        { type: "init" },
        { type: "initApply", object: obj("ConfigMap", "a", "new", "2") },
      ]),
    );
    for await (const _ of gen) assert.fail("nothing is emitted before initDone");
    assert.equal(store.get({ namespace: "a", name: "old" })?.metadata.name, "old");
    assert.equal(store.get({ namespace: "a", name: "new" }), undefined);
  });

  it("strips managedFields by default, or runs a custom transform", async () => {
    const store = new MemoryStore();
    const withMF = obj("ConfigMap", "a", "x", "1", { managedFields: [{ manager: "m" }] });
    for await (const _ of reflector(store, from<WatcherEvent>([{ type: "apply", object: withMF }]))) {
    }
    assert.equal(store.get({ namespace: "a", name: "x" })?.metadata.managedFields, undefined);
    const store2 = new MemoryStore();
    const onlyMeta = (o: typeof withMF) => ({
      apiVersion: o.apiVersion,
      kind: o.kind,
      metadata: { ...o.metadata },
    });
    for await (const _ of reflector(
      store2,
      from<WatcherEvent>([{ type: "apply", object: withMF }]),
      onlyMeta,
    )) {
    }
    assert.ok(store2.get({ namespace: "a", name: "x" })?.metadata.managedFields);
  });
});

describe("Informer", () => {
  it("syncs (also with an empty list), fans changes out and replays the store to late handlers", async () => {
    const source = new PushSource([], "7");
    const inf = new Informer(source, builtinKinds.ConfigMap);
    const seen: string[] = [];
    inf.addHandler((c) => seen.push(summary(c)));
    const ac = new AbortController();
    const run = inf.run(ac.signal);
    assert.equal(await inf.waitForSync(), true);
    source.push("ADDED", obj("ConfigMap", "a", "x", "8"));
    source.push("MODIFIED", obj("ConfigMap", "a", "x", "9"));
    while (seen.length < 2) await settle();
    const late: string[] = [];
    inf.addHandler((c) => late.push(summary(c)));
    source.push("DELETED", obj("ConfigMap", "a", "x", "10"));
    while (seen.length < 3) await settle();
    ac.abort();
    await run;
    assert.deepEqual(seen, ["add:x", "update:x", "delete:x"]);
    assert.deepEqual(late, ["add:x:initial", "delete:x"]);
    assert.equal(source.watches[0]?.resourceVersion, "7");
  });

  it("waitForSync resolves false when aborted before sync", async () => {
    const inf = new Informer(new PushSource(), builtinKinds.ConfigMap);
    const ac = new AbortController();
    const p = inf.waitForSync(ac.signal);
    ac.abort();
    assert.equal(await p, false);
  });
});
