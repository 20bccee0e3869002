/**
 * KubeClient against the real API server: verbs, server-side apply, status subresource,
 * errors with code and reason, paging, watch and its inactivity timeout, request counting.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { parse } from "yaml";
import { type PodSet, PodSetKind } from "../../../examples/podset/podset.ts";
import {
  ApiError,
  builtinKinds,
  KubeClient,
  type KubeObject,
  type RequestRecord,
  WatchInactivityError,
} from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const CM = builtinKinds.ConfigMap;

describe("KubeClient (real API server)", () => {
  const client = KubeClient.fromKubeConfig(kubeConfig());
  const requests: RequestRecord[] = [];
  client.onRequest((r) => requests.push(r));
  let ns: TestNamespace;
  const cm = (name: string, data: Record<string, string> = {}): KubeObject => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: ns.name },
    data,
  });

  before(async () => {
    ns = await createNamespace("rt-client");
  });
  after(async () => {
    await ns.delete();
  });

  it("get/create/replace/patch/delete with ApiError codes and reasons", async () => {
    assert.equal(
      await client.get(CM, { namespace: ns.name, name: "missing" }),
      undefined,
      "404 -> undefined",
    );
    const created = await client.create(CM, cm("a", { k: "1" }));
    assert.ok(created.metadata.uid);
    await assert.rejects(
      client.create(CM, cm("a")),
      (e: unknown) => e instanceof ApiError && e.code === 409 && e.reason === "AlreadyExists",
    );
    const replaced = await client.replace(CM, { ...created, data: { k: "2" } });
    await assert.rejects(
      client.replace(CM, { ...created, data: { k: "stale" } }),
      (e: unknown) => e instanceof ApiError && e.code === 409 && e.reason === "Conflict",
      "a stale resourceVersion conflicts",
    );
    const patched = await client.patch(
      CM,
      { namespace: ns.name, name: "a" },
      [{ op: "add", path: "/data/j", value: "3" }],
      "json",
    );
    assert.deepEqual(patched["data"], { k: "2", j: "3" });
    assert.ok(Number(patched.metadata.resourceVersion) > Number(replaced.metadata.resourceVersion));
    await assert.rejects(
      client.delete(CM, { namespace: ns.name, name: "a" }, { preconditions: { uid: "not-the-uid" } }),
      (e: unknown) => e instanceof ApiError && e.code === 409,
    );
    assert.equal(
      await client.delete(
        CM,
        { namespace: ns.name, name: "a" },
        { preconditions: { uid: created.metadata.uid! } },
      ),
      true,
    );
    assert.equal(await client.delete(CM, { namespace: ns.name, name: "a" }), false, "already gone -> false");
    await assert.rejects(
      client.create(CM, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "Bad_Name", namespace: ns.name },
      }),
      (e: unknown) => e instanceof ApiError && e.code === 422 && e.reason === "Invalid",
    );
  });

  it("server-side apply records the field manager; applyStatus writes only the status subresource", async () => {
    const applied = await client.apply(CM, cm("ssa", { x: "1" }), { fieldManager: "rt-test" });
    const managers = (applied.metadata.managedFields as { manager: string; operation: string }[]).map(
      (m) => `${m.manager}/${m.operation}`,
    );
    assert.ok(managers.includes("rt-test/Apply"), managers.join(","));
    await assert.rejects(
      client.apply(CM, cm("ssa", { x: "2" }), { fieldManager: "other" }),
      (e: unknown) => e instanceof ApiError && e.code === 409,
      "a second manager conflicts without force",
    );
    const forced = await client.apply(CM, cm("ssa", { x: "2" }), { fieldManager: "other", force: true });
    assert.equal((forced["data"] as Record<string, string>)["x"], "2");
    assert.throws(() => client.apply(CM, cm("ssa"), { fieldManager: "" }), /needs opts.fieldManager/);

    // The same write with its answer dropped: nothing returned, the object written, an error
    // still an ApiError with the server's code and reason (its body is parsed).
    const unread = await client.applyDiscardingAnswer(CM, cm("ssa", { x: "3" }), {
      fieldManager: "other",
      force: true,
    });
    assert.equal(unread, undefined);
    const stored = await client.get(CM, { namespace: ns.name, name: "ssa" });
    assert.equal((stored?.["data"] as Record<string, string> | undefined)?.["x"], "3");
    await assert.rejects(
      client.applyDiscardingAnswer(CM, cm("ssa", { x: "4" }), { fieldManager: "rt-test" }),
      (e: unknown) => e instanceof ApiError && e.code === 409 && e.reason === "Conflict",
      "a conflict's Status is read for its code and reason",
    );

    // Only whether it created the object, and its uid and resourceVersion, read from the answer.
    const fresh = await client.applyForVersion(CM, cm("versioned", { x: "1" }), { fieldManager: "rt-test" });
    const got = await client.get(CM, { namespace: ns.name, name: "versioned" });
    assert.deepEqual(fresh, {
      created: true,
      uid: got?.metadata.uid,
      resourceVersion: got?.metadata.resourceVersion,
    });
    const again = await client.applyForVersion(CM, cm("versioned", { x: "2" }), { fieldManager: "rt-test" });
    assert.equal(again.created, false, "an update answers 200");
    assert.ok(Number(again.resourceVersion) > Number(fresh.resourceVersion));
    const same = await client.applyForVersion(CM, cm("versioned", { x: "2" }), { fieldManager: "rt-test" });
    assert.deepEqual(same, { ...again, created: false }, "a no-op answers the stored version, not created");

    const crd = parse(
      readFileSync(new URL("../../../examples/podset/crd.yaml", import.meta.url), "utf8"),
    ) as KubeObject;
    await client.apply(builtinKinds.CustomResourceDefinition, crd, { fieldManager: "rt-test", force: true });
    await waitFor("PodSet served", async () =>
      client.list(PodSetKind, { limit: 1 }).then(
        () => true,
        () => false,
      ),
    );
    const ps = await client.create<PodSet>(PodSetKind, {
      apiVersion: "examples.mlmodel.dev/v1alpha1",
      kind: "PodSet",
      metadata: { name: "p", namespace: ns.name },
      spec: { replicas: 0, image: "x" },
    });
    const withStatus = await client.applyStatus<PodSet>(
      PodSetKind,
      {
        ...ps,
        metadata: { name: "p", namespace: ns.name },
        spec: { replicas: 5, image: "ignored" },
        status: { replicas: 7 },
      },
      { fieldManager: "rt-test", force: true },
    );
    assert.equal(withStatus.status?.replicas, 7);
    assert.equal(withStatus.spec.replicas, 0, "spec is not written through the status subresource");
  });

  it("pages lists with limit/continue and counts requests by verb and code", async () => {
    for (let i = 0; i < 7; i++) await client.create(CM, cm(`page-${i}`));
    const names: string[] = [];
    let cont: string | undefined;
    let pages = 0;
    do {
      const page = await client.list(CM, {
        namespace: ns.name,
        limit: 3,
        labelSelector: "",
        ...(cont ? { continue: cont } : {}),
      });
      pages++;
      names.push(
        ...page.items.filter((o) => o.metadata.name!.startsWith("page-")).map((o) => o.metadata.name!),
      );
      assert.ok(
        page.items.every((o) => o.kind === "ConfigMap" && o.apiVersion === "v1"),
        "list items get apiVersion/kind back",
      );
      cont = page.continue;
    } while (cont);
    assert.equal(names.length, 7);
    assert.ok(pages >= 3);
    assert.ok(requests.some((r) => r.verb === "list" && r.code === 200));
    assert.ok(requests.some((r) => r.verb === "get" && r.code === 404));
    assert.ok(requests.some((r) => r.verb === "apply" && r.method === "PATCH" && r.code === 409));
  });

  it("withoutManagedFields: lists and watch events without managedFields, the rest as the server wrote it", async () => {
    // Two field managers, and an annotation that looks like managedFields inside a string.
    const tricky = { note: '"managedFields":[{"manager":"not-me"}]' };
    const applied = { ...cm("mf", { k: "1" }), metadata: { ...cm("mf").metadata, annotations: tricky } };
    await client.apply(CM, applied, { fieldManager: "mf-test" });
    await client.patch(CM, { namespace: ns.name, name: "mf" }, { data: { other: "2" } }, "merge", {
      fieldManager: "mf-other",
    });
    const withoutManaged = (o: KubeObject): KubeObject => {
      const { managedFields: _m, ...metadata } = o.metadata;
      return { ...o, metadata };
    };
    const full = await client.list(CM, { namespace: ns.name });
    const cut = await client.list(CM, { namespace: ns.name, withoutManagedFields: true });
    const fullMf = full.items.find((o) => o.metadata.name === "mf")!;
    assert.equal((fullMf.metadata.managedFields as unknown[]).length, 2, "the server wrote managedFields");
    assert.deepEqual(cut.items, full.items.map(withoutManaged), "list items: only managedFields missing");

    const events = async (withoutManagedFields: boolean): Promise<KubeObject> => {
      const ac = new AbortController();
      const watch = client.watch(
        CM,
        { namespace: ns.name, resourceVersion: full.resourceVersion, withoutManagedFields },
        ac.signal,
      );
      for await (const e of watch) {
        if (e.object.metadata.name === "mf2") {
          ac.abort();
          return e.object;
        }
      }
      throw new Error("the watch ended before mf2 came");
    };
    await client.apply(
      CM,
      { ...cm("mf2", { k: "1" }), metadata: { ...cm("mf2").metadata, annotations: tricky } },
      {
        fieldManager: "mf-test",
      },
    );
    const [plain, without] = await Promise.all([events(false), events(true)]);
    assert.ok(plain.metadata.managedFields, "a plain watch keeps managedFields");
    assert.deepEqual(without, withoutManaged(plain), "watch events: only managedFields missing");
    assert.deepEqual(without.metadata.annotations, tricky);
  });

  it("watches from a resourceVersion and ends a silent watch with WatchInactivityError", async () => {
    const list = await client.list(CM, { namespace: ns.name });
    const ac = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      for await (const e of client.watch(
        CM,
        { namespace: ns.name, resourceVersion: list.resourceVersion },
        ac.signal,
      )) {
        // Only our object: earlier tests' ConfigMaps and kube-root-ca.crt share the namespace.
        if (e.object.metadata.name !== "w") continue;
        seen.push(`${e.type}:${e.object.metadata.name}`);
        if (seen.length === 2) ac.abort();
      }
    })().then(
      () => undefined,
      (err: unknown) => err,
    );
    await client.create(CM, cm("w"));
    await client.delete(CM, { namespace: ns.name, name: "w" });
    // The handler is attached at once: the abort can end the watch before delete returns.
    const ended = await watching;
    assert.equal((ended as Error | undefined)?.name, "AbortError");
    assert.deepEqual(seen, ["ADDED:w", "DELETED:w"]);

    const quiet = await client.list(CM, { namespace: ns.name, labelSelector: "never=there" });
    await assert.rejects(
      (async () => {
        for await (const _ of client.watch(CM, {
          namespace: ns.name,
          labelSelector: "never=there",
          resourceVersion: quiet.resourceVersion,
          inactivityTimeoutMs: 1500,
        })) {
          // nothing matches
        }
      })(),
      WatchInactivityError,
    );
  });
});
