/**
 * Samples the ready serving pods of a model (the pods its Service selects, terminating ones
 * excluded) over and over until stopped, keeping every count: a rollout test asserts the
 * minimum never dropped below what the spec promises.
 */
import type { KubeClient } from "../../../src/runtime/index.ts";
import { isReady, podsOf } from "../operator/helpers.ts";

export interface ReadySampler {
  stop(): Promise<number[]>;
}

export function sampleReadyPods(client: KubeClient, namespace: string, model: string): ReadySampler {
  const counts: number[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const pods = await podsOf(client, namespace, model);
      counts.push(pods.filter(isReady).length);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return counts;
    },
  };
}
