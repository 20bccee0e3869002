import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import { builtinKinds, KubeClient, type KubeObject, Manager } from "../../../src/runtime/index.ts";

const client = new KubeClient({ server: "http://unused.invalid", headers: async () => ({}) });

describe("Manager caches", () => {
  it("refuse a second registration that asks for another transform or label selector, instead of ignoring it", () => {
    const mgr = new Manager({ client, logger: pino({ level: "silent" }) });
    const slim = (o: KubeObject): KubeObject => ({
      apiVersion: o.apiVersion,
      kind: o.kind,
      metadata: o.metadata,
    });
    // Registered first, as the operator does: the controller's owns() then shares this cache.
    mgr.cache(builtinKinds.Pod, { transform: slim, labelSelector: "app" });
    mgr
      .controller("c")
      .for(builtinKinds.ConfigMap)
      .owns(builtinKinds.Pod)
      .owns(builtinKinds.Job)
      .reconcile(async () => {});
    assert.doesNotThrow(() => mgr.cache(builtinKinds.Pod, { transform: slim, labelSelector: "app" }));
    assert.doesNotThrow(() => mgr.cache(builtinKinds.Pod), "asking for nothing in particular is fine");
    assert.throws(
      () => mgr.cache(builtinKinds.Job, { transform: slim }),
      /cache of Job.* already registered with no transform/,
    );
    assert.throws(
      () => mgr.cache(builtinKinds.Pod, { labelSelector: "other" }),
      /already registered with another labelSelector/,
    );
  });
});
