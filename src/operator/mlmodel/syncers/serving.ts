/**
 * Syncer: the children that serve the model: its Deployment(s) and Service, and the autoscaler
 * and disruption budget some specs add. Each kind is a set: every desired child is applied when
 * it drifted and every other child of the kind that the model controls is deleted, so a plan
 * may serve from more than one Deployment (a canary beside the stable one) without a new syncer.
 */
import type {
  V1Deployment,
  V1PodDisruptionBudget,
  V1Service,
  V2HorizontalPodAutoscaler,
} from "@kubernetes/client-node";
import { builtinKinds, type OwnerReference } from "../../../runtime/index.ts";
import {
  desiredAutoscaler,
  desiredDeployment,
  desiredDisruptionBudget,
  desiredService,
} from "../../desired.ts";
import { childNames } from "../../names.ts";
import type { ServingPlan } from "../../plan.ts";
import type { WriteContext } from "../context.ts";
import type { Children } from "../observe.ts";
import { syncSet } from "./apply.ts";

/** The serving children by kind. */
export type ServingSet = Pick<Children, "deployments" | "services" | "autoscalers" | "budgets">;

export function servingChildren(children: Children): ServingSet {
  const { deployments, services, autoscalers, budgets } = children;
  return { deployments, services, autoscalers, budgets };
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
  };
}

/** Syncs every serving kind at once (independent children: one round trip, not four); returns them as they now stand. */
export async function syncServing(
  ctx: WriteContext,
  want: ServingSet,
  live: ServingSet,
): Promise<ServingSet> {
  const [deployments, services, autoscalers, budgets] = await Promise.all([
    syncSet<V1Deployment>(ctx, builtinKinds.Deployment, want.deployments, live.deployments),
    syncSet<V1Service>(ctx, builtinKinds.Service, want.services, live.services),
    syncSet<V2HorizontalPodAutoscaler>(
      ctx,
      builtinKinds.HorizontalPodAutoscaler,
      want.autoscalers,
      live.autoscalers,
    ),
    syncSet<V1PodDisruptionBudget>(ctx, builtinKinds.PodDisruptionBudget, want.budgets, live.budgets),
  ]);
  return { deployments, services, autoscalers, budgets };
}

function optional<T>(child: T | undefined): T[] {
  return child ? [child] : [];
}
