/**
 * FakeClient against the real API server: one scenario runs on a KubeClient of the shared
 * cluster and on a FakeClient, and every step must end the same on both. The steps cover what
 * docs/runtime.md ("Testing without a cluster") says the fake does as the API server does.
 *
 * Left out, each for its reason:
 * - uids, resourceVersions and timestamps differ by nature: steps record whether a
 *   resourceVersion changed and whether a timestamp is set, never the values;
 * - the controller-manager puts a `kube-root-ca.crt` ConfigMap into every real namespace: lists
 *   of ConfigMaps leave it out;
 * - error messages are worded differently: errors are compared by code, reason and, for an
 *   apply conflict, the manager and field of each conflict;
 * - defaulting (a real Deployment gets a strategy, a Secret a type): steps record the fields
 *   the scenario set, not whole objects;
 * - managedFields are not in the fake's objects: ownership is compared as leaf fields per
 *   manager (the real managedFields read back into fieldOwners()'s form), on a custom resource
 *   with no lists in it (the real server keys list items by merge keys, the fake owns a list
 *   whole);
 * - the real garbage collector works asynchronously: the real side polls for its result a
 *   bounded number of times, the fake's is there at the first look;
 * - what docs/runtime.md lists as not done by the fake (a dependent whose owner was gone
 *   before it was written stays; a custom resource without a status subresource; Foreground
 *   deletion's ordering; validation, defaulting, admission, grace periods, bookmarks).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { parse } from "yaml";
import { PodSetKind } from "../../../examples/podset/podset.ts";
import {
  ApiError,
  builtinKinds,
  controllerOwnerRef,
  KubeClient,
  type KubeObject,
  type ObjectKey,
  type ResourceKind,
  type WatchEvent,
} from "../../../src/runtime/index.ts";
import { FakeClient } from "../../../src/runtime/testing.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const { ConfigMap, Deployment, Secret } = builtinKinds;

/** The root CA the controller-manager publishes into every real namespace (none in the fake). */
const rootCaConfigMap = "kube-root-ca.crt";
/**
 * Looks at the real garbage collector's work at most this many times, this far apart. It learns
 * of a new CRD at its discovery resync (every 30 s): on a fresh cluster, under a load of 20 on
 * 2 cores, the first deletion of a PodSet took 99 and 200 looks, the next ones 1 or 2.
 */
const gcPolls = 900;
const gcPollIntervalMs = 200;

interface Step {
  name: string;
  outcome: unknown;
}

/** One side of the comparison: a client, and how to read field ownership from it. */
interface Side {
  client: KubeClient;
  /** Manager -> the leaf fields it owns (".spec.replicas"), as FakeClient.fieldOwners shows them. */
  owners(kind: ResourceKind, key: ObjectKey): Promise<Record<string, string[]>>;
  /** How many looks each settle() took, in order (gcPolls + 1: it never settled). */
  looks: number[];
}

/** The outcome of a failed call: what the API server's answer means, not how it is worded. */
function errorOutcome(err: unknown): unknown {
  if (!(err instanceof ApiError)) return { thrown: String(err) };
  const out: Record<string, unknown> = { code: err.code, reason: err.reason };
  const causes = (err.status?.details?.causes ?? []) as {
    reason?: string;
    message?: string;
    field?: string;
  }[];
  const conflicts = causes
    .filter((c) => c.reason === "FieldManagerConflict")
    .map((c) => `${/"([^"]+)"/.exec(c.message ?? "")?.[1]} ${c.field}`);
  if (conflicts.length > 0) out["conflicts"] = conflicts.sort();
  return out;
}

/** Parsed JSON values: key order and undefined members do not count. */
function plain(value: unknown): unknown {
  return value === undefined ? null : JSON.parse(JSON.stringify(value));
}

async function record(steps: Step[], name: string, fn: () => Promise<unknown>): Promise<void> {
  let outcome: unknown;
  try {
    outcome = { ok: plain(await fn()) };
  } catch (err) {
    outcome = { error: errorOutcome(err) };
  }
  steps.push({ name, outcome });
}

