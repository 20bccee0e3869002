/**
 * A model's serving pods, read from the API server only when its Deployment does not say all
 * that status needs. They are not watched (caches.ts: only a canary's pods are): watched, they
 * would bring 3 events per image-path model (created, scheduled, running and ready), 3 of its
 * 10, and about a seventh of the operator's CPU per model.
 *
 * The Deployment (watched) counts its pods: replicas, updated, ready, available. Once it has
 * rolled out its generation and every desired replica is of its template, ready and available
 * (deploymentSettled), those counts are the model's and no pod is read. Otherwise the pods are:
 * which of them run the current revision and are ready, and why the others are not (pods.ts,
 * podProblem: an image that cannot be pulled, a crash loop, no node that fits), which no
 * Deployment status shows. A pod's problem can change without the Deployment's status changing,
 * so while a rollout is not settled the model is looked at again (lookAgainMs).
 *
 * A model that uses a canary reads its pods at every reconcile (in observe: the canary's stages
 * are decided from them), and its canary pods stay watched: a canary's restarts and readiness
 * times decide whether it goes on.
 */
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import type { MLModel } from "../../api/mlmodel.ts";
import { builtinKinds, type KubeObject } from "../../runtime/index.ts";
import { childNames, selectorString, servingSelector } from "../names.ts";
import type { ModelClient, ReadContext } from "./context.ts";
import { lookAfter } from "./download-pods.ts";
import type { Observation } from "./observation.ts";

/**
 * Whether the Deployment's own counts say everything about its pods: the Deployment controller
 * has seen its generation, and every desired replica (none during a scale to zero) is of its
 * template, ready and available, with no other pod left. (Terminating pods are not counted by
 * the Deployment, nor by status.replicas.)
 */
export function deploymentSettled(d: V1Deployment): boolean {
  const s = d.status ?? {};
  const desired = d.spec?.replicas ?? 1;
  return (
    (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
    (s.replicas ?? 0) === desired &&
    (s.updatedReplicas ?? 0) === desired &&
    (s.readyReplicas ?? 0) === desired &&
    (s.availableReplicas ?? 0) === desired &&
    (s.unavailableReplicas ?? 0) === 0
  );
}

/** The model's Deployment (with a canary, the stable one) among `deployments`. */
export function modelDeployment(
  model: Pick<MLModel, "metadata">,
  deployments: readonly V1Deployment[],
): V1Deployment | undefined {
  const name = childNames.deployment(model.metadata.name!);
  return deployments.find((d) => d.metadata?.name === name);
}

/**
 * Whether status needs the pods behind `deployment`: the Deployment controller has seen it
 * and it has not settled. Not for a Deployment that controller has never seen (no status
 * yet, as when this reconcile created it): it has no ReplicaSet, so no pod, and its first
 * status wakes the model (wakes.ts). Nor with no Deployment (status says it is being created).
 */
export function needsServingPods(deployment: V1Deployment | undefined): boolean {
  return (
    deployment !== undefined &&
    deployment.status?.observedGeneration !== undefined &&
    !deploymentSettled(deployment)
  );
}

/**
 * The observation with the model's serving pods read, when status needs them for its
 * Deployment as synced (its spec may have changed in this reconcile); else as it was (a model
 * that uses a canary has them already: observe.ts).
 */
export async function withServingPods(
  ctx: Pick<ReadContext, "client" | "signal">,
  o: Observation,
  deployments: readonly V1Deployment[],
): Promise<Observation> {
  if (o.pods || !needsServingPods(modelDeployment(o.model, deployments))) return o;
  const { namespace, name } = o.model.metadata;
  return {
    ...o,
    pods: await listServingPods(ctx.client, { namespace: namespace!, name: name! }, ctx.signal),
  };
}

/** The model's serving pods (every revision's, a canary's too), as the API server has them now. */
export async function listServingPods(
  client: Pick<ModelClient, "list">,
  model: { namespace: string; name: string },
  signal: AbortSignal,
): Promise<readonly V1Pod[]> {
  const { items } = await client.list<KubeObject & V1Pod>(builtinKinds.Pod, {
    namespace: model.namespace,
    labelSelector: selectorString(servingSelector(model.name)),
    withoutManagedFields: true,
    signal,
  });
  return items;
}

/**
 * When to look again at the pods of a rollout that is not settled: after a quarter of the time
 * the model has not been serving (its ServingReady condition False since, or just now when it
 * was True), between 5 s and 60 s. A pod that cannot pull its image or crash-loops is reported
 * within seconds of the kubelet saying so while the rollout is new; a model that has not served
 * for long (an image that never comes) costs one list a minute. Undefined when the pods were
 * not needed.
 */
export function lookAgainMs(
  deployment: V1Deployment | undefined,
  model: Pick<MLModel, "status">,
  now: string,
): number | undefined {
  if (!needsServingPods(deployment)) return undefined;
  const serving = model.status?.conditions?.find((c) => c.type === "ServingReady");
  const since = serving?.status === "False" ? Date.parse(serving.lastTransitionTime ?? "") : Number.NaN;
  return lookAfter(Date.parse(now) - since);
}

/**
 * Whether a look that lookAgainMs may have asked for, while the model was not Ready, would
 * read nothing new: its Deployment has settled (its counts say all). The reconcile that sees
 * this withdraws it (reconcile.ts, replacesRequeue).
 */
export function servingLookNoLongerNeeded(
  model: Pick<MLModel, "status">,
  deployment: V1Deployment | undefined,
): boolean {
  return model.status?.phase !== "Ready" && deployment !== undefined && deploymentSettled(deployment);
}
