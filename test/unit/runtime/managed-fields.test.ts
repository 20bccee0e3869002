import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { eventWithoutManagedFields, listWithoutManagedFields } from "../../../src/runtime/managed-fields.ts";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** What a cut must equal: the parsed text with the objects' own metadata.managedFields deleted. */
function parsedWithout(
  text: string,
  objects: (parsed: Record<string, Json>) => Record<string, Json>[],
): Json {
  const parsed = JSON.parse(text) as Record<string, Json>;
  for (const object of objects(parsed)) delete (object["metadata"] as Record<string, Json>)["managedFields"];
  return parsed;
}
const eventObject = (e: Record<string, Json>) => [e["object"] as Record<string, Json>];
const listItems = (l: Record<string, Json>) => l["items"] as Record<string, Json>[];

const managedFields: Json = [
  {
    manager: "kube-controller-manager",
    operation: "Update",
    apiVersion: "apps/v1",
    time: "2026-11-24T01:00:00Z",
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:metadata": { "f:ownerReferences": { ".": {}, 'k:{"uid":"6f1c"}': {} } },
      "f:spec": { "f:containers": { 'k:{"name":"server"}': { ".": {}, "f:image": {} } } },
    },
  },
  { manager: 'odd "] [ manager\\', operation: "Apply", fieldsV1: { 'v:"x]"': {}, "f:a[b": {} } },
];

/** A Pod as the API server writes it: typed objects put managedFields last in metadata. */
const pod = {
  kind: "Pod",
  apiVersion: "v1",
  metadata: {
    name: "m-abc",
    namespace: "ml",
    uid: "u-1",
    resourceVersion: "42",
    labels: { app: "m" },
    annotations: {
      note: '"managedFields":[ {"not":"this"} ]',
      "last-applied": '{"metadata":{"managedFields":[]}}',
    },
    ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "m", uid: "6f1c" }],
    managedFields,
  },
  spec: { containers: [{ name: "server", args: ["--a", "[b]"], ports: [{ containerPort: 8080 }] }] },
  status: { conditions: [{ type: "Ready", status: "True" }] },
};

describe("managedFields cut from the API server's text before parsing", () => {
  it("cuts a watch event's object's managedFields and leaves everything else as written", () => {
    const text = JSON.stringify({ type: "MODIFIED", object: pod });
    const cut = eventWithoutManagedFields(text);
    assert.deepEqual(JSON.parse(cut), parsedWithout(text, eventObject));
    assert.ok(cut.length < text.length - JSON.stringify(managedFields).length + 5);
  });

  it("finds managedFields anywhere among metadata's members (custom resources sort their keys)", () => {
    const sorted = {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { annotations: { a: "]" }, generation: 2, managedFields, name: "m", namespace: "ml" },
      spec: { replicas: 1 },
    };
    const first = { kind: "ConfigMap", metadata: { managedFields, name: "c" }, data: { k: "v" } };
    const only = { kind: "ConfigMap", metadata: { managedFields } };
    for (const object of [sorted, first, only]) {
      const text = JSON.stringify({ type: "ADDED", object });
      assert.deepEqual(JSON.parse(eventWithoutManagedFields(text)), parsedWithout(text, eventObject));
    }
  });

  it("keeps a managedFields that is not the object's own metadata's (a pod template's, a spec member)", () => {
    const deployment = {
      kind: "Deployment",
      metadata: { name: "d", managedFields },
      spec: { template: { metadata: { managedFields: [{ manager: "keep" }] } }, managedFields: ["keep"] },
    };
    const text = JSON.stringify({ type: "ADDED", object: deployment });
    const parsed = JSON.parse(eventWithoutManagedFields(text));
    assert.equal(parsed.object.metadata.managedFields, undefined);
    assert.deepEqual(parsed.object.spec, deployment.spec);
  });

  it("reads indented text too, and leaves text without managedFields as it is (the same string)", () => {
    const text = JSON.stringify({ type: "ADDED", object: pod }, null, 2);
    assert.deepEqual(JSON.parse(eventWithoutManagedFields(text)), parsedWithout(text, eventObject));
    const plain = JSON.stringify({ type: "ADDED", object: { kind: "Pod", metadata: { name: "p" } } });
    assert.equal(eventWithoutManagedFields(plain), plain);
    const bookmark = '{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}';
    assert.equal(eventWithoutManagedFields(bookmark), bookmark);
  });

  it("returns text laid out otherwise than expected unchanged, for the caller to parse whole", () => {
    const error = '{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}';
    const truncated = JSON.stringify({ type: "ADDED", object: pod }).slice(0, 300);
    const metadataNotObject = '{"type":"ADDED","object":{"metadata":"x","managedFields":[]}}';
    const unterminated = '{"type":"ADDED","object":{"metadata":{"managedFields":[{"manager":"a}]}}';
    for (const text of [error, truncated, metadataNotObject, unterminated, "", "[]", "not json"])
      assert.equal(eventWithoutManagedFields(text), text, text);
  });

  it("cuts every item's managedFields in a list, and only theirs", () => {
    const items = [
      pod,
      { kind: "ConfigMap", metadata: { name: "no-fields" } },
      { ...pod, spec: { a: [[1], [2]] } },
    ];
    const text = JSON.stringify({
      kind: "PodList",
      apiVersion: "v1",
      metadata: { resourceVersion: "7", continue: "c" },
      items,
    });
    assert.deepEqual(JSON.parse(listWithoutManagedFields(text)), parsedWithout(text, listItems));
    const empty = '{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[]}';
    assert.equal(listWithoutManagedFields(empty), empty);
  });

  it("agrees with JSON.parse on generated objects with awkward strings", () => {
    const strings = [
      '"',
      "\\",
      "]",
      "[",
      "}",
      "{",
      ",",
      ":",
      '\\"]',
      "é",
      "\u2028",
      "managedFields",
      '"metadata":{',
    ];
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const str = () => Array.from({ length: random(4) }, () => strings[random(strings.length)]).join("");
    const value = (depth: number): Json => {
      const pick = depth > 2 ? random(3) : random(6);
      if (pick === 0) return str();
      if (pick === 1) return random(1000) - 500;
      if (pick === 2) return [true, false, null][random(3)] ?? null;
      if (pick === 3) return Array.from({ length: random(3) }, () => value(depth + 1));
      return Object.fromEntries(Array.from({ length: random(4) }, () => [str(), value(depth + 1)]));
    };
    for (let n = 0; n < 300; n++) {
      const metadata: Record<string, Json> = { [str()]: value(1), name: str() };
      if (random(4) > 0) metadata["managedFields"] = [{ manager: str(), fieldsV1: { [str()]: {} } }];
      metadata[str() || "z"] = value(1);
      const object = { kind: str(), metadata, spec: value(1) };
      const text = JSON.stringify({ type: "MODIFIED", object });
      assert.deepEqual(JSON.parse(eventWithoutManagedFields(text)), parsedWithout(text, eventObject), text);
      const list = JSON.stringify({ metadata: {}, items: [object, object] });
      assert.deepEqual(JSON.parse(listWithoutManagedFields(list)), parsedWithout(list, listItems), list);
    }
  });
});
