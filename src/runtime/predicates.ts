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
