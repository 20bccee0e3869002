/**
 * Predicates filter store changes before they become queue keys. Each sees the change and
 * answers "does this deserve a reconcile?". Deletes and adds pass the built-in "changed"
 * predicates: only an update can be "nothing changed".
 */
import type { StoreChange } from "./store.ts";
import type { KubeObject } from "./types.ts";

export type Predicate<T extends KubeObject = KubeObject> = (change: StoreChange<T>) => boolean;

/**
 * Passes updates whose metadata.generation changed (spec changes for kinds with a status
 * subresource), so a controller's own status writes do not wake it up again.
 */
export function generationChangedPredicate(): Predicate {
  return (c) => c.type !== "update" || c.old.metadata.generation !== c.object.metadata.generation;
}

/** Passes updates whose labels changed. */
export function labelsChangedPredicate(): Predicate {
  return (c) => c.type !== "update" || !sameRecord(c.old.metadata.labels, c.object.metadata.labels);
}

/** Passes updates whose annotations changed. */
export function annotationsChangedPredicate(): Predicate {
  return (c) => c.type !== "update" || !sameRecord(c.old.metadata.annotations, c.object.metadata.annotations);
}

/** Passes objects whose labels include all of `match` (the new object for updates). */
export function labelSelectorPredicate(match: Record<string, string>): Predicate {
  return (c) => {
    const labels = c.object.metadata.labels ?? {};
    return Object.entries(match).every(([k, v]) => labels[k] === v);
  };
}

/** Passes updates where the resourceVersion changed (drops relist no-ops and resyncs). */
export function resourceVersionChangedPredicate(): Predicate {
  return (c) => c.type !== "update" || c.old.metadata.resourceVersion !== c.object.metadata.resourceVersion;
}

/**
 * Passes updates where the part of the object a controller reads changed: `select` picks it
 * (e.g. a Job's status conditions and counts), and old and new picks are compared by value.
 * Adds and deletes pass. A child's status moves many times that change nothing a reconcile
 * looks at (a Deployment's observedGeneration, a Pod's IP and start times): each would be a
 * reconcile that writes nothing but costs CPU.
 */
export function selectedChangedPredicate<T extends KubeObject = KubeObject>(
  select: (obj: Readonly<T>) => unknown,
): Predicate<T> {
  return (c) => c.type !== "update" || !equalValues(select(c.old), select(c.object));
}

/** Deep equality of JSON-like values (key order does not matter; undefined equals absent). */
export function equalValues(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bs = b as unknown[];
    return a.length === bs.length && a.every((x, i) => equalValues(x, bs[i]));
  }
  const ar = a as Record<string, unknown>;
  const br = b as Record<string, unknown>;
  const keys = new Set([...Object.keys(ar), ...Object.keys(br)]);
  for (const k of keys) if (!equalValues(ar[k], br[k])) return false;
  return true;
}

/** Wraps a custom function; named for readability in builder chains. */
export function predicate<T extends KubeObject = KubeObject>(
  fn: (change: StoreChange<T>) => boolean,
): Predicate<T> {
  return fn;
}

export function or<T extends KubeObject>(...ps: Predicate<T>[]): Predicate<T> {
  return (c) => ps.some((p) => p(c));
}

export function and<T extends KubeObject>(...ps: Predicate<T>[]): Predicate<T> {
  return (c) => ps.every((p) => p(c));
}

export function not<T extends KubeObject>(p: Predicate<T>): Predicate<T> {
  return (c) => !p(c);
}

function sameRecord(a: Record<string, string> | undefined, b: Record<string, string> | undefined): boolean {
  const ak = Object.keys(a ?? {});
  const bk = Object.keys(b ?? {});
  if (ak.length !== bk.length) return false;
  return ak.every((k) => a?.[k] === b?.[k]);
}
