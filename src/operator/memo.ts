/**
 * What every reconcile would otherwise work out again from unchanged inputs: the plan of a
 * model, its desired children, their hashes. Every reconcile is
 * level-based and recomputes everything; most of that work is serializing and hashing the same
 * objects again (`canonicalJson`, `shortHash`). A memo here answers only for inputs that
 * cannot have changed since: objects compared as data (`sameData`), or frozen objects, which
 * are deep-frozen where the operator meets them (the informers' store, planModel, the memos of
 * desired children), keyed by identity.
 */
import { deepFreeze } from "../runtime/index.ts";
import { shortHash } from "./names.ts";

/**
 * Whether `a` and `b` are the same data: equal primitives, arrays of the same data, and plain
 * objects with the same keys (in any order) holding the same data. Anything else (a Date, a
 * Map, a class) equals only itself: a "different" that is not costs a recompute, never a stale
 * answer.
 */
export function sameData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameData(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b) || !isPlain(a) || !isPlain(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) {
    if (!Object.hasOwn(b, k)) return false;
    if (!sameData((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}

function isPlain(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * An input kept by a memo to compare later ones with: the value itself when frozen (as cached
 * objects are), else a frozen copy, so that a caller changing its object afterwards cannot make
 * a memo match inputs it was not computed from.
 */
export function keptInput<T>(value: T): T {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return value;
  return deepFreeze(structuredClone(value)) as T;
}

/**
 * `f` memoized on its argument's identity, for frozen arguments only (a frozen object here is
 * deep-frozen: see the top of this file); others are computed each time. Entries live as long
 * as their key object.
 */
export function memoOnFrozen<K extends object, V>(f: (key: K) => V): (key: K) => V {
  const memo = new WeakMap<K, V>();
  return (key) => {
    if (!Object.isFrozen(key)) return f(key);
    if (memo.has(key)) return memo.get(key) as V;
    const value = f(key);
    memo.set(key, value);
    return value;
  };
}

/** shortHash, worked out once for a frozen object (a desired child's spec). */
export const frozenHash: (value: object) => string = memoOnFrozen(shortHash);
