import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import {
  ApiError,
  builtinKinds,
  controllerOwnerRef,
  Informer,
  isConflict,
  type KubeObject,
  Manager,
  type ResourceKind,
  type WatchEvent,
} from "../../../src/runtime/index.ts";
import { FakeClient } from "../../../src/runtime/testing.ts";

const ns = "default";
const { ConfigMap, Deployment, Pod } = builtinKinds;

const Widget: ResourceKind = {
  group: "examples.mlmodel.dev",
  version: "v1",
  kind: "Widget",
  plural: "widgets",
  namespaced: true,
};

function configMap(
  name: string,
  data: Record<string, string> = {},
  labels?: Record<string, string>,
): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: ns, ...(labels ? { labels } : {}) },
    data,
  };
}

function widget(name: string, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: "examples.mlmodel.dev/v1", kind: "Widget", metadata: { name, namespace: ns }, spec };
}

async function rejects(p: Promise<unknown>, code: number, reason?: string): Promise<ApiError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ApiError, `an ApiError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (reason) assert.equal(err.reason, reason, err.message);
    return err;
  }
  assert.fail(`expected a ${code}`);
}

describe("FakeClient reads and writes", () => {
  it("creates with uid, resourceVersion, generation where the kind keeps one; a second create of the name is 409 AlreadyExists", async () => {
    const client = new FakeClient();
    const created = await client.create(ConfigMap, configMap("a", { k: "v" }));
    assert.ok(created.metadata.uid);
    assert.equal(created.metadata.resourceVersion, client.resourceVersion);
    assert.equal(created.metadata.generation, undefined, "a ConfigMap has none, as on a real API server");
    const counted = await client.create(Widget, widget("w", { size: 1 }));
    assert.equal(counted.metadata.generation, 1, "a custom resource starts at 1");
    assert.deepEqual((await client.get(ConfigMap, { namespace: ns, name: "a" }))?.["data"], { k: "v" });
    await rejects(client.create(ConfigMap, configMap("a")), 409, "AlreadyExists");
    const named = await client.create(ConfigMap, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { generateName: "gen-", namespace: ns },
    } as KubeObject);
    assert.match(named.metadata.name!, /^gen-[a-z0-9]{5}$/);
  });

  it("seeds the objects a test starts from, status kept, without recording requests", async () => {
    const client = new FakeClient().seed(Widget, { ...widget("w", { size: 1 }), status: { phase: "Ready" } });
    const seeded = client.peek(Widget, { namespace: ns, name: "w" });
    assert.deepEqual(seeded?.["status"], { phase: "Ready" });
    assert.ok(seeded?.metadata.uid && seeded.metadata.resourceVersion);
    assert.deepEqual(client.requests, []);
    assert.equal((await client.list(Widget, { namespace: ns })).items.length, 1);
  });

  it("stores a Secret's stringData in its data, base64-encoded", async () => {
    const client = new FakeClient();
    const secret = { apiVersion: "v1", kind: "Secret", metadata: { name: "s", namespace: ns } };
    await client.apply(
      builtinKinds.Secret,
      { ...secret, stringData: { token: "abc" } },
      { fieldManager: "m" },
    );
    const stored = (await client.get(builtinKinds.Secret, { namespace: ns, name: "s" }))!;
    assert.deepEqual(stored["data"], { token: Buffer.from("abc").toString("base64") });
    assert.equal(stored["stringData"], undefined);
  });

  it("answers a missing object: get undefined, delete false, patch and status writes 404", async () => {
    const client = new FakeClient();
    const key = { namespace: ns, name: "none" };
    assert.equal(await client.get(ConfigMap, key), undefined);
    assert.equal(await client.delete(ConfigMap, key), false);
    await rejects(client.patch(ConfigMap, key, { data: { a: "b" } }, "merge"), 404, "NotFound");
    await rejects(client.applyStatus(Widget, widget("none", {}), { fieldManager: "m" }), 404);
    await rejects(client.replace(ConfigMap, configMap("none")), 404);
  });

  it("refuses a write from a stale resourceVersion with 409 Conflict; a write that changes nothing keeps it", async () => {
    const client = new FakeClient();
    const first = await client.create(ConfigMap, configMap("a", { k: "1" }));
    const second = await client.replace(ConfigMap, { ...first, data: { k: "2" } });
    assert.notEqual(second.metadata.resourceVersion, first.metadata.resourceVersion);
    const stale = await rejects(client.replace(ConfigMap, { ...first, data: { k: "3" } }), 409, "Conflict");
    assert.ok(isConflict(stale));
    await rejects(
      client.patch(
        ConfigMap,
        { namespace: ns, name: "a" },
        { metadata: { resourceVersion: first.metadata.resourceVersion }, data: { k: "4" } },
        "merge",
      ),
      409,
    );
    await rejects(
      client.delete(ConfigMap, { namespace: ns, name: "a" }, { preconditions: { resourceVersion: "1" } }),
      409,
    );
    const again = await client.replace(ConfigMap, { ...second, data: { k: "2" } });
    assert.equal(
      again.metadata.resourceVersion,
      second.metadata.resourceVersion,
      "a no-op write is no new version",
    );
    assert.equal(
      (await client.get(ConfigMap, { namespace: ns, name: "a" }))?.["data"]?.toString(),
      { k: "2" }.toString(),
    );
  });

  it("refuses a replace of a custom resource without a resourceVersion with 422; a built-in kind's is unconditional", async () => {
    const client = new FakeClient();
    const created = await client.create(Widget, widget("w", { size: 1 }));
    const { resourceVersion: _rv, ...metadata } = created.metadata;
    const err = await rejects(
      client.replace(Widget, { ...created, metadata, spec: { size: 2 } }),
      422,
      "Invalid",
    );
    assert.match(err.message, /metadata\.resourceVersion must be specified/);
    await rejects(
      client.replace(Widget, { ...created, metadata, status: { n: 1 } }, { subresource: "status" }),
      422,
    );
    await client.create(ConfigMap, configMap("a", { k: "1" }));
    const replaced = await client.replace(ConfigMap, configMap("a", { k: "2" }));
    assert.deepEqual(replaced["data"], { k: "2" });
  });

  it("answers 404 to the status subresource of a built-in kind that has none", async () => {
    const client = new FakeClient();
    const key = { namespace: ns, name: "a" };
    await client.create(ConfigMap, configMap("a", { k: "1" }));
    const status = { ...configMap("a"), status: { x: "1" } };
    const err = await rejects(
      client.patch(ConfigMap, key, status, "merge", { subresource: "status" }),
      404,
      "NotFound",
    );
    assert.match(err.message, /configmaps\/status/);
    await rejects(client.applyStatus(ConfigMap, status, { fieldManager: "m" }), 404);
    await rejects(client.replace(ConfigMap, status, { subresource: "status" }), 404);
    assert.equal(await client.get(ConfigMap, key, { subresource: "status" }), undefined);
    await client.create(Pod, { apiVersion: "v1", kind: "Pod", metadata: { name: "p", namespace: ns } });
    const pod = await client.applyStatus(
      Pod,
      { apiVersion: "v1", kind: "Pod", metadata: { name: "p", namespace: ns }, status: { phase: "Running" } },
      { fieldManager: "kubelet" },
    );
    assert.deepEqual(pod["status"], { phase: "Running" }, "a Pod has one");
  });

  it("bumps generation on a spec change only, not on labels or status", async () => {
    const client = new FakeClient();
    await client.create(Widget, widget("w", { size: 1 }));
    const key = { namespace: ns, name: "w" };
    await client.patch(Widget, key, { metadata: { labels: { a: "b" } } }, "merge");
    await client.patch(Widget, key, { status: { ready: true } }, "merge", { subresource: "status" });
    assert.equal((await client.get(Widget, key))?.metadata.generation, 1);
    await client.patch(Widget, key, { spec: { size: 2 } }, "merge");
    assert.equal((await client.get(Widget, key))?.metadata.generation, 2);
    await client.patch(Widget, key, [{ op: "replace", path: "/spec/size", value: 3 }], "json");
    assert.equal((await client.get(Widget, key))?.metadata.generation, 3);
    await rejects(client.patch(Widget, key, [{ op: "test", path: "/spec/size", value: 9 }], "json"), 422);
  });

  it("keeps the status subresource apart: status writes change only status, other writes never status", async () => {
    const client = new FakeClient();
    const key = { namespace: ns, name: "w" };
    const created = await client.create(Widget, {
      ...widget("w", { size: 1 }),
      status: { phase: "ignored" },
    });
    assert.equal(created["status"], undefined, "a create drops status");
    await client.applyStatus(
      Widget,
      { ...widget("w", { size: 99 }), status: { phase: "Ready" } },
      { fieldManager: "ctl" },
    );
    let stored = (await client.get(Widget, key))!;
    assert.deepEqual(stored["spec"], { size: 1 });
    assert.deepEqual(stored["status"], { phase: "Ready" });
    await client.replace(Widget, { ...stored, spec: { size: 2 }, status: { phase: "Overwritten?" } });
    await client.patch(Widget, key, { status: { phase: "Nope" } }, "merge");
    stored = (await client.get(Widget, key))!;
    assert.deepEqual(stored["spec"], { size: 2 });
    assert.deepEqual(stored["status"], { phase: "Ready" });
  });
});

describe("FakeClient server-side apply", () => {
  const key = { namespace: ns, name: "d" };
  const deployment = (replicas: number, labels: Record<string, string>): KubeObject => ({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "d", namespace: ns, labels },
    spec: { replicas, template: { spec: { containers: [{ name: "c", image: "i:1" }] } } },
  });

  it("creates (created: true), then merges: a field the manager leaves out is removed, other managers' stay", async () => {
    const client = new FakeClient();
    const first = await client.applyForVersion(Deployment, deployment(2, { a: "1", b: "1" }), {
      fieldManager: "op",
    });
    assert.equal(first.created, true);
    await client.patch(Deployment, key, { metadata: { labels: { mine: "x" } } }, "merge", {
      fieldManager: "kubectl",
    });
    const second = await client.applyForVersion(Deployment, deployment(2, { a: "1" }), {
      fieldManager: "op",
    });
    assert.equal(second.created, false);
    const stored = (await client.get(Deployment, key))!;
    assert.deepEqual(
      stored.metadata.labels,
      { a: "1", mine: "x" },
      "b dropped by its manager, kubectl's kept",
    );
    assert.deepEqual(client.fieldOwners(Deployment, key)["kubectl"], [".metadata.labels.mine"]);
    const unchanged = await client.applyForVersion(Deployment, deployment(2, { a: "1" }), {
      fieldManager: "op",
    });
    assert.equal(unchanged.resourceVersion, second.resourceVersion, "the same apply again writes nothing");
  });

  it('takes patch(..., "apply") as an apply and a strategic merge patch as a JSON merge patch', async () => {
    const client = new FakeClient();
    await client.patch(Deployment, key, deployment(2, { a: "1" }), "apply", { fieldManager: "op" });
    assert.deepEqual(client.fieldOwners(Deployment, key)["op"]?.includes(".spec.replicas"), true);
    await client.patch(Deployment, key, { metadata: { labels: { a: null, b: "2" } } }, "strategic");
    assert.deepEqual((await client.get(Deployment, key))?.metadata.labels, { b: "2" });
    await assert.rejects(
      client.patch(Deployment, key, deployment(2, {}), "apply"),
      /needs opts.fieldManager/,
    );
  });

  it("conflicts on a field another manager set to another value, unless forced; an equal value is shared", async () => {
    const client = new FakeClient();
    await client.apply(Deployment, deployment(2, {}), { fieldManager: "op" });
    await client.patch(Deployment, key, { spec: { replicas: 5 } }, "merge", { fieldManager: "hpa" });
    const err = await rejects(client.apply(Deployment, deployment(2, {}), { fieldManager: "op" }), 409);
    assert.match(err.message, /conflict with "hpa": \.spec\.replicas/);
    assert.deepEqual(
      err.status?.details?.causes,
      [{ reason: "FieldManagerConflict", message: 'conflict with "hpa"', field: ".spec.replicas" }],
      "each conflict a cause, as the API server's Status lists them",
    );
    await client.apply(Deployment, deployment(5, {}), { fieldManager: "op" });
    assert.ok(client.fieldOwners(Deployment, key)["hpa"]?.includes(".spec.replicas"), "shared when equal");
    const forced = await client.apply(Deployment, deployment(3, {}), { fieldManager: "op", force: true });
    assert.equal((forced["spec"] as { replicas: number }).replicas, 3);
    assert.ok(!client.fieldOwners(Deployment, key)["hpa"]?.includes(".spec.replicas"), "force takes it");
  });
});

describe("FakeClient garbage collection and finalizers", () => {
  it("deleting an owner deletes its dependents at once, down the chain; a dependent with another owner stays", async () => {
    const client = new FakeClient();
    const owner = await client.create(Widget, widget("owner", {}));
    const other = await client.create(Widget, widget("other", {}));
    const child = await client.create(ConfigMap, {
      ...configMap("child"),
      metadata: { name: "child", namespace: ns, ownerReferences: [controllerOwnerRef(owner)] },
    });
    await client.create(Pod, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "grandchild", namespace: ns, ownerReferences: [controllerOwnerRef(child)] },
    });
    await client.create(ConfigMap, {
      ...configMap("shared"),
      metadata: {
        name: "shared",
        namespace: ns,
        ownerReferences: [controllerOwnerRef(owner), { ...controllerOwnerRef(other), controller: false }],
      },
    });
    assert.equal(await client.delete(Widget, { namespace: ns, name: "owner" }), true);
    assert.deepEqual(
      client.objects(ConfigMap).map((o) => o.metadata.name),
      ["shared"],
    );
    assert.deepEqual(client.objects(Pod), []);
    const shared = client.peek(ConfigMap, { namespace: ns, name: "shared" })!;
    assert.deepEqual(
      shared.metadata.ownerReferences?.map((r) => r.name),
      ["other"],
    );
  });

  it("orphans dependents with propagationPolicy Orphan", async () => {
    const client = new FakeClient();
    const owner = await client.create(Widget, widget("owner", {}));
    await client.create(ConfigMap, {
      ...configMap("child"),
      metadata: { name: "child", namespace: ns, ownerReferences: [controllerOwnerRef(owner)] },
    });
    await client.delete(Widget, { namespace: ns, name: "owner" }, { propagationPolicy: "Orphan" });
    assert.equal(
      client.peek(ConfigMap, { namespace: ns, name: "child" })?.metadata.ownerReferences,
      undefined,
    );
  });

  it("keeps an object with finalizers as terminating until the last one is removed", async () => {
    const client = new FakeClient();
    const key = { namespace: ns, name: "w" };
    await client.create(Widget, {
      ...widget("w", {}),
      metadata: { ...key, finalizers: ["example/cleanup"] },
    });
    await client.delete(Widget, key);
    const terminating = await client.get(Widget, key);
    assert.ok(terminating?.metadata.deletionTimestamp, "deletionTimestamp set");
    assert.equal(terminating?.metadata.generation, 2, "deletion started: generation bumped");
    await client.patch(Widget, key, { metadata: { finalizers: null } }, "merge");
    assert.equal(await client.get(Widget, key), undefined);
  });

  it("refuses a new finalizer on a terminating object with 422, by patch and by apply, ownership untouched", async () => {
    const client = new FakeClient();
    const key = { namespace: ns, name: "w" };
    const held = (finalizers: string[]) => ({ ...widget("w", {}), metadata: { ...key, finalizers } });
    await client.apply(Widget, held(["example/a"]), { fieldManager: "op" });
    await client.delete(Widget, key);
    const owners = client.fieldOwners(Widget, key);
    const err = await rejects(
      client.patch(Widget, key, { metadata: { finalizers: ["example/a", "example/b"] } }, "merge"),
      422,
      "Invalid",
    );
    assert.match(err.message, /no new finalizers can be added if the object is being deleted.*example\/b/);
    await rejects(client.apply(Widget, held(["example/b"]), { fieldManager: "other", force: true }), 422);
    assert.deepEqual(client.fieldOwners(Widget, key), owners, "a refused forced apply takes nothing");
    await client.apply(Widget, held([]), { fieldManager: "op" });
    assert.equal(await client.get(Widget, key), undefined, "removing the finalizer is allowed and ends it");
  });
});

describe("FakeClient list and watch", () => {
  it("lists by label selector (=, !=, in, notin, exists, !exists) and field selector; a bad selector is 400", async () => {
    const client = new FakeClient();
    await client.create(ConfigMap, configMap("a", {}, { app: "web", tier: "front" }));
    await client.create(ConfigMap, configMap("b", {}, { app: "web" }));
    await client.create(ConfigMap, configMap("c", {}, { app: "db" }));
    const names = async (labelSelector: string, fieldSelector?: string) =>
      (
        await client.list(ConfigMap, {
          namespace: ns,
          labelSelector,
          ...(fieldSelector ? { fieldSelector } : {}),
        })
      ).items.map((o) => o.metadata.name);
    assert.deepEqual(await names("app=web"), ["a", "b"]);
    assert.deepEqual(await names("app!=web"), ["c"]);
    assert.deepEqual(await names("app in (db, cache)"), ["c"]);
    assert.deepEqual(await names("app notin (db),tier"), ["a"]);
    assert.deepEqual(await names("!tier"), ["b", "c"]);
    assert.deepEqual(await names("", "metadata.name=b"), ["b"]);
    await rejects(client.list(ConfigMap, { labelSelector: "app in db" }), 400, "BadRequest");
    const page = await client.list(ConfigMap, { limit: 2 });
    assert.equal(page.items.length, 2);
    const rest = await client.list(ConfigMap, { limit: 2, continue: page.continue! });
    assert.deepEqual(
      rest.items.map((o) => o.metadata.name),
      ["c"],
    );
  });

  it("watches from a resourceVersion: replays what happened since, then live; leaving a selector is DELETED", async () => {
    const client = new FakeClient();
    await client.create(ConfigMap, configMap("before", {}, { app: "web" }));
    const from = client.resourceVersion;
    await client.create(ConfigMap, configMap("a", {}, { app: "web" }));
    const ac = new AbortController();
    const seen: string[] = [];
    const done = (async () => {
      for await (const e of client.watch(
        ConfigMap,
        { resourceVersion: from, labelSelector: "app=web" },
        ac.signal,
      )) {
        seen.push(`${e.type} ${e.object.metadata.name}`);
        if (seen.length === 4) ac.abort();
      }
    })();
    await client.patch(ConfigMap, { namespace: ns, name: "a" }, { data: { x: "1" } }, "merge");
    await client.create(ConfigMap, configMap("other", {}, { app: "db" }));
    await client.patch(
      ConfigMap,
      { namespace: ns, name: "a" },
      { metadata: { labels: { app: "db" } } },
      "merge",
    );
    await client.delete(ConfigMap, { namespace: ns, name: "before" });
    await done;
    assert.deepEqual(seen, ["ADDED a", "MODIFIED a", "DELETED a", "DELETED before"]);
  });

  it("starts a watch without a resourceVersion with every current object ADDED", async () => {
    const client = new FakeClient();
    await client.create(ConfigMap, configMap("a"));
    await client.create(ConfigMap, configMap("b"));
    const ac = new AbortController();
    const seen: string[] = [];
    for await (const e of client.watch(
      ConfigMap,
      { namespace: ns, fieldSelector: "metadata.name!=b" },
      ac.signal,
    )) {
      seen.push(`${e.type} ${e.object.metadata.name}`);
      if (seen.length === 2) ac.abort();
      else await client.create(ConfigMap, configMap("c"));
    }
    assert.deepEqual(seen, ["ADDED a", "ADDED c"]);
  });

  it("after compact(), an open watch and a watch from an older resourceVersion end with 410 Expired", async () => {
    const client = new FakeClient();
    await client.create(ConfigMap, configMap("a"));
    const old = client.resourceVersion;
    const ac = new AbortController();
    const open = (async () => {
      const events: WatchEvent[] = [];
      for await (const e of client.watch(ConfigMap, { resourceVersion: old }, ac.signal)) events.push(e);
      return events;
    })();
    await client.create(ConfigMap, configMap("b"));
    client.compact();
    await rejects(open, 410, "Expired");
    const again = client.watch(ConfigMap, { resourceVersion: old }, ac.signal);
    await rejects(again.next(), 410, "Expired");
    ac.abort();
  });

  it("feeds an Informer: its store follows creates, updates and deletes, and relists after a compaction", async () => {
    const client = new FakeClient();
    await client.create(ConfigMap, configMap("a"));
    const informer = new Informer(client, ConfigMap, { scope: { namespace: ns } });
    const ac = new AbortController();
    const running = informer.run(ac.signal);
    assert.equal(await informer.waitForSync(ac.signal), true);
    const changes: string[] = [];
    informer.addHandler((c) => changes.push(`${c.type} ${c.object.metadata.name}`));
    const until = async (what: () => boolean) => {
      for (let i = 0; i < 1000 && !what(); i++) await new Promise((r) => setImmediate(r));
      assert.ok(what(), `the informer caught up: ${JSON.stringify(changes)}`);
    };
    await client.create(ConfigMap, configMap("b"));
    await client.patch(ConfigMap, { namespace: ns, name: "a" }, { data: { x: "1" } }, "merge");
    await client.delete(ConfigMap, { namespace: ns, name: "b" });
    await until(() => changes.length === 4);
    assert.deepEqual(changes, ["add a", "add b", "update a", "delete b"]);
    const listsBefore = client.requests.filter((r) => r.verb === "list").length;
    client.compact();
    await client.create(ConfigMap, configMap("c"));
    await until(() => informer.store.get({ namespace: ns, name: "c" }) !== undefined);
    assert.equal(client.requests.filter((r) => r.verb === "list").length, listsBefore + 1, "one relist");
    ac.abort();
    await running;
  });
});

describe("FakeClient as a test double", () => {
  it("records every call with its code and fails the one it was told to", async () => {
    const client = new FakeClient();
    const codes: number[] = [];
    client.onRequest((r) => codes.push(r.code));
    client.failNext({ verb: "create", name: "b" }, 500);
    await client.create(ConfigMap, configMap("a"));
    await rejects(client.create(ConfigMap, configMap("b")), 500);
    await client.create(ConfigMap, configMap("b"));
    assert.deepEqual(
      client.requests.map((r) => `${r.verb} ${r.name} ${r.code}`),
      ["create a 201", "create b 500", "create b 201"],
    );
    assert.deepEqual(codes, [201, 500, 201]);
  });

  it("serves discovery for the kinds it knows; an unserved kind answers 404", async () => {
    const client = new FakeClient();
    assert.equal(await client.apiResources(Widget.group, Widget.version), undefined);
    client.serve(Widget);
    assert.deepEqual(await client.apiResources(Widget.group, Widget.version), [
      { name: "widgets", kind: "Widget", namespaced: true },
    ]);
    client.unserve(Widget);
    await rejects(client.list(Widget), 404);
  });

  it("runs a Manager: a controller reconciles from caches the fake fills; a 410 expiry is logged at debug, not warn", async () => {
    const client = new FakeClient();
    const records: { level: number; msg: string }[] = [];
    const logger = pino({ level: "debug" }, { write: (line: string) => records.push(JSON.parse(line)) });
    const mgr = new Manager({ client, logger });
    const seen: string[] = [];
    mgr
      .controller("widgets")
      .for(ConfigMap)
      .reconcile(async (ctx) => {
        const cm = ctx.cache(ConfigMap).get(ctx.request);
        if (cm && !cm.metadata.labels?.["seen"]) {
          seen.push(ctx.request.name);
          await ctx.client.patch(ConfigMap, ctx.request, { metadata: { labels: { seen: "yes" } } }, "merge");
        }
      });
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    await client.create(ConfigMap, configMap("a"));
    const until = async (what: () => boolean) => {
      for (let i = 0; i < 2000 && !what(); i++) await new Promise((r) => setTimeout(r, 1));
      assert.ok(what(), "caught up");
    };
    await until(
      () => client.peek(ConfigMap, { namespace: ns, name: "a" })?.metadata.labels?.["seen"] === "yes",
    );
    client.compact();
    await client.create(ConfigMap, configMap("b"));
    await until(
      () => client.peek(ConfigMap, { namespace: ns, name: "b" })?.metadata.labels?.["seen"] === "yes",
    );
    ac.abort();
    await running;
    assert.deepEqual(seen, ["a", "b"]);
    const expiry = records.filter((r) => /410/.test(r.msg));
    assert.equal(expiry.length, 1, JSON.stringify(records.map((r) => r.msg)));
    assert.equal(expiry[0]!.level, 20, "debug");
    assert.deepEqual(
      records.filter((r) => r.level >= 40).map((r) => r.msg),
      [],
      "no warning or error",
    );
  });
});
