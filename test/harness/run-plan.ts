/**
 * How `npm test` runs the files it selected, from each file's needs (`// test-needs:`):
 *
 * - the pool: most files, several at once;
 * - the traffic lane (`live-traffic`): files that send live traffic to the run's real node and
 *   assert zero failed requests. They take the node one at a time (live-traffic.ts's lock), so
 *   in the pool they would hold its slots while they wait for each other; in a lane of their
 *   own, one at a time, they run beside the pool instead;
 * - the own-node phase (`own-real-node`): files that start real nodes of their own. They run
 *   after the others, once the run's real node has stopped, since a machine hosts one real
 *   node at a time. A file that needs both is an own-node file.
 */
export interface RunPlan {
  pool: string[];
  trafficLane: string[];
  ownNodePhase: string[];
}

export function planRun(files: readonly string[], needsOf: (file: string) => readonly string[]): RunPlan {
  const plan: RunPlan = { pool: [], trafficLane: [], ownNodePhase: [] };
  for (const file of files) {
    const needs = needsOf(file);
    if (needs.includes("own-real-node")) plan.ownNodePhase.push(file);
    else if (needs.includes("live-traffic")) plan.trafficLane.push(file);
    else plan.pool.push(file);
  }
  return plan;
}
