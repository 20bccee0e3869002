import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  CONTROLLER_OWNER_INDEX,
  MemoryStore,
  MultiStore,
  NAMESPACE_INDEX,
  stripManagedFields,
} from "../../../src/runtime/store.ts";
import type { KubeObject } from "../../../src/runtime/types.ts";

function cm(ns: string, name: string, rv: string, extra: Partial<KubeObject["metadata"]> = {}): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { namespace: ns, name, resourceVersion: rv, ...extra },
  };
}

const owner = (uid: string) => ({
  apiVersion: "x/v1",
  kind: "PodSet",
  name: `o-${uid}`,
  uid,
  controller: true,
});

describe("MemoryStore", () => {
  it("stores, gets and lists by namespace", () => {
    const s = new MemoryStore();
    s.apply(cm("a", "one", "1"));
    s.apply(cm("a", "two", "2"));
    s.apply(cm("b", "one", "3"));
    assert.equal(s.size, 3);
    assert.equal(s.get({ namespace: "b", name: "one" })?.metadata.resourceVersion, "3");
    assert.deepEqual(
      s.list("a").map((o) => o.metadata.name),
      ["one", "two"],
    );
    assert.equal(s.list().length, 3);
    assert.equal(s.byIndex(NAMESPACE_INDEX, "b").length, 1);
  });

  it("hands out frozen objects: mutation throws instead of corrupting the cache", () => {
    const s = new MemoryStore();
    s.apply(cm("a", "x", "1", { labels: { app: "y" } }));
    const got = s.get({ namespace: "a", name: "x" })!;
    assert.throws(() => {
      (got.metadata as { name: string }).name = "changed";
    }, TypeError);
    assert.throws(() => {
      got.metadata.labels!["app"] = "z";
    }, TypeError);
    assert.equal(s.get({ namespace: "a", name: "x" })?.metadata.labels?.["app"], "y");
  });

  it("keeps the controller-owner index current across updates and deletes", () => {
    const s = new MemoryStore();
    s.apply(cm("a", "c1", "1", { ownerReferences: [owner("u1")] }));
    s.apply(cm("a", "c2", "2", { ownerReferences: [owner("u1")] }));
    s.apply(cm("a", "c3", "3", { ownerReferences: [{ ...owner("u2"), controller: false }] }));
    assert.equal(s.byIndex(CONTROLLER_OWNER_INDEX, "u1").length, 2);
    assert.equal(s.byIndex(CONTROLLER_OWNER_INDEX, "u2").length, 0, "non-controller refs are not indexed");
    s.apply(cm("a", "c2", "4", { ownerReferences: [owner("u9")] }));
    assert.deepEqual(
      s.byIndex(CONTROLLER_OWNER_INDEX, "u1").map((o) => o.metadata.name),
      ["c1"],
    );
    s.delete(cm("a", "c1", "5"));
    assert.equal(s.byIndex(CONTROLLER_OWNER_INDEX, "u1").length, 0);
    assert.equal(s.byIndex(CONTROLLER_OWNER_INDEX, "u9").length, 1);
  });

  it("supports user indexes, also added after objects exist, and names unknown indexes in errors", () => {
    const s = new MemoryStore({
      byApp: (o) => (o.metadata.labels?.["app"] ? [o.metadata.labels["app"]] : []),
    });
    s.apply(cm("a", "x", "1", { labels: { app: "web", tier: "1" } }));
    s.apply(cm("a", "y", "2", { labels: { app: "db", tier: "1" } }));
    assert.equal(s.byIndex("byApp", "web").length, 1);
    s.addIndex("byTier", (o) => [o.metadata.labels?.["tier"] ?? "none"]);
    assert.equal(s.byIndex("byTier", "1").length, 2);
    assert.throws(
      () => s.byIndex("nope", "1"),
      /no index "nope"; known: namespace, controller-owner, byApp, byTier/,
    );
  });

  it("replace() swaps in a list, reports adds/updates/deletes and marks synced", () => {
    const s = new MemoryStore();
    assert.equal(s.hasSynced(), false);
    s.apply(cm("a", "keep", "1"));
    s.apply(cm("a", "change", "1"));
    s.apply(cm("a", "gone", "1"));
    const changes = s.replace([cm("a", "keep", "1"), cm("a", "change", "2"), cm("a", "new", "3")]);
    const summary = changes.map((c) => `${c.type}:${c.object.metadata.name}:${c.initial}`).sort();
    assert.deepEqual(summary, ["add:new:true", "delete:gone:true", "update:change:true"]);
    assert.equal(s.hasSynced(), true);
    assert.equal(s.get({ namespace: "a", name: "gone" }), undefined);
  });

  it("a relist's differences are not initial: the watch missed them, they are live changes", () => {
    const s = new MemoryStore();
    s.replace([cm("a", "keep", "1"), cm("a", "change", "1"), cm("a", "gone", "1")]);
    const changes = s.replace([cm("a", "keep", "1"), cm("a", "change", "2"), cm("a", "new", "3")]);
    const summary = changes.map((c) => `${c.type}:${c.object.metadata.name}:${c.initial}`).sort();
    assert.deepEqual(summary, ["add:new:false", "delete:gone:false", "update:change:false"]);
  });

  it("delete of an unknown object is no change", () => {
    const s = new MemoryStore();
    assert.equal(s.delete(cm("a", "x", "1")), undefined);
  });

  it("stripManagedFields drops only managedFields", () => {
    const obj = cm("a", "x", "1", { managedFields: [{ manager: "kubectl" }], labels: { a: "b" } });
    const out = stripManagedFields(obj);
    assert.equal(out.metadata.managedFields, undefined);
    assert.deepEqual(out.metadata.labels, { a: "b" });
    assert.ok(obj.metadata.managedFields, "the input is not modified");
  });
});

describe("MultiStore", () => {
  it("merges several namespace stores", () => {
    const a = new MemoryStore();
    const b = new MemoryStore();
    a.apply(cm("a", "x", "1", { ownerReferences: [owner("u")] }));
    b.apply(cm("b", "y", "2", { ownerReferences: [owner("u")] }));
    const m = new MultiStore([a, b]);
    assert.equal(m.size, 2);
    assert.equal(m.get({ namespace: "b", name: "y" })?.metadata.name, "y");
    assert.equal(m.list().length, 2);
    assert.equal(m.list("a").length, 1);
    assert.equal(m.byIndex(CONTROLLER_OWNER_INDEX, "u").length, 2);
    assert.equal(m.hasSynced(), false);
    a.replace([]);
    b.replace([]);
    assert.equal(m.hasSynced(), true);
  });
});
