/**
 * The PodSet controller: a PodSet owns N pods and keeps them at N; its status shows how many
 * exist and how many are ready. Built on the runtime alone (src/runtime), nothing else of ours.
 *
 * Pods get stable names `<podset>-<i>` for i < replicas. That makes the reconcile idempotent
 * without ReplicaSet-style "expectations": if the cache has not yet seen a pod we created, the
 * next create of the same name fails with 409 AlreadyExists and nothing is duplicated.
 */
import {
  ApiError,
  builtinKinds,
  CONTROLLER_OWNER_INDEX,
  controllerOwnerRef,
  generationChangedPredicate,
  type KubeObject,
  type Manager,
  type ReconcileContext,
  type ResourceKind,
} from "../../src/runtime/index.ts";

export const PodSetKind: ResourceKind = {
  group: "examples.mlmodel.dev",
  version: "v1alpha1",
  kind: "PodSet",
  plural: "podsets",
  namespaced: true,
};

export const FIELD_MANAGER = "podset-controller";

export interface PodSet extends KubeObject {
  spec: { replicas: number; image: string };
  status?: { replicas?: number; readyReplicas?: number; observedGeneration?: number };
}

export interface Pod extends KubeObject {
  status?: { phase?: string; conditions?: { type: string; status: string }[] };
}

export interface Plan {
  create: string[];
  delete: string[];
  status: { replicas: number; readyReplicas: number; observedGeneration: number };
}

export function podName(ps: PodSet, i: number): string {
  return `${ps.metadata.name}-${i}`;
}

function isReady(pod: Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

/** Pure: what to create and delete so that exactly pods <name>-0..N-1 exist. */
export function plan(ps: PodSet, owned: readonly Pod[]): Plan {
  const want = new Set(Array.from({ length: ps.spec.replicas }, (_, i) => podName(ps, i)));
  const live = owned.filter((p) => !p.metadata.deletionTimestamp);
  const have = new Set(live.map((p) => p.metadata.name!));
  return {
    create: [...want].filter((n) => !have.has(n)),
    delete: [...have].filter((n) => !want.has(n)).sort(),
    status: {
      replicas: live.length,
      readyReplicas: live.filter(isReady).length,
      observedGeneration: ps.metadata.generation ?? 0,
    },
  };
}

export function podFor(ps: PodSet, name: string): Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: ps.metadata.namespace,
      labels: { "examples.mlmodel.dev/podset": ps.metadata.name! },
      ownerReferences: [controllerOwnerRef(ps)],
    },
    spec: {
      containers: [
        {
          name: "main",
          image: ps.spec.image,
          securityContext: {
            allowPrivilegeEscalation: false,
            runAsNonRoot: true,
            runAsUser: 65532,
            capabilities: { drop: ["ALL"] },
            seccompProfile: { type: "RuntimeDefault" },
          },
        },
      ],
      restartPolicy: "Always",
    },
  };
}

export async function reconcilePodSet(ctx: ReconcileContext): Promise<void> {
  const ps = ctx.cache<PodSet>(PodSetKind).get(ctx.request);
  if (!ps || ps.metadata.deletionTimestamp) return; // pods go with it (garbage collection)
  const owned = ctx.cache<Pod>(builtinKinds.Pod).byIndex(CONTROLLER_OWNER_INDEX, ps.metadata.uid!);
  const p = plan(ps, owned);
  for (const name of p.create) {
    try {
      await ctx.client.create(builtinKinds.Pod, podFor(ps, name), { fieldManager: FIELD_MANAGER });
      ctx.recorder.event(ps, "Normal", "CreatedPod", `created pod ${name}`);
    } catch (err) {
      // Created before, not yet in our cache: fine, that is what stable names are for.
      if (!(err instanceof ApiError && err.code === 409)) throw err;
    }
  }
  for (const name of p.delete) {
    await ctx.client.delete(builtinKinds.Pod, { namespace: ps.metadata.namespace!, name });
    ctx.recorder.event(ps, "Normal", "DeletedPod", `deleted pod ${name}`);
  }
  const s = ps.status ?? {};
  if (
    s.replicas !== p.status.replicas ||
    s.readyReplicas !== p.status.readyReplicas ||
    s.observedGeneration !== p.status.observedGeneration
  ) {
    await ctx.client.applyStatus(
      PodSetKind,
      {
        apiVersion: "examples.mlmodel.dev/v1alpha1",
        kind: "PodSet",
        metadata: { name: ps.metadata.name!, namespace: ps.metadata.namespace! },
        status: p.status,
      },
      { fieldManager: FIELD_MANAGER, force: true },
    );
  }
  ctx.log.debug({ create: p.create.length, delete: p.delete.length, ...p.status }, "reconciled");
}

/** Registers the PodSet controller on a manager. */
export function registerPodSet(mgr: Manager, opts: { concurrency?: number } = {}) {
  return mgr
    .controller("podset")
    .for(PodSetKind, { predicates: [generationChangedPredicate()] })
    .owns(builtinKinds.Pod)
    .concurrency(opts.concurrency ?? 2)
    .reconcile(reconcilePodSet);
}
