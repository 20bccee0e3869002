/**
 * Syncer: the children that serve the model: its Deployment(s) and Service(s), the autoscaler
 * and disruption budget some specs add, and a canary's HTTPRoute. Each kind is a set: every
 * desired child is applied when it drifted and every other child of the kind that the model
 * controls is deleted, so a canary's Deployment, per-revision Services and route (canary.ts)
 * come and go through the same code as the model's own children.
 */
import type {
  V1Deployment,
  V1PodDisruptionBudget,
  V1Service,
  V2HorizontalPodAutoscaler,
} from "@kubernetes/client-node";
import { builtinKinds, type KubeObject, type OwnerReference } from "../../../runtime/index.ts";
import { httpRouteKind } from "../../canary/desired.ts";
import {
  desiredAutoscaler,
  desiredDeployment,
  desiredDisruptionBudget,
  desiredService,
} from "../../desired.ts";
import { childNames } from "../../names.ts";
import type { ServingPlan } from "../../plan.ts";
import type { WriteContext } from "../context.ts";
import type { Children } from "../observation.ts";
import { applySet, type Child, pruneSet, syncSet } from "./apply.ts";

/** The serving children by kind. */
export type ServingSet = Pick<Children, "deployments" | "services" | "autoscalers" | "budgets" | "routes">;

export function servingChildren(children: Children): ServingSet {
  const { deployments, services, autoscalers, budgets, routes } = children;
  return { deployments, services, autoscalers, budgets, routes };
}

/** What the plan serves with (pure). The Deployment keeps the live replica count while an autoscaler takes over. */
export function desiredServing(plan: ServingPlan, owner: OwnerReference, live: ServingSet): ServingSet {
  const deployment = live.deployments.find((d) => d.metadata?.name === childNames.deployment(plan.name));
  const autoscaler = live.autoscalers.find((a) => a.metadata?.name === childNames.autoscaler(plan.name));
  return {
    deployments: [desiredDeployment(plan, owner, { deployment, autoscaler })],
    services: [desiredService(plan, owner)],
    autoscalers: optional<V2HorizontalPodAutoscaler>(desiredAutoscaler(plan, owner)),
    budgets: optional<V1PodDisruptionBudget>(desiredDisruptionBudget(plan, owner)),
    routes: [],
  };
}

/**
 * Syncs the serving children (independent kinds in parallel: one round trip, not five) and
 * returns them as they now stand. Applies come first and deletions last, with the HTTPRoute
 * between: a route never points at a Service not yet created, nor at one already deleted.
 * Routes are in `live` only while the cluster serves HTTPRoutes and desired only then
 * (canary.ts), so without the Gateway API no route request is made.
 */
export async function syncServing(
  ctx: WriteContext,
  want: ServingSet,
  live: ServingSet,
): Promise<ServingSet> {
  const kinds = [
    [builtinKinds.Deployment, want.deployments, live.deployments],
    [builtinKinds.Service, want.services, live.services],
    [builtinKinds.HorizontalPodAutoscaler, want.autoscalers, live.autoscalers],
    [builtinKinds.PodDisruptionBudget, want.budgets, live.budgets],
  ] as const;
  const [deployments, services, autoscalers, budgets] = (await Promise.all(
    kinds.map(([kind, desired, current]) => applySet<Child>(ctx, kind, desired, current)),
  )) as [V1Deployment[], V1Service[], V2HorizontalPodAutoscaler[], V1PodDisruptionBudget[]];
  await syncSet<KubeObject>(ctx, httpRouteKind, want.routes, live.routes);
  await Promise.all(kinds.map(([kind, desired, current]) => pruneSet<Child>(ctx, kind, desired, current)));
  // A route is read for its weights (the status's traffic shares): the ones just applied.
  return { deployments, services, autoscalers, budgets, routes: want.routes };
}

function optional<T>(child: T | undefined): T[] {
  return child ? [child] : [];
}
