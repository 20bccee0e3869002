/**
 * How a percentage becomes replica counts and route weights. Two modes:
 *
 * - Replicas: stable and canary Deployments behind the model's one Service, which spreads
 *   requests over ready pods, so the canary's share is its share of the ready replicas. Coarse:
 *   3 replicas can give 33 % or 67 %, never 10 %. The effective percentage and whether it is
 *   exact are part of the answer, so status can say so.
 * - GatewayAPI: an HTTPRoute's weights split exactly; replicas only need to carry their share.
 *   The stable keeps all its replicas (an abort moves traffic back at once, as in Argo
 *   Rollouts with a traffic router) and the canary gets enough for its share.
 *
 * With fixed replicas the total stays spec.replicas in Replicas mode (the canary's replicas are
 * carved out of the stable's). With autoscaling the autoscaler owns the stable Deployment's
 * count, so the canary runs on top of it, sized so that its share of the replicas is the
 * percentage (see autoscaledSplit).
 */

export type SplitMode = "Replicas" | "GatewayAPI";

export interface ReplicaSplit {
  /** Replicas of the stable Deployment (with autoscaling: what the autoscaler set, unchanged). */
  stable: number;
  canary: number;
  /** The canary's traffic percent once these replicas are ready, rounded to a whole percent. */
  effectivePercent: number;
  /** Whether effectivePercent is exactly the percent asked for. */
  exact: boolean;
  /** Why the split differs from what was asked, for status and Events. */
  note?: string;
}

/** Round half up in integers, so 2.5 -> 3 without floating-point surprises. */
function roundedShare(total: number, percent: number): number {
  return Math.floor((2 * total * percent + 100) / 200);
}

function share(canary: number, total: number): number {
  return total === 0 ? 0 : Math.round((100 * canary) / total);
}

function coarse(percent: number, canary: number, total: number): string | undefined {
  if (canary * 100 === percent * total) return undefined;
  return `${total} replica(s) cannot carry ${percent}%: ${canary} of ${total} replicas gives ${share(canary, total)}% (more replicas, or spec.rollout.canary.trafficRouting.gatewayAPI, give a finer split)`;
}

/**
 * Replicas mode with spec.replicas = total. The canary gets round(total x percent / 100)
 * replicas, at least 1, and the stable keeps at least 1 below 100 %. One replica cannot be
 * split: each revision gets one (50 %).
 */
export function replicaSplit(total: number, percent: number): ReplicaSplit {
  if (total <= 0) {
    return {
      stable: 0,
      canary: 0,
      effectivePercent: 0,
      exact: false,
      note: "the model is scaled to zero: there is no traffic to split",
    };
  }
  if (percent >= 100) return { stable: 0, canary: total, effectivePercent: 100, exact: true };
  if (total === 1) {
    const exact = percent === 50;
    return {
      stable: 1,
      canary: 1,
      effectivePercent: 50,
      exact,
      ...(exact
        ? {}
        : {
            note: `one replica cannot be split: the canary runs one replica beside the stable one, which gives it 50% instead of ${percent}%`,
          }),
    };
  }
  const canary = Math.min(Math.max(roundedShare(total, percent), 1), total - 1);
  const note = coarse(percent, canary, total);
  return {
    stable: total - canary,
    canary,
    effectivePercent: share(canary, total),
    exact: note === undefined,
    ...(note ? { note } : {}),
  };
}

/**
 * Replicas mode with autoscaling. The autoscaler owns the stable Deployment's replicas; its
 * metric sees both revisions' pods (the stable Deployment's selector matches them), so it sizes
 * the stable for the whole load and does not run away. The canary runs on top:
 * round(stable x percent / (100 - percent)) replicas make its share of the replicas the
 * percent, at least 1 and at most maxReplicas. Costs that many extra pods (a 50 % step doubles
 * them); a 100 % step is capped at maxReplicas beside the stable.
 */
export function autoscaledSplit(stable: number, percent: number, maxReplicas: number): ReplicaSplit {
  if (stable <= 0) return replicaSplit(0, percent);
  const wanted = percent >= 100 ? Number.POSITIVE_INFINITY : (stable * percent) / (100 - percent);
  const canary = Math.min(Math.max(Math.round(wanted), 1), maxReplicas);
  const total = stable + canary;
  const note = coarse(percent, canary, total);
  return {
    stable,
    canary,
    effectivePercent: share(canary, total),
    exact: note === undefined,
    ...(note ? { note } : {}),
  };
}

/**
 * GatewayAPI mode: weights are exact, so the canary needs only the replicas for its share:
 * ceil(total x percent / 100), at least 1 (a weight with no ready endpoint would fail
 * requests). The stable keeps `total` (the autoscaler's count with autoscaling).
 */
export function gatewaySplit(total: number, percent: number): ReplicaSplit {
  if (total <= 0) return replicaSplit(0, percent);
  const canary = Math.min(Math.max(Math.ceil((total * percent) / 100), 1), total);
  return { stable: total, canary, effectivePercent: percent, exact: true };
}

/**
 * The stable Deployment's replicas while the canary's pods come up (Replicas mode, fixed
 * replicas): it gives up one replica per ready canary replica, never more, so capacity never
 * drops below the total while the canary starts (the defect of kserve/kserve#5983).
 */
export function stableReplicasDuring(split: ReplicaSplit, total: number, canaryReady: number): number {
  const handedOver = Math.min(split.canary, Math.max(canaryReady, 0));
  return Math.max(split.stable, total - handedOver);
}

export interface RouteWeights {
  stable: number;
  canary: number;
}

/**
 * HTTPRoute weights of a step: the canary's weight only once all of its replicas are ready,
 * so the route never sends a share to a backend that cannot carry it.
 */
export function routeWeights(percent: number, canaryReady: number, canaryDesired: number): RouteWeights {
  if (canaryDesired <= 0 || canaryReady < canaryDesired) return { stable: 100, canary: 0 };
  return { stable: 100 - percent, canary: percent };
}

/**
 * The share of the traffic each revision gets now, from what is ready (Replicas mode: the
 * Service spreads over ready pods) or from the applied weights (GatewayAPI mode).
 */
export function observedShares(
  mode: SplitMode,
  ready: { stable: number; canary: number },
  weights?: RouteWeights,
): { stable: number; canary: number } {
  if (mode === "GatewayAPI" && weights) return weights;
  const total = ready.stable + ready.canary;
  if (total === 0) return { stable: 0, canary: 0 };
  const canary = share(ready.canary, total);
  return { stable: 100 - canary, canary };
}
