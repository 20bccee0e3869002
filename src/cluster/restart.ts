/**
 * The pure half of restarting one component of a running cluster (cluster.ts's
 * restartComponent): which records name the process, and what environment the new one gets.
 * A real node's processes are listed twice, in the cluster's state (what `status` probes) and in
 * the node's journal (what teardown stops before it kills the pods): a restart that updated only
 * one would leave the new kubelet or containerd running behind a teardown.
 */
import { containerdEnvironment } from "./node/render.ts";
import type { ProcessRecord } from "./process.ts";
import type { Component, NodeComponent } from "./versions.ts";

const nodeComponents: readonly Component[] = [
  "containerd",
  "kubelet",
  "kube-proxy",
  "local-path-provisioner",
] satisfies NodeComponent[];

export const isNodeComponent = (component: Component): component is NodeComponent =>
  nodeComponents.includes(component);

/**
 * The one record of `component` in `records`. Several (a multi-node fleet's kubelets) or none
 * is an error naming the component and `where` the records come from.
 */
export function recordOf(
  records: readonly ProcessRecord[],
  component: Component,
  where: string,
): ProcessRecord {
  const found = records.filter((r) => r.component === component);
  if (found.length === 1) return found[0]!;
  throw new Error(
    found.length === 0
      ? `${where} lists no ${component} process (it lists ${[...new Set(records.map((r) => r.component))].join(", ") || "none"})`
      : `${where} lists ${found.length} ${component} processes (pids ${found.map((r) => r.pid).join(", ")}): restart one node's, not a fleet's`,
  );
}

/** `records` with the record of `old.pid` replaced by `next`, in the same place (start order matters to teardown). */
export function replaceRecord(
  records: readonly ProcessRecord[],
  old: ProcessRecord,
  next: ProcessRecord,
): ProcessRecord[] {
  return records.map((r) => (r.pid === old.pid && r.component === old.component ? next : r));
}

/**
 * The environment `up` gave the component, for its restart: containerd pulls through the node's
 * proxy (render.ts); every other component inherits this process's environment.
 */
export function restartEnvironment(
  component: Component,
  base: NodeJS.ProcessEnv,
): NodeJS.ProcessEnv | undefined {
  return component === "containerd" ? containerdEnvironment(base) : undefined;
}
