/**
 * The runtime's per-object cache cost, measured in this process: the same listed MLModels put
 * into the runtime's MemoryStore as they come from the server (with managedFields) and as the
 * runtime stores them by default (managedFields stripped), heap measured after a full GC.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { mlModelKind } from "../../src/api/kinds.ts";
import {
  type KubeClient,
  type KubeObject,
  MemoryStore,
  stripManagedFields,
} from "../../src/runtime/index.ts";
import { round } from "../lib/stats.ts";

export interface StoreCost {
  objects: number;
  /** Heap per object in KiB. */
  withManagedFieldsKiB: number;
  strippedKiB: number;
}

function collector(): () => void {
  // --expose-gc at run time: `npm run bench` starts Node without flags.
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

function heapWith(gc: () => void, build: () => unknown): { bytes: number; kept: unknown } {
  gc();
  const before = process.memoryUsage().heapUsed;
  const kept = build();
  gc();
  return { bytes: process.memoryUsage().heapUsed - before, kept };
}

export async function measureStoreCost(client: KubeClient, namespace: string): Promise<StoreCost> {
  const gc = collector();
  const raw = JSON.stringify((await client.list<KubeObject>(mlModelKind, { namespace })).items);
  const fill = (transform: (o: KubeObject) => KubeObject) => () => {
    const store = new MemoryStore();
    for (const obj of JSON.parse(raw) as KubeObject[]) store.apply(transform(obj));
    return store;
  };
  const full = heapWith(
    gc,
    fill((o) => o),
  );
  const objects = (full.kept as MemoryStore).size;
  if (objects === 0) throw new Error(`no MLModels in ${namespace} to measure`);
  const fullBytes = full.bytes;
  full.kept = undefined;
  const stripped = heapWith(gc, fill(stripManagedFields));
  return {
    objects,
    withManagedFieldsKiB: round(fullBytes / objects / 1024, 2)!,
    strippedKiB: round(stripped.bytes / objects / 1024, 2)!,
  };
}
