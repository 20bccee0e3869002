/**
 * The MLModel controller's registration: the caches it reads, the children it owns (an
 * HTTPRoute only while the cluster serves the kind), what else wakes a model (its serving pods, the
 * objects it references, runtimes, a canary command), and how many models are reconciled at
 * once. The reconcile itself is reconcile.ts.
 */

import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import {
  builtinKinds,
  generationChangedPredicate,
  type KubeObject,
  type Manager,
  or,
  type Predicate,
  type Request,
  type ResourceKind,
} from "../../runtime/index.ts";
import { commandsChangedPredicate } from "../canary/commands.ts";
import { httpRouteKind } from "../canary/desired.ts";
import { modelCacheKeysIndex, stateKeys, stateShownChanged } from "../node-cache.ts";
import { modelCaches, modelOfPod, referenceIndex } from "./caches.ts";
import { ModelMemory } from "./memory.ts";
import { type ReconcileOptions, reconcileMLModel } from "./reconcile.ts";
import { jobWakes, OwnWrites, podWakes, specWakes, statusWakes } from "./wakes.ts";

export interface MLModelControllerOptions extends ReconcileOptions {
  concurrency?: number;
}

/**
 * MLModels reconciled in parallel. Each reconcile is a few round trips to the API server, so
 * the work is latency-bound: 8 keeps a 2-core control plane busy without flooding it.
 */
export const defaultConcurrency = 8;

export function addMLModelController(mgr: Manager, options: MLModelControllerOptions): void {
  for (const { kind, options: cacheOptions } of modelCaches) mgr.cache(kind, cacheOptions);
  const models = mgr.cache<MLModel>(mlModelKind);
  const requestOf = (m: Readonly<MLModel>): Request => ({
    namespace: m.metadata.namespace,
    name: m.metadata.name!,
  });
  const byReference =
    (kind: string) =>
    (obj: Readonly<KubeObject>): Request[] =>
      models.byIndex(referenceIndex, `${kind}/${obj.metadata.namespace}/${obj.metadata.name}`).map(requestOf);

  // What outlives one reconcile; forgotten by the wall clock too, for when no reconcile comes
  // (a burst of models, then quiet).
  const memory = options.memory ?? new ModelMemory({ expireWhileIdle: true });
  // The echoes of the children this controller creates wake nobody (wakes.ts).
  const own = new OwnWrites();
  const owned = (kind: ResourceKind, wakes?: Predicate) => ({
    predicates: wakes ? [own.predicate(kind), wakes] : [own.predicate(kind)],
  });
  // The manager's client (the one every reconcile gets), wrapped once.
  const client = own.client(mgr.client);
  mgr
    .controller("mlmodel")
    // A spec change, or a canary command (`mlmodel promote` writes an annotation).
    .for(mlModelKind, { predicates: [or(generationChangedPredicate(), commandsChangedPredicate())] })
    // A child's update wakes its model only when it changed what the reconcile reads (wakes.ts).
    .owns(builtinKinds.Deployment, owned(builtinKinds.Deployment, statusWakes))
    .owns(builtinKinds.Service, owned(builtinKinds.Service, specWakes))
    .owns(builtinKinds.Job, owned(builtinKinds.Job, jobWakes))
    .owns(builtinKinds.PersistentVolumeClaim, owned(builtinKinds.PersistentVolumeClaim, specWakes))
    .owns(builtinKinds.HorizontalPodAutoscaler, owned(builtinKinds.HorizontalPodAutoscaler, statusWakes))
    .owns(builtinKinds.PodDisruptionBudget, owned(builtinKinds.PodDisruptionBudget, statusWakes))
    .owns(builtinKinds.ControllerRevision, owned(builtinKinds.ControllerRevision, specWakes))
    // A canary's traffic split, watched only while the cluster serves the Gateway API.
    .owns(httpRouteKind, { optional: true, ...owned(httpRouteKind) })
    // A canary's pods (the only ones cached, caches.ts): their restarts and readiness.
    .watches(
      builtinKinds.Pod,
      (pod) => {
        const model = modelOfPod(pod);
        return model ? [model] : [];
      },
      { predicates: [podWakes] },
    )
    .watches(builtinKinds.Secret, byReference("Secret"))
    .watches(builtinKinds.ConfigMap, byReference("ConfigMap"))
    // A node cache agent's state: the models whose key it lists, when what status shows of
    // it changed (not its times of use).
    .watches(
      builtinKinds.ConfigMap,
      (cm) => stateKeys(cm).flatMap((key) => models.byIndex(modelCacheKeysIndex, key).map(requestOf)),
      { predicates: [stateShownChanged] },
    )
    .watches(builtinKinds.PersistentVolumeClaim, byReference("PersistentVolumeClaim"))
    .watches(servingRuntimeKind, (rt) => models.list(rt.metadata.namespace).map(requestOf))
    .watches(clusterServingRuntimeKind, () => models.list().map(requestOf))
    .concurrency(options.concurrency ?? defaultConcurrency)
    .reconcile((ctx) => reconcileMLModel({ ...ctx, client }, { ...options, memory }));
}