/** Polls `check` until it is true, at most gcPolls times; notes how many looks it took. */
async function settle(side: Side, check: () => Promise<boolean>): Promise<boolean> {
  for (let look = 1; look <= gcPolls; look++) {
    if (await check()) {
      side.looks.push(look);
      return true;
    }
    if (look < gcPolls) await sleep(gcPollIntervalMs);
  }
  side.looks.push(gcPolls + 1);
  return false;
}

/** managedFields' fieldsV1 as leaf paths: `.metadata.labels.a`; "." (the node itself) is not a leaf. */
function leafFields(fields: Record<string, unknown>, prefix: string, out: string[]): string[] {
  for (const [key, child] of Object.entries(fields)) {
    if (key === ".") continue;
    const path = key.startsWith("f:") ? `${prefix}.${key.slice(2)}` : `${prefix}[${key}]`;
    const grandchildren = Object.keys(child as object).filter((k) => k !== ".");
    if (grandchildren.length === 0) out.push(path);
    else leafFields(child as Record<string, unknown>, path, out);
  }
  return out;
}

function realSide(client: KubeClient): Side {
  return {
    client,
    looks: [],
    async owners(kind, key) {
      const obj = await client.get(kind, key);
      const out: Record<string, string[]> = {};
      const entries = (obj?.metadata.managedFields ?? []) as { manager: string; fieldsV1?: object }[];
      for (const { manager, fieldsV1 } of entries) {
        const fields = leafFields((fieldsV1 ?? {}) as Record<string, unknown>, "", []);
        if (fields.length > 0) out[manager] = [...(out[manager] ?? []), ...fields].sort();
      }
      return out;
    },
  };
}

function fakeSide(client: FakeClient): Side {
  return { client, looks: [], owners: async (kind, key) => client.fieldOwners(kind, key) };
}

