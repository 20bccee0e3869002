/**
 * Decides whether a desired child must be applied, so a reconcile with nothing to change makes
 * no write at all. Two checks, both on fields we own only:
 *  - the hash of what we last applied (an annotation) must equal the hash of what we want now:
 *    catches fields we stopped setting, which a plain comparison would miss;
 *  - every field we set must still hold our value in the live object: catches edits by others.
 * Fields the API server or other controllers add (defaults, status, nodePort, ...) are ignored,
 * which is where the tfserving-operator went wrong (it diffed against server defaults).
 */
import { deepFreeze } from "../runtime/index.ts";
import { memoOnFrozen } from "./memo.ts";
import { annotations, shortHash } from "./names.ts";

interface WithMeta {
  metadata?: { annotations?: Record<string, string> } & Record<string, unknown>;
}

/**
 * The desired object with the hash of itself recorded in an annotation. Worked out once for a
 * frozen desired object (desired.ts memoizes them per plan): hashing a Deployment is most of
 * what deciding whether to apply it costs.
 */
export function withAppliedHash<T extends WithMeta>(desired: T): T {
  return Object.isFrozen(desired) ? (hashedFrozen(desired) as T) : addAppliedHash(desired);
}

const hashedFrozen = memoOnFrozen((desired: WithMeta) => deepFreeze(addAppliedHash(desired)));

function addAppliedHash<T extends WithMeta>(desired: T): T {
  const hash = shortHash(desired);
  return {
    ...desired,
    metadata: {
      ...desired.metadata,
      annotations: { ...desired.metadata?.annotations, [annotations.appliedHash]: hash },
    },
  };
}

export function needsApply(desiredWithHash: WithMeta, actual: WithMeta | undefined): boolean {
  if (!actual) return true;
  const want = desiredWithHash.metadata?.annotations?.[annotations.appliedHash];
  if (want === undefined || actual.metadata?.annotations?.[annotations.appliedHash] !== want) return true;
  return !holds(desiredWithHash, actual);
}

function isEmpty(v: unknown): boolean {
  if (v === undefined || v === null || v === "" || v === false) return true;
  if (Array.isArray(v)) return v.length === 0;
  return typeof v === "object" && Object.keys(v as object).length === 0;
}

// resource.Quantity is canonicalised by the API server ("1000m" reads back as "1", 1 as "1"),
// so quantities are compared by value.
const quantity = /^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$/;
const suffixes: Record<string, number> = {
  "": 1,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

export function quantityValue(v: unknown): number | undefined {
  if (typeof v === "number") return v;
  if (typeof v !== "string") return undefined;
  const m = quantity.exec(v);
  if (!m) return undefined;
  const base = Number(m[1]);
  const suffix = m[2] ?? "";
  if (Number.isNaN(base)) return undefined;
  if (/^[eE]/.test(suffix)) return base * 10 ** Number(suffix.slice(1));
  const factor = suffixes[suffix];
  return factor === undefined ? undefined : base * factor;
}

// Maps of quantities: under these keys values are compared as quantities.
const quantityMaps = new Set(["requests", "limits", "capacity"]);

/** True when every field set in `want` has the same value in `got` (extra fields in got are fine). */
export function holds(want: unknown, got: unknown, inQuantities = false): boolean {
  // An empty list or object we set may read back absent: the API server omits empty values.
  if (isEmpty(want)) return true;
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) return false;
    return want.every((w, i) => holds(w, got[i]));
  }
  if (typeof want === "object") {
    if (!got || typeof got !== "object" || Array.isArray(got)) return false;
    const g = got as Record<string, unknown>;
    return Object.entries(want as Record<string, unknown>).every(([k, w]) =>
      holds(w, g[k], inQuantities || quantityMaps.has(k)),
    );
  }
  if (want === got) return true;
  return inQuantities && sameQuantity(want, got);
}

function sameQuantity(a: unknown, b: unknown): boolean {
  const x = quantityValue(a);
  const y = quantityValue(b);
  return x !== undefined && y !== undefined && Math.abs(x - y) <= Math.abs(x) * 1e-12;
}
