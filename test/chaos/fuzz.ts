/**
 * (5) Bad input: mutations of valid MLModel specs (wrong types, huge values, unicode, empty
 * strings, negative numbers, missing references, unknown fields, missing required fields).
 * Every case must end one of two ways: rejected by the API server with a message that names
 * the field, or accepted and given a clear status (current observedGeneration, a phase, a
 * reason and a message). Meanwhile the operator must not crash or spin, and its memory is
 * sampled.
 */
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import type { KubeClient, KubeObject } from "../../src/runtime/index.ts";
import { driverFieldManager, seededRandom, sleep } from "./churn.ts";
import { metricSum, waitReady } from "./operator-process.ts";
import { chaosNamespace, type Log, operatorErrors, operatorWrites, slopePerMin, stage } from "./scenarios.ts";

export type FuzzClass =
  | "wrongType"
  | "huge"
  | "negative"
  | "unicode"
  | "empty"
  | "missingRef"
  | "unknownField"
  | "missingField";

type Json = unknown;
type FieldType = "int" | "string" | "enum";

/** Fields worth breaking, with their type. Paths start below `spec`. */
const fields: { path: string[]; type: FieldType }[] = [
  { path: ["replicas"], type: "int" },
  { path: ["image"], type: "string" },
  { path: ["runtime"], type: "string" },
  { path: ["model", "uri"], type: "string" },
  { path: ["model", "format"], type: "string" },
  { path: ["model", "version"], type: "string" },
  { path: ["model", "path"], type: "string" },
  { path: ["model", "sha256"], type: "string" },
  { path: ["endpoint", "restPort"], type: "int" },
  { path: ["endpoint", "grpcPort"], type: "int" },
  { path: ["endpoint", "protocol"], type: "enum" },
  { path: ["endpoint", "serviceType"], type: "enum" },
  { path: ["resources", "cpu"], type: "string" },
  { path: ["resources", "memory"], type: "string" },
  { path: ["resources", "gpu"], type: "int" },
  { path: ["storage", "size"], type: "string" },
  { path: ["autoscaling", "maxReplicas"], type: "int" },
];

const valuesByClass: Record<
  Exclude<FuzzClass, "missingRef" | "unknownField" | "missingField">,
  Record<FieldType, Json[]>
> = {
  wrongType: { int: ["three", { n: 3 }], string: [12345, ["a"]], enum: [true] },
  huge: { int: [2147483648, 1e15], string: ["x".repeat(100_000)], enum: ["REST".repeat(1000)] },
  negative: { int: [-1], string: ["-1"], enum: ["-"] },
  unicode: { int: ["３"], string: ["модель-🚀-\u202e-名"], enum: ["RÉST"] },
  empty: { int: [0], string: [""], enum: [""] },
};

/** A valid custom-image model and a valid download model: the two shapes mutations start from. */
function baseSpecs(): Record<string, Json>[] {
  return [
    {
      image: "registry.example.com/fuzz/server:1",
      model: { path: "/models/fuzz" },
      replicas: 1,
      endpoint: { protocol: "REST", restPort: 8080 },
      resources: { cpu: "100m", memory: "128Mi" },
    },
    {
      model: { uri: "https://models.example.com/fuzz/model.tar.gz", format: "tensorflow", version: "1" },
      storage: { size: "1Gi" },
      replicas: 1,
      endpoint: { serviceType: "ClusterIP" },
    },
  ];
}

export interface FuzzCase {
  id: string;
  fuzzClass: FuzzClass;
  /** The mutated fields, as dotted paths under spec (for the message check). */
  paths: string[];
  spec: Record<string, Json>;
}