/** The scenario: the same calls on either side, each step's outcome recorded. */
async function scenario(side: Side, ns: string): Promise<Step[]> {
  const steps: Step[] = [];
  const c = side.client;
  const step = (name: string, fn: () => Promise<unknown>) => record(steps, name, fn);
  const key = (name: string): ObjectKey => ({ namespace: ns, name });
  const cm = (name: string, labels?: Record<string, string>, data = { k: "1" }): KubeObject => ({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: ns, ...(labels ? { labels } : {}) },
    data,
  });
  const podSet = (
    name: string,
    spec: Record<string, unknown>,
    extra: Partial<KubeObject> = {},
  ): KubeObject => ({
    apiVersion: "examples.mlmodel.dev/v1alpha1",
    kind: "PodSet",
    ...extra,
    metadata: { name, namespace: ns, ...extra.metadata },
    spec,
  });
  const names = (items: KubeObject[]) =>
    items.map((o) => o.metadata.name).filter((n) => n !== rootCaConfigMap);
  const rvOf = async (kind: ResourceKind, name: string) =>
    (await c.get(kind, key(name)))?.metadata.resourceVersion;

  // ---- 409 Conflict and AlreadyExists, 404 NotFound ----
  let first: KubeObject | undefined;
  let second: KubeObject | undefined;
  await step("create a ConfigMap", async () => {
    first = await c.create(ConfigMap, cm("a"));
    return { data: first["data"], generation: first.metadata.generation ?? "none" };
  });
  await step("create of an existing name", () => c.create(ConfigMap, cm("a")));
  await step("create with generateName", async () => {
    const { metadata } = cm("");
    const made = await c.create(ConfigMap, {
      ...cm(""),
      metadata: { ...metadata, name: undefined, generateName: "gen-" },
    });
    const name = made.metadata.name ?? "";
    await c.delete(ConfigMap, key(name));
    return { prefixed: name.startsWith("gen-"), suffixLength: name.length - "gen-".length };
  });
  await step("replace at the current resourceVersion", async () => {
    second = await c.replace(ConfigMap, { ...first!, data: { k: "2" } });
    return {
      data: second["data"],
      generation: second.metadata.generation ?? "none",
      rvChanged: second.metadata.resourceVersion !== first!.metadata.resourceVersion,
    };
  });
  await step("replace at a stale resourceVersion", () =>
    c.replace(ConfigMap, { ...first!, data: { k: "3" } }),
  );
  await step("merge patch carrying a stale resourceVersion", () =>
    c.patch(
      ConfigMap,
      key("a"),
      { metadata: { resourceVersion: first!.metadata.resourceVersion }, data: { k: "4" } },
      "merge",
    ),
  );
  await step("apply carrying a stale resourceVersion", () =>
    c.apply(
      ConfigMap,
      { ...cm("a"), metadata: { ...cm("a").metadata, resourceVersion: first!.metadata.resourceVersion } },
      { fieldManager: "parity", force: true },
    ),
  );
  await step("replace that changes nothing keeps the resourceVersion", async () => {
    const same = await c.replace(ConfigMap, { ...second!, data: { k: "2" } });
    return same.metadata.resourceVersion === second!.metadata.resourceVersion;
  });
  await step("delete with a stale resourceVersion precondition", () =>
    c.delete(ConfigMap, key("a"), { preconditions: { resourceVersion: first!.metadata.resourceVersion! } }),
  );
  await step("delete with another uid as precondition", () =>
    c.delete(ConfigMap, key("a"), { preconditions: { uid: "00000000-0000-0000-0000-000000000000" } }),
  );
  await step("get of a missing object", () => c.get(ConfigMap, key("missing")));
  await step("merge patch of a missing object", () =>
    c.patch(ConfigMap, key("missing"), { data: {} }, "merge"),
  );
  await step("replace of a missing object", () => c.replace(ConfigMap, cm("missing")));
  await step("delete of a missing object", () => c.delete(ConfigMap, key("missing")));
  await step("status apply of a missing object", () =>
    c.applyStatus(
      PodSetKind,
      { ...podSet("missing", {}), status: { replicas: 1 } },
      { fieldManager: "parity" },
    ),
  );

  // ---- generation: custom resources and Deployments keep one, ConfigMaps do not ----
  const generationOf = async (kind: ResourceKind, name: string) =>
    (await c.get(kind, key(name)))?.metadata.generation ?? "none";
  await step("ConfigMap generation after a data change", () => generationOf(ConfigMap, "a"));
  await step("create a PodSet with a status", async () => {
    const created = await c.create(
      PodSetKind,
      podSet("gen", { replicas: 1, image: "x" }, { status: { replicas: 7 } }),
    );
    return { generation: created.metadata.generation, status: created["status"] ?? "none" };
  });
  await step("PodSet generation after a label change", async () => {
    await c.patch(PodSetKind, key("gen"), { metadata: { labels: { x: "y" } } }, "merge");
    return generationOf(PodSetKind, "gen");
  });
  await step("PodSet generation after a spec change", async () => {
    await c.patch(PodSetKind, key("gen"), { spec: { replicas: 2 } }, "merge");
    return generationOf(PodSetKind, "gen");
  });
  const deployment = (replicas: number): KubeObject => ({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "d", namespace: ns },
    spec: {
      replicas,
      selector: { matchLabels: { app: "d" } },
      template: { metadata: { labels: { app: "d" } }, spec: { containers: [{ name: "c", image: "i:1" }] } },
    },
  });
  await step(
    "Deployment generation at create",
    async () => (await c.create(Deployment, deployment(0))).metadata.generation,
  );
  await step("Deployment generation after a spec change", async () => {
    await c.patch(Deployment, key("d"), { spec: { replicas: 1 } }, "merge");
    return generationOf(Deployment, "d");
  });

  // ---- the status subresource ----
  const specAndStatus = async (name: string) => {
    const got = await c.get(PodSetKind, key(name));
    return { generation: got?.metadata.generation, spec: got?.["spec"], status: got?.["status"] ?? "none" };
  };
  await step("status apply changes status only", async () => {
    await c.applyStatus(
      PodSetKind,
      { ...podSet("gen", { replicas: 9, image: "z" }), status: { replicas: 1 } },
      { fieldManager: "status-writer" },
    );
    return specAndStatus("gen");
  });
  await step("merge patch of the main resource leaves status alone", async () => {
    await c.patch(PodSetKind, key("gen"), { spec: { replicas: 3 }, status: { replicas: 5 } }, "merge");
    return specAndStatus("gen");
  });
  await step("replace of the main resource leaves status alone", async () => {
    const got = (await c.get(PodSetKind, key("gen")))!;
    await c.replace(PodSetKind, { ...got, spec: { replicas: 4, image: "x" }, status: { replicas: 6 } });
    return specAndStatus("gen");
  });
  await step("status merge patch leaves spec alone", async () => {
    await c.patch(PodSetKind, key("gen"), { spec: { replicas: 8 }, status: { readyReplicas: 1 } }, "merge", {
      subresource: "status",
    });
    return specAndStatus("gen");
  });
  await step("status merge patch of a ConfigMap, a kind with no status subresource", () =>
    c.patch(ConfigMap, key("a"), { status: { x: "1" } }, "merge", { subresource: "status" }),
  );
  await step("status apply of a ConfigMap", () =>
    c.applyStatus(ConfigMap, { ...cm("a"), status: { x: "1" } }, { fieldManager: "parity" }),
  );
  await step("replace of a custom resource without a resourceVersion", async () => {
    const got = (await c.get(PodSetKind, key("gen")))!;
    const { resourceVersion: _rv, ...metadata } = got.metadata;
    await c.replace(PodSetKind, { ...got, metadata, spec: { replicas: 5, image: "x" } });
    return specAndStatus("gen");
  });

  // ---- server-side apply: ownership per manager, conflicts, force ----
  const ssa = (spec: Record<string, unknown>, labels: Record<string, string>) =>
    podSet("ssa", spec, { metadata: { labels } });
  const ssaState = async () => {
    const got = await c.get(PodSetKind, key("ssa"));
    return {
      labels: got?.metadata.labels,
      spec: got?.["spec"],
      owners: await side.owners(PodSetKind, key("ssa")),
    };
  };
  await step("apply creates", async () => {
    const applied = await c.applyForVersion(
      PodSetKind,
      ssa({ replicas: 2, image: "x" }, { a: "1", b: "1" }),
      { fieldManager: "op" },
    );
    return { created: applied.created, ...(await ssaState()) };
  });
  await step("an update takes the fields it changes", async () => {
    await c.patch(PodSetKind, key("ssa"), { metadata: { labels: { mine: "x" } } }, "merge", {
      fieldManager: "kubectl",
    });
    return ssaState();
  });
  await step("apply without a field it applied before removes it", async () => {
    const applied = await c.applyForVersion(PodSetKind, ssa({ replicas: 2, image: "x" }, { a: "1" }), {
      fieldManager: "op",
    });
    return { created: applied.created, ...(await ssaState()) };
  });
  await step("the same apply again keeps the resourceVersion", async () => {
    const before = await rvOf(PodSetKind, "ssa");
    const applied = await c.applyForVersion(PodSetKind, ssa({ replicas: 2, image: "x" }, { a: "1" }), {
      fieldManager: "op",
    });
    return applied.resourceVersion === before;
  });
  await step("a merge patch by another manager takes spec.replicas", async () => {
    await c.patch(PodSetKind, key("ssa"), { spec: { replicas: 5 } }, "merge", { fieldManager: "hpa" });
    return ssaState();
  });
  await step("apply of another value of a field another manager owns", () =>
    c.apply(PodSetKind, ssa({ replicas: 2, image: "x" }, { a: "1" }), { fieldManager: "op" }),
  );
  await step("apply of the same value shares the field", async () => {
    await c.apply(PodSetKind, ssa({ replicas: 5, image: "x" }, { a: "1" }), { fieldManager: "op" });
    return ssaState();
  });
  await step("apply leaving out a shared field keeps it", async () => {
    await c.apply(PodSetKind, ssa({ image: "x" }, { a: "1" }), { fieldManager: "op" });
    return ssaState();
  });
  await step("forced apply takes the field", async () => {
    await c.apply(PodSetKind, ssa({ replicas: 3, image: "x" }, { a: "1" }), {
      fieldManager: "op",
      force: true,
    });
    return ssaState();
  });
  await step("apply by a third manager conflicting on two fields", () =>
    c.apply(PodSetKind, ssa({ replicas: 4, image: "y" }, {}), { fieldManager: "other" }),
  );
  await step("status apply owns status fields", async () => {
    await c.applyStatus(
      PodSetKind,
      { ...ssa({ replicas: 3, image: "x" }, {}), status: { replicas: 1 } },
      { fieldManager: "status-writer" },
    );
    return ssaState();
  });

  // ---- finalizers ----
  const finalizing = async () => {
    const got = await c.get(PodSetKind, key("fin"));
    if (!got) return "gone";
    return {
      terminating: Boolean(got.metadata.deletionTimestamp),
      finalizers: got.metadata.finalizers,
      generation: got.metadata.generation,
    };
  };
  await step("delete of an object with a finalizer marks it terminating", async () => {
    await c.create(
      PodSetKind,
      podSet("fin", { replicas: 1, image: "x" }, { metadata: { finalizers: ["example.dev/hold"] } }),
    );
    return { deleted: await c.delete(PodSetKind, key("fin")), state: await finalizing() };
  });
  await step("delete of a terminating object", async () => ({
    deleted: await c.delete(PodSetKind, key("fin")),
    state: await finalizing(),
  }));
  await step("adding a finalizer to a terminating object", async () => {
    const finalizers = ["example.dev/hold", "example.dev/more"];
    await c.patch(PodSetKind, key("fin"), { metadata: { finalizers } }, "merge");
    return finalizing();
  });
  await step("removing the last finalizer removes the object", async () => {
    await c.patch(PodSetKind, key("fin"), { metadata: { finalizers: null } }, "merge");
    return finalizing();
  });

  // ---- label and field selectors, paged lists ----
  await step("create labelled ConfigMaps", async () => {
    await c.create(ConfigMap, cm("l1", { app: "web", tier: "front" }));
    await c.create(ConfigMap, cm("l2", { app: "web" }));
    await c.create(ConfigMap, cm("l3", { app: "db" }));
    return names((await c.list(ConfigMap, { namespace: ns })).items);
  });
  for (const labelSelector of [
    "app=web",
    "app==web",
    "app!=web",
    "app in (db,cache)",
    "app notin (db),tier",
    "tier",
    "!tier,app",
  ]) {
    await step(`list with labelSelector ${labelSelector}`, async () =>
      names((await c.list(ConfigMap, { namespace: ns, labelSelector })).items),
    );
  }
  await step("list with a malformed labelSelector", () =>
    c.list(ConfigMap, { namespace: ns, labelSelector: "app in db" }),
  );
  for (const fieldSelector of ["metadata.name=l2", "metadata.name!=l2"]) {
    await step(`list with fieldSelector ${fieldSelector}`, async () =>
      names((await c.list(ConfigMap, { namespace: ns, fieldSelector })).items),
    );
  }
  await step("list in pages of 2", async () => {
    const pages: unknown[] = [];
    let cont: string | undefined;
    do {
      const page = await c.list(ConfigMap, {
        namespace: ns,
        labelSelector: "app",
        limit: 2,
        ...(cont ? { continue: cont } : {}),
      });
      pages.push(names(page.items));
      cont = page.continue;
    } while (cont);
    return pages;
  });

  // ---- a Secret's stringData ----
  await step("apply of a Secret with stringData", async () => {
    await c.apply(
      Secret,
      { apiVersion: "v1", kind: "Secret", metadata: { name: "s", namespace: ns }, stringData: { t: "abc" } },
      { fieldManager: "parity" },
    );
    const got = await c.get(Secret, key("s"));
    return { data: got?.["data"], stringData: got?.["stringData"] ?? "none" };
  });

  // ---- owner references: the garbage collector ----
  const dependent = (
    name: string,
    ...ownerReferences: NonNullable<KubeObject["metadata"]["ownerReferences"]>
  ) => c.create(ConfigMap, { ...cm(name), metadata: { ...cm(name).metadata, ownerReferences } });
  const refsOf = async (name: string) => {
    const got = await c.get(ConfigMap, key(name));
    return got ? (got.metadata.ownerReferences ?? []).map((r) => r.name) : "gone";
  };
  await step("Background deletion of an owner deletes its dependents, down the chain", async () => {
    const owner = await c.create(PodSetKind, podSet("owner", { replicas: 1, image: "x" }));
    const keeper = await c.create(PodSetKind, podSet("keeper", { replicas: 1, image: "x" }));
    const child = await dependent("child", controllerOwnerRef(owner));
    await dependent("grandchild", controllerOwnerRef(child));
    await dependent("shared", ownerRef(owner), ownerRef(keeper));
    await c.delete(PodSetKind, key("owner"), { propagationPolicy: "Background" });
    const settled = await settle(
      side,
      async () =>
        (await refsOf("child")) === "gone" &&
        (await refsOf("grandchild")) === "gone" &&
        (await refsOf("shared")).length === 1,
    );
    return {
      settled,
      child: await refsOf("child"),
      grandchild: await refsOf("grandchild"),
      shared: await refsOf("shared"),
    };
  });
  await step("Orphan deletion of an owner drops the references only", async () => {
    const owner = await c.create(PodSetKind, podSet("orphaner", { replicas: 1, image: "x" }));
    await dependent("orphan", controllerOwnerRef(owner));
    await c.delete(PodSetKind, key("orphaner"), { propagationPolicy: "Orphan" });
    const settled = await settle(
      side,
      async () =>
        (await c.get(PodSetKind, key("orphaner"))) === undefined && (await refsOf("orphan")).length === 0,
    );
    return { settled, orphan: await refsOf("orphan") };
  });
  await step("Foreground deletion of an owner deletes it and its dependents", async () => {
    const owner = await c.create(PodSetKind, podSet("foreground", { replicas: 1, image: "x" }));
    await dependent("fg-child", controllerOwnerRef(owner));
    await c.delete(PodSetKind, key("foreground"), { propagationPolicy: "Foreground" });
    const settled = await settle(
      side,
      async () =>
        (await c.get(PodSetKind, key("foreground"))) === undefined && (await refsOf("fg-child")) === "gone",
    );
    return { settled, child: await refsOf("fg-child") };
  });

  // ---- watch: what a selector sees after each write ----
  await step("watch from a resourceVersion with a labelSelector", async () => {
    const from = (await c.list(ConfigMap, { namespace: ns, labelSelector: "watch=yes" })).resourceVersion;
    const seen: string[] = [];
    const stop = new AbortController();
    const opts = { namespace: ns, resourceVersion: from, labelSelector: "watch=yes" };
    const watching = watchUntil(c.watch(ConfigMap, opts, stop.signal), "w-end", seen);
    await c.create(ConfigMap, cm("w1", { watch: "yes" }));
    await c.patch(ConfigMap, key("w1"), { data: { k: "2" } }, "merge");
    await c.patch(ConfigMap, key("w1"), { data: { k: "2" } }, "merge");
    await c.patch(ConfigMap, key("w1"), { metadata: { labels: { watch: "no" } } }, "merge");
    await c.create(ConfigMap, cm("w2", { watch: "no" }));
    await c.patch(ConfigMap, key("w2"), { metadata: { labels: { watch: "yes" } } }, "merge");
    await c.delete(ConfigMap, key("w2"));
    await c.delete(ConfigMap, key("w1"));
    await c.create(ConfigMap, {
      ...cm("w3", { watch: "yes" }),
      metadata: { ...cm("w3", { watch: "yes" }).metadata, finalizers: ["example.dev/hold"] },
    });
    await c.delete(ConfigMap, key("w3"));
    await c.patch(ConfigMap, key("w3"), { metadata: { finalizers: null } }, "merge");
    // The last event the watch waits for: it ends the watch without a clock.
    await c.create(ConfigMap, cm("w-end", { watch: "yes" }));
    try {
      await watching;
    } finally {
      stop.abort();
    }
    return seen;
  });
  await step("watch without a resourceVersion starts with every current object ADDED", async () => {
    const seen: string[] = [];
    const stop = new AbortController();
    // Written once the watch is open; its name sorts last, so the events' order is the same
    // whether the server counts it in the starting state or sends it after.
    const opened = Promise.withResolvers<void>();
    const opts = { namespace: ns, labelSelector: "app=web", onOpen: () => opened.resolve() };
    const watching = watchUntil(c.watch(ConfigMap, opts, stop.signal), "zz-end", seen);
    await Promise.race([opened.promise, watching]);
    await c.create(ConfigMap, cm("zz-end", { app: "web" }));
    try {
      await watching;
    } finally {
      stop.abort();
    }
    return seen;
  });
  return steps;
}

