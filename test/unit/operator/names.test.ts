import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { desiredDeployment, desiredDownloadJob, desiredService } from "../../../src/operator/desired.ts";
import { canonicalJson, shortHash } from "../../../src/operator/names.ts";
import { defaultOperatorConfig, planModel } from "../../../src/operator/plan.ts";
import { model, tfServing } from "./fixtures.ts";

/**
 * The first canonicalJson: JSON.stringify handed a key-sorted copy of every object. The
 * applied-hash annotations on live children were made with it, so the current one must give
 * the very same string, or every child would be applied again after an upgrade.
 */
function reference(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

/** A small seeded generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const leaves: unknown[] = [
  1,
  -0,
  2.5,
  1e21,
  Number.NaN,
  "a",
  "",
  'é\u2028"\\\n',
  null,
  true,
  false,
  undefined,
  () => 1,
];
const keys = [
  "a",
  "b",
  "Z",
  "10",
  "9",
  "2",
  "01",
  "-1",
  "x-y",
  "ä",
  "0",
  "_",
  "4294967294",
  "4294967295",
  "toJSON",
];

function randomValue(next: () => number, depth: number): unknown {
  const r = next();
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
  if (depth > 3 || r < 0.35) return pick(leaves);
  if (r < 0.55) return Array.from({ length: Math.floor(next() * 4) }, () => randomValue(next, depth + 1));
  if (r < 0.58) return new Date(Math.floor(next() * 1e12));
  const obj: Record<string, unknown> = {};
  for (let i = Math.floor(next() * 6); i > 0; i--) obj[pick(keys)] = randomValue(next, depth + 1);
  return obj;
}

describe("canonicalJson", () => {
  it("gives the first version's string on edge cases", () => {
    const samples: unknown[] = [
      null,
      0,
      -0,
      "x",
      true,
      [],
      {},
      [1, undefined, () => 1, null, Symbol("s")],
      { b: 1, a: undefined, c: () => 1, d: null, e: Symbol("s") },
      { "10": 1, "9": 2, a: 3, "01": 4, "-1": 5, "4294967295": 6, "4294967294": 7, "1.5": 8, "1e3": 9 },
      new Date(0),
      { d: new Date(1e12) },
      { s: 'é\u2028"\\\n\u0000\ud800', n: [Number.NaN, Number.POSITIVE_INFINITY, -0, 1e21, 0.1, 1e-7] },
      [[{ z: 1, y: [{ b: 2, a: 1 }] }]],
      {
        toJSON() {
          return { b: 1, a: 2 };
        },
      },
      { nested: { toJSON: (key: string) => `key ${key}` } },
      [{ toJSON: (key: string) => `index ${key}` }],
      { u: undefined },
      [undefined],
      Object.assign(Object.create({ inherited: 1 }), { own: 2 }),
      new Map([["a", 1]]),
      new Number(3),
      new String("ab"),
      new Array(2), // holes serialize as null
      { ["__proto__"]: 1, constructor: 2 },
    ];
    for (const s of samples) assert.equal(canonicalJson(s), reference(s), String(reference(s)));
  });

  it("gives the first version's string on 20,000 random values", () => {
    const next = random(15);
    for (let i = 0; i < 20_000; i++) {
      const v = randomValue(next, 0);
      assert.equal(canonicalJson(v), reference(v), `value ${i}: ${reference(v)}`);
    }
  });

  it("gives the first version's string on the desired children, and the same for any key order", () => {
    const m = model({ model: { uri: "s3://b/m", format: "tensorflow" }, replicas: 2 });
    const plan = planModel(m, { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec });
    const owner = { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", name: "m", uid: "u1" };
    const children = [
      desiredDeployment(plan, owner),
      desiredService(plan, owner),
      desiredDownloadJob(plan, owner, defaultOperatorConfig),
    ];
    for (const child of children) {
      assert.equal(canonicalJson(child), reference(child));
      assert.equal(shortHash(child), shortHash(reversedKeys(child)));
    }
  });

  it("throws where JSON.stringify throws (BigInt)", () => {
    assert.throws(() => canonicalJson({ a: 1n }), TypeError);
  });
});

function reversedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversedKeys);
  if (!value || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value)
      .reverse()
      .map(([k, v]) => [k, reversedKeys(v)]),
  );
}
