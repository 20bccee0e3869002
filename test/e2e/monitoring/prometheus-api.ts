/** Reading what a test's Prometheus scraped, through its HTTP API. */
import type { RunningPrometheus } from "../../../src/cluster/prometheus.ts";

export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** One instant query; throws with Prometheus's error when it refuses the query. */
export async function query(prom: RunningPrometheus, promql: string): Promise<Sample[]> {
  const res = await fetch(`${prom.url}/api/v1/query?query=${encodeURIComponent(promql)}`);
  const body = (await res.json()) as { status: string; error?: string; data: { result: Sample[] } };
  if (body.status !== "success") throw new Error(`query ${promql}: ${body.error}`);
  return body.data.result;
}