function setPath(obj: Record<string, Json>, path: string[], value: Json): void {
  let at = obj;
  for (const key of path.slice(0, -1)) {
    if (typeof at[key] !== "object" || at[key] === null || Array.isArray(at[key])) at[key] = {};
    at = at[key] as Record<string, Json>;
  }
  at[path.at(-1)!] = value;
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

/** One case per (base shape, field, class, value), plus the reference and structure cases. */
export function systematicCases(): FuzzCase[] {
  const cases: FuzzCase[] = [];
  const add = (fuzzClass: FuzzClass, paths: string[], spec: Record<string, Json>) =>
    cases.push({ id: `fz-${String(cases.length).padStart(4, "0")}`, fuzzClass, paths, spec });
  baseSpecs().forEach((base, b) => {
    for (const [cls, byType] of Object.entries(valuesByClass)) {
      for (const f of fields) {
        // Both shapes get the fields they share; shape-specific fields only on their shape.
        if (b === 1 && ["image", "model.path"].includes(f.path.join("."))) continue;
        for (const value of byType[f.type]) {
          const spec = clone(base);
          setPath(spec, f.path, value);
          if (f.path[0] === "autoscaling") delete spec.replicas;
          add(cls as FuzzClass, [f.path.join(".")], spec);
        }
      }
    }
    const refs: [string[], Json][] = [
      [["model", "credentialsSecretRef"], { name: "no-such-secret" }],
      [["model", "configMapRef"], { name: "no-such-configmap", key: "models.config" }],
      [["runtime"], "no-such-runtime"],
      [["model", "uri"], "pvc://no-such-claim/model"],
    ];
    for (const [path, value] of refs) {
      const spec = clone(base);
      setPath(spec, path, value);
      add("missingRef", [path.join(".")], spec);
    }
    for (const path of [["bogusField"], ["model", "bogus"], ["endpoint", "extra", "deep"]]) {
      const spec = clone(base);
      setPath(spec, path, "surprise");
      add("unknownField", [path.join(".")], spec);
    }
    for (const path of [["model"], b === 0 ? ["image"] : ["model", "uri"]]) {
      const spec = clone(base);
      let at = spec;
      for (const k of path.slice(0, -1)) at = at[k] as Record<string, Json>;
      delete at[path.at(-1)!];
      add("missingField", [path.join(".")], spec);
    }
  });
  return cases;
}

/** Random combinations of two or three systematic mutations (the long run). */
export function randomCases(count: number, seed: number): FuzzCase[] {
  const pool = systematicCases();
  const random = seededRandom(seed);
  const out: FuzzCase[] = [];
  for (let i = 0; i < count; i++) {
    const picks = Array.from(
      { length: 2 + Math.floor(random() * 2) },
      () => pool[Math.floor(random() * pool.length)]!,
    );
    const spec = clone(picks[0]!.spec);
    // Overlay the others' mutated fields onto the first.
    for (const p of picks.slice(1)) {
      for (const path of p.paths) {
        const keys = path.split(".");
        let v: Json = p.spec;
        for (const k of keys) v = (v as Record<string, Json> | undefined)?.[k];
        if (v !== undefined) setPath(spec, keys, v);
      }
    }
    out.push({
      id: `fr-${String(i).padStart(4, "0")}`,
      fuzzClass: picks[0]!.fuzzClass,
      paths: picks.flatMap((p) => p.paths),
      spec,
    });
  }
  return out;
}

export type Outcome =
  | { kind: "rejected"; code: number; namesField: boolean; message: string }
  | { kind: "accepted"; phase: string; reason: string; clear: boolean };

/**
 * True when the API's message names one of the mutated fields: its own name, or its path
 * under spec down to the part the server rejected (".spec.endpoint.extra" for an unknown
 * "extra.deep" inside endpoint).
 */
export function namesField(message: string, paths: string[]): boolean {
  return paths.some((p) => {
    const keys = p.split(".");
    if (message.includes(keys.at(-1)!)) return true;
    return keys.some((_k, i) => message.includes(`spec.${keys.slice(0, i + 1).join(".")}`));
  });
}

export interface FuzzResult {
  cases: number;
  byClass: Record<string, Record<string, number>>;
  rejectedWithoutField: string[];
  unclear: string[];
  operatorExited: boolean;
  operatorErrors: string[];
  reconciles: number;
  idleWrites: number;
  idleReconciles: number;
  rss: { first: number; max: number; last: number; slopePerMin: number; samples: number };
}

export async function fuzzScenario(opts: {
  random: number;
  seed: number;
  log: Log;
  statusTimeoutMs?: number;
}): Promise<FuzzResult> {
  const s = await stage("chaos-fuzz");
  try {
    const op = await s.start();
    await waitReady(op);
    const rss: { atMs: number; value: number }[] = [];
    const t0 = Date.now();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const v = op.rssBytes();
        if (v) rss.push({ atMs: Date.now() - t0, value: v });
        await sleep(1000);
      }
    })();
    const cases = [...systematicCases(), ...randomCases(opts.random, opts.seed)];
    const outcomes = new Map<string, Outcome>();
    for (const c of cases) {
      try {
        await s.admin.apply(mlModelKind, modelOf(c), { fieldManager: driverFieldManager, force: true });
      } catch (err) {
        const e = err as Error & { code?: number };
        outcomes.set(c.id, {
          kind: "rejected",
          code: e.code ?? 0,
          namesField: namesField(e.message, c.paths),
          message: e.message.slice(0, 300),
        });
      }
    }
    opts.log(
      `${cases.length} cases applied, ${outcomes.size} rejected; waiting for the statuses of the rest`,
    );
    const accepted = cases.filter((c) => !outcomes.has(c.id));
    const deadline = Date.now() + (opts.statusTimeoutMs ?? 120_000);
    let statuses = new Map<string, MLModel>();
    for (;;) {
      statuses = await readStatuses(s.admin);
      const pending = accepted.filter((c) => !isClear(statuses.get(c.id)));
      if (pending.length === 0 || Date.now() > deadline) break;
      await sleep(2000);
    }
    // Let transitional phases (Deploying) settle before the final reading.
    await sleep(5000);
    statuses = await readStatuses(s.admin);
    for (const c of accepted) {
      const m = statuses.get(c.id);
      outcomes.set(c.id, {
        kind: "accepted",
        phase: m?.status?.phase ?? "none",
        reason: m?.status?.reason ?? "none",
        clear: isClear(m),
      });
    }
    const before = await op.metrics();
    const writesBefore = operatorWrites(s.cluster.auditLog);
    await sleep(15_000);
    const after = await op.metrics();
    sampling = false;
    await sampler;
    return summarize(cases, outcomes, {
      operatorExited: !op.alive,
      operatorErrors: operatorErrors(s.logFile),
      reconciles: metricSum(after, "controller_runtime_reconcile_total"),
      idleWrites: operatorWrites(s.cluster.auditLog) - writesBefore,
      idleReconciles:
        metricSum(after, "controller_runtime_reconcile_total") -
        metricSum(before, "controller_runtime_reconcile_total"),
      rss: {
        first: rss[0]?.value ?? 0,
        max: Math.max(...rss.map((r) => r.value)),
        last: rss.at(-1)?.value ?? 0,
        slopePerMin: slopePerMin(rss.slice(Math.floor(rss.length / 10))),
        samples: rss.length,
      },
    });
  } finally {
    await s.stop();
  }
}

