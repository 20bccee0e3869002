/**
 * Volumes for download-path models, as a user's cluster would provide them. The local control
 * plane has no volume provisioner (kwok fakes nodes, nothing mounts), so the benchmark makes
 * one hostPath PersistentVolume per model before the timed part, each pre-bound (claimRef) to
 * the claim the operator will create: the PV controller binds them as it would a provisioned
 * volume. Nothing is written to the host path: kwok's pods never run.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { childNames } from "../../src/operator/names.ts";
import { builtinKinds, type KubeClient } from "../../src/runtime/index.ts";
import { inParallel } from "../lib/stats.ts";

const runLabel = "bench.mlmodel.dev/volumes";

/** Size of each volume; the bench models ask for less (see benchModel). */
export const volumeSize = "2Gi";

/** One PersistentVolume per model, bound in advance to `<model>-model` in `namespace`. */
export async function provideVolumes(
  admin: KubeClient,
  namespace: string,
  models: readonly string[],
  parallelism: number,
): Promise<void> {
  await inParallel(models, parallelism, async (model) => {
    const claim = childNames.storage(model);
    const name = `${namespace}-${claim}`;
    await admin.create(builtinKinds.PersistentVolume, {
      apiVersion: "v1",
      kind: "PersistentVolume",
      metadata: { name, labels: { [runLabel]: namespace } },
      spec: {
        capacity: { storage: volumeSize },
        accessModes: ["ReadWriteOnce"],
        hostPath: { path: join(tmpdir(), "mlmodel-bench-volumes", name) },
        claimRef: { namespace, name: claim },
        // Retain: without a provisioner nothing could delete a hostPath volume; the bench does.
        persistentVolumeReclaimPolicy: "Retain",
      },
    });
  });
}

/** Deletes the volumes made for `namespace` (after its claims are gone). */
export async function removeVolumes(
  admin: KubeClient,
  namespace: string,
  parallelism: number,
): Promise<void> {
  const { items } = await admin.list(builtinKinds.PersistentVolume, {
    labelSelector: `${runLabel}=${namespace}`,
  });
  await inParallel(items, parallelism, async (pv) => {
    await admin.delete(builtinKinds.PersistentVolume, { name: pv.metadata.name! }).catch(() => {});
  });
}

/** The bench's volumes (of any run) being deleted: each goes once its claim is gone (PV protection). */
export async function leavingVolumes(admin: KubeClient): Promise<string[]> {
  const { items } = await admin.list(builtinKinds.PersistentVolume, { labelSelector: runLabel });
  return items.filter((pv) => pv.metadata.deletionTimestamp).map((pv) => pv.metadata.name!);
}

/** Waits until none of `names` is left among the volumes being deleted. */
export async function volumesGone(admin: KubeClient, names: readonly string[]): Promise<void> {
  const waited = new Set(names);
  while ((await leavingVolumes(admin)).some((name) => waited.has(name))) await sleep(1000);
}
