import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KubeClient } from "../../../src/runtime/client.ts";
import { parseRetryAfter } from "../../../src/runtime/errors.ts";
import {
  builtinKinds,
  collectionPath,
  matchesKind,
  objectPath,
  validateKind,
} from "../../../src/runtime/kinds.ts";
import { Manager } from "../../../src/runtime/manager.ts";
import { controllerOwnerRef, isControlledBy, ownerRequest } from "../../../src/runtime/owners.ts";
import {
  annotationsChangedPredicate,
  equalValues,
  labelSelectorPredicate,
  labelsChangedPredicate,
  selectedChangedPredicate,
} from "../../../src/runtime/predicates.ts";
import { parseBindAddress } from "../../../src/runtime/server.ts";
import type { KubeObject } from "../../../src/runtime/types.ts";
import { isDnsLabel, parseKey } from "../../../src/runtime/types.ts";

const PodSet = { group: "example.com", version: "v1", kind: "PodSet", plural: "podsets", namespaced: true };

describe("kinds", () => {
  it("builds core, group and cluster-scoped paths", () => {
    assert.equal(collectionPath(builtinKinds.Pod, "ns"), "/api/v1/namespaces/ns/pods");
    assert.equal(collectionPath(builtinKinds.Pod), "/api/v1/pods");
    assert.equal(
      objectPath(builtinKinds.Deployment, { namespace: "a", name: "d" }, "status"),
      "/apis/apps/v1/namespaces/a/deployments/d/status",
    );
    assert.equal(objectPath(builtinKinds.Node, { name: "n" }), "/api/v1/nodes/n");
    assert.equal(collectionPath(PodSet, "x"), "/apis/example.com/v1/namespaces/x/podsets");
  });

  it("names the field and value of a bad kind or key", () => {
    assert.throws(
      () => objectPath(builtinKinds.Pod, { name: "p" }),
      /Pod is namespaced: key \{name: "p"\} needs a namespace/,
    );
    assert.throws(
      () => collectionPath(builtinKinds.Node, "ns"),
      /cluster-scoped, but namespace "ns" was given/,
    );
    assert.throws(
      () => validateKind({ ...PodSet, plural: "PodSets" }),
      /plural "PodSets" of PodSet must be lowercase/,
    );
    assert.throws(() => validateKind({ ...PodSet, version: "1" }), /version "1" of PodSet must look like v1/);
    assert.doesNotThrow(() => {
      for (const k of Object.values(builtinKinds)) validateKind(k);
    });
  });

  it("matches owner apiVersion/kind by group, any version", () => {
    assert.equal(matchesKind(PodSet, "example.com/v2", "PodSet"), true);
    assert.equal(matchesKind(PodSet, "other.com/v1", "PodSet"), false);
    assert.equal(matchesKind(builtinKinds.Pod, "v1", "Pod"), true);
  });

  it("parses keys", () => {
    assert.deepEqual(parseKey("ns/n"), { namespace: "ns", name: "n" });
    assert.deepEqual(parseKey("n"), { name: "n" });
  });
});

describe("owners", () => {
  const owner: KubeObject = {
    apiVersion: "example.com/v1",
    kind: "PodSet",
    metadata: { name: "ps", namespace: "ns", uid: "u1" },
  };
  it("builds a controller reference and recognises it by uid", () => {
    const ref = controllerOwnerRef(owner);
    assert.deepEqual(ref, {
      apiVersion: "example.com/v1",
      kind: "PodSet",
      name: "ps",
      uid: "u1",
      controller: true,
      blockOwnerDeletion: true,
    });
    const child: KubeObject = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "c", namespace: "ns", ownerReferences: [ref] },
    };
    assert.equal(isControlledBy(child, owner), true);
    assert.equal(
      isControlledBy(child, { ...owner, metadata: { ...owner.metadata, uid: "u2" } }),
      false,
      "a re-created owner is another owner",
    );
    assert.deepEqual(ownerRequest(child, PodSet), { namespace: "ns", name: "ps" });
  });
  it("refuses an owner not read from the server", () => {
    assert.throws(
      () => controllerOwnerRef({ ...owner, metadata: { name: "ps" } }),
      /metadata.name and .uid set\), got name="ps" uid=undefined/,
    );
  });
});