function modelOf(c: FuzzCase): KubeObject {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name: c.id, namespace: chaosNamespace },
    spec: c.spec,
  };
}

async function readStatuses(admin: KubeClient): Promise<Map<string, MLModel>> {
  const list = await admin.list<MLModel>(mlModelKind, { namespace: chaosNamespace });
  return new Map(list.items.map((m) => [m.metadata.name!, m]));
}

const phases = new Set(["Pending", "Downloading", "Deploying", "Ready", "Failed"]);

/** A clear status: about the current spec, with a known phase, a reason and a message. */
function isClear(m: MLModel | undefined): boolean {
  const s = m?.status;
  return Boolean(
    s &&
      s.observedGeneration === m?.metadata.generation &&
      phases.has(s.phase ?? "") &&
      s.reason &&
      s.message,
  );
}

function summarize(
  cases: FuzzCase[],
  outcomes: Map<string, Outcome>,
  rest: Omit<FuzzResult, "cases" | "byClass" | "rejectedWithoutField" | "unclear">,
): FuzzResult {
  const byClass: FuzzResult["byClass"] = {};
  const rejectedWithoutField: string[] = [];
  const unclear: string[] = [];
  for (const c of cases) {
    const o = outcomes.get(c.id)!;
    const label =
      o.kind === "rejected"
        ? `rejected ${o.code}${o.namesField ? "" : " (field not named)"}`
        : `accepted ${o.phase}/${o.reason}`;
    byClass[c.fuzzClass] ??= {};
    const row = byClass[c.fuzzClass]!;
    row[label] = (row[label] ?? 0) + 1;
    if (o.kind === "rejected" && !o.namesField) rejectedWithoutField.push(`${c.id} ${c.paths}: ${o.message}`);
    if (o.kind === "accepted" && !o.clear) unclear.push(`${c.id} ${c.paths}: ${o.phase}/${o.reason}`);
  }
  return { cases: cases.length, byClass, rejectedWithoutField, unclear, ...rest };
}