/** Notes each event of a watch as "TYPE name" until the object named `last` shows up. */
async function watchUntil(events: AsyncIterable<WatchEvent>, last: string, seen: string[]): Promise<void> {
  for await (const event of events) {
    if (event.type === "BOOKMARK") continue;
    seen.push(`${event.type} ${event.object.metadata.name}`);
    if (event.object.metadata.name === last) return;
  }
}

/** A non-controller owner reference (an object has at most one controller). */
function ownerRef(owner: KubeObject) {
  const { controller: _c, ...ref } = controllerOwnerRef(owner);
  return ref;
}

/** A liveness bound, not a measure: a watch that never brings its last event must not hang the run. */
const suiteTimeoutMs = 10 * 60_000;

describe("FakeClient does as the real API server does", { timeout: suiteTimeoutMs }, () => {
  const real = KubeClient.fromKubeConfig(kubeConfig());
  let ns: TestNamespace;
  let realSteps: Step[];
  let fakeSteps: Step[];
  const fake = new FakeClient({ kinds: [PodSetKind] });
  const sides = { real: realSide(real), fake: fakeSide(fake) };

  before(async () => {
    ns = await createNamespace("rt-parity");
    const crd = parse(
      readFileSync(new URL("../../../examples/podset/crd.yaml", import.meta.url), "utf8"),
    ) as KubeObject;
    await real.apply(builtinKinds.CustomResourceDefinition, crd, { fieldManager: "rt-parity", force: true });
    await waitFor("PodSet served", async () =>
      real.list(PodSetKind, { limit: 1 }).then(
        () => true,
        () => false,
      ),
    );
    realSteps = await scenario(sides.real, ns.name);
    fakeSteps = await scenario(sides.fake, ns.name);
  });
  after(async () => {
    await ns?.delete();
  });

  it("runs the same steps on both sides", () => {
    assert.deepEqual(
      fakeSteps.map((s) => s.name),
      realSteps.map((s) => s.name),
    );
  });

  it("ends every step the same way", async (t) => {
    for (const [i, realStep] of realSteps.entries()) {
      const fakeStep = fakeSteps[i]!;
      await t.test(realStep.name, () => {
        assert.deepEqual(
          fakeStep.outcome,
          realStep.outcome,
          `step "${realStep.name}": real ${JSON.stringify(realStep.outcome)}, fake ${JSON.stringify(fakeStep.outcome)}`,
        );
      });
    }
  });

  it("has the garbage collector's work done at the first look on the fake, as it claims", (t) => {
    t.diagnostic(
      `looks the real garbage collector's work took (${gcPollIntervalMs} ms apart): ${sides.real.looks.join(", ")}`,
    );
    assert.equal(sides.real.looks.length, 3, "three deletions waited for on the real side");
    assert.deepEqual(sides.fake.looks, [1, 1, 1]);
  });
});
