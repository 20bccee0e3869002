import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import { KubeClient } from "../../../src/runtime/client.ts";
import { builtinKinds } from "../../../src/runtime/kinds.ts";
import { Manager } from "../../../src/runtime/manager.ts";
import { OptionalInformer } from "../../../src/runtime/optional-informer.ts";
import { exampleKind } from "./scripted-source.ts";

const Route = exampleKind("Route", "routes");
const client = new KubeClient({ server: "http://unused.invalid", headers: async () => ({}) });
const manager = () => new Manager({ client, logger: pino({ level: "silent" }) });

describe("Manager: optional caches", () => {
  it("registers an optional source's cache as an OptionalInformer, not served before it runs", () => {
    const mgr = manager();
    mgr
      .controller("c")
      .for(builtinKinds.ConfigMap)
      .owns(Route, { optional: true })
      .reconcile(async () => {});
    const entry = mgr.caches.find((c) => c.kind.kind === "Route");
    assert.ok(entry?.informers.every((i) => i instanceof OptionalInformer));
    assert.equal(mgr.served(Route), false);
    assert.equal(mgr.served(builtinKinds.ConfigMap), true, "a required cache's kind is served by definition");
    assert.equal(mgr.served(builtinKinds.Secret), false, "a kind not cached is not known to be served");
  });
  it("refuses a required use of a cache registered as optional, saying how to fix it", () => {
    const mgr = manager();
    mgr.cache(Route, { optional: true });
    assert.throws(
      () => mgr.cache(Route),
      /Route.example.com is cached only while it is served \(optional\).*register it as optional too/,
    );
  });
  it("lets an optional use share a required cache (the kind must then be served)", () => {
    const mgr = manager();
    mgr.cache(Route);
    mgr.cache(Route, { optional: true });
    assert.ok(
      mgr.caches
        .find((c) => c.kind.kind === "Route")
        ?.informers.every((i) => !(i instanceof OptionalInformer)),
    );
  });
});