describe("predicates", () => {
  const o = (labels: Record<string, string>, annotations: Record<string, string> = {}): KubeObject => ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "p", labels, annotations },
  });
  it("detect label and annotation changes and select by labels", () => {
    assert.equal(
      labelsChangedPredicate()({ type: "update", old: o({ a: "1" }), object: o({ a: "1" }), initial: false }),
      false,
    );
    assert.equal(
      labelsChangedPredicate()({ type: "update", old: o({ a: "1" }), object: o({ a: "2" }), initial: false }),
      true,
    );
    assert.equal(labelsChangedPredicate()({ type: "add", object: o({}), initial: false }), true);
    assert.equal(
      annotationsChangedPredicate()({
        type: "update",
        old: o({}, { x: "1" }),
        object: o({}, {}),
        initial: false,
      }),
      true,
    );
    assert.equal(
      labelSelectorPredicate({ app: "web" })({
        type: "add",
        object: o({ app: "web", x: "y" }),
        initial: false,
      }),
      true,
    );
    assert.equal(
      labelSelectorPredicate({ app: "web" })({ type: "add", object: o({ app: "db" }), initial: false }),
      false,
    );
  });

  it("pass an update only when the selected part changed by value", () => {
    type Job = KubeObject & { status?: { active?: number; conditions?: { type: string; status: string }[] } };
    const job = (status: Job["status"], rv: string): Job => ({
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { name: "j", resourceVersion: rv },
      status,
    });
    const p = selectedChangedPredicate<Job>((j) => j.status);
    const update = (a: Job, b: Job) => p({ type: "update", old: a, object: b, initial: false });
    const running = { active: 1, conditions: [{ type: "Complete", status: "False" }] };
    assert.equal(
      update(job(running, "1"), job({ conditions: [{ status: "False", type: "Complete" }], active: 1 }, "2")),
      false,
    );
    assert.equal(update(job(running, "1"), job({ ...running, active: 0 }, "2")), true);
    assert.equal(p({ type: "delete", object: job(running, "1"), initial: false }), true);
    assert.equal(equalValues({ a: undefined, b: [1, { c: 2 }] }, { b: [1, { c: 2 }] }), true);
    assert.equal(equalValues([1, 2], [2, 1]), false);
    assert.equal(equalValues({ a: 1 }, [1]), false);
    assert.equal(equalValues(null, {}), false);
  });
});

describe("small parsers", () => {
  it("Retry-After: seconds or an HTTP date", () => {
    assert.equal(parseRetryAfter("3"), 3);
    assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 0), 10);
    assert.equal(parseRetryAfter("soon"), undefined);
    assert.equal(parseRetryAfter(null), undefined);
  });
  it("bind addresses", () => {
    assert.equal(parseBindAddress("f", "0"), undefined);
    assert.deepEqual(parseBindAddress("f", ":8080"), { host: "0.0.0.0", port: 8080 });
    assert.deepEqual(parseBindAddress("f", "127.0.0.1:0"), { host: "127.0.0.1", port: 0 });
    assert.throws(
      () => parseBindAddress("metricsBindAddress", "localhost"),
      /metricsBindAddress "localhost" must be "host:port"/,
    );
  });
});

describe("watch stream line splitting", () => {
  it("rejoins lines split across chunks, including a multi-byte character cut in half", async () => {
    const { LineSplitter } = await import("../../../src/runtime/client.ts");
    const bytes = new TextEncoder().encode('{"a":"é"}\n\n{"b":2}\n {"c":3}\r\n{"d"');
    const split = new LineSplitter();
    // byte 7 is inside "é"; the last chunk ends in the middle of a line
    const out = [bytes.slice(0, 7), bytes.slice(7, 13), bytes.slice(13, 22), bytes.slice(22)].map((c) =>
      split.push(c),
    );
    assert.deepEqual(out, [[], ['{"a":"é"}'], ['{"b":2}'], ['{"c":3}']]);
    assert.equal(split.end(), '{"d"', "the rest of an unterminated last line");
    assert.equal(split.end(), undefined);
  });
});

describe("isDnsLabel", () => {
  it("accepts RFC 1123 labels up to 63 characters and nothing else", () => {
    for (const ok of ["a", "ml-models", "0abc", "a".repeat(63)]) assert.equal(isDnsLabel(ok), true, ok);
    for (const bad of ["", "-a", "a-", "A", "a.b", "a_b", "a".repeat(64)])
      assert.equal(isDnsLabel(bad), false, bad);
  });

  it("is what the Manager checks its namespaces with", () => {
    const client = new KubeClient({ server: "http://127.0.0.1:9", headers: async () => ({}) });
    assert.throws(
      () => new Manager({ client, namespaces: ["ml", "a".repeat(64)] }),
      /namespaces contains "a{64}", which is not a valid namespace name/,
    );
  });
});
