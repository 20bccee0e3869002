/**
 * What the canary e2e files share: the CLI as a separate process, a model's status polled until
 * it says something, its Events in order, and every object that carries its label, by kind, so
 * each scenario can end with "exactly these children, nothing orphaned".
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { httpRouteKind } from "../../../src/operator/canary/desired.ts";
import { labels } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { applyObjects, getModel, repoRoot } from "../operator/helpers.ts";

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** `mlmodel ARGS` as a separate process against the cluster of `kubeconfig` (default: $KUBECONFIG). */
export function mlmodel(args: string[], kubeconfig = process.env.KUBECONFIG): Run {
  const r = spawnSync(process.execPath, [join(repoRoot, "src", "cli", "main.ts"), ...args], {
    cwd: repoRoot,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1", ...(kubeconfig ? { KUBECONFIG: kubeconfig } : {}) },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export async function applyModel(admin: KubeClient, namespace: string, name: string, spec: MLModelSpec) {
  await applyObjects(admin, namespace, [
    { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", metadata: { name }, spec },
  ]);
}

export async function patchSpec(admin: KubeClient, namespace: string, name: string, spec: object) {
  await admin.patch(mlModelKind, { namespace, name }, { spec }, "merge");
}

export interface WaitModelOptions {
  /** Accept a status of an older generation too (default: only the current one). */
  anyGeneration?: boolean;
  intervalMs?: number;
}

/**
 * Polls the model until `check` holds for a status of its current generation (or any, if asked);
 * returns it. A timeout says what the model's status last was.
 */
export async function waitModel(
  admin: KubeClient,
  namespace: string,
  name: string,
  what: string,
  check: (m: MLModel) => boolean | Promise<boolean>,
  timeoutMs = 180_000,
  options: WaitModelOptions = {},
): Promise<MLModel> {
  let last: MLModel | undefined;
  try {
    return await waitFor(
      `${name}: ${what}`,
      async () => {
        last = await getModel(admin, namespace, name);
        const current =
          options.anyGeneration || last?.status?.observedGeneration === last?.metadata.generation;
        return last && current && (await check(last)) ? last : undefined;
      },
      { timeoutMs, ...(options.intervalMs !== undefined ? { intervalMs: options.intervalMs } : {}) },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last status: ${JSON.stringify(last?.status)}`);
  }
}

/** status.revision.serving as "role revision ready/replicas share%" lines. */
export function servingLines(m: MLModel): string[] {
  return (m.status?.revision?.serving ?? []).map(
    (s) => `${s.role} ${s.revision} ${s.readyReplicas}/${s.replicas} ${s.trafficPercent}%`,
  );
}

export interface ModelEvent {
  type: string;
  reason: string;
  note: string;
  at: string;
}

/** The model's Events, oldest first (by their event time). */
export async function modelEvents(admin: KubeClient, namespace: string, name: string): Promise<ModelEvent[]> {
  const list = await admin.list<
    KubeObject & {
      type: string;
      reason: string;
      note: string;
      eventTime?: string;
      regarding?: { name?: string };
    }
  >(builtinKinds.Event, { namespace });
  return list.items
    .filter((e) => e.regarding?.name === name)
    .map((e) => ({
      type: e.type,
      reason: e.reason,
      note: e.note,
      at: e.eventTime ?? e.metadata.creationTimestamp ?? "",
    }))
    .sort((a, b) => a.at.localeCompare(b.at));
}

export async function canaryEvents(admin: KubeClient, namespace: string, name: string): Promise<string[]> {
  return (await modelEvents(admin, namespace, name))
    .filter((e) => e.reason.startsWith("Canary"))
    .map((e) => e.reason);
}

/**
 * The model's canary Events are `expected`, in order. An Event is recorded after the status
 * that says it, so this waits a little for the last ones before it compares.
 */
export async function expectCanaryEvents(
  admin: KubeClient,
  namespace: string,
  name: string,
  expected: string[],
): Promise<void> {
  let last: string[] = [];
  await waitFor(
    `${name}'s canary Events`,
    async () => {
      last = await canaryEvents(admin, namespace, name);
      return last.length >= expected.length;
    },
    { timeoutMs: 30_000 },
  ).catch(() => {});
  assert.deepEqual(last, expected);
}

/**
 * Every object that carries the model's label, by kind, names sorted: what the operator made
 * (and what the Deployment and Job controllers made from it). HTTPRoutes only where served.
 */
export async function labelled(
  admin: KubeClient,
  namespace: string,
  model: string,
): Promise<Record<string, string[]>> {
  const labelSelector = `${labels.model}=${model}`;
  const kinds = [
    builtinKinds.Deployment,
    builtinKinds.Service,
    builtinKinds.Job,
    builtinKinds.HorizontalPodAutoscaler,
    builtinKinds.PodDisruptionBudget,
    builtinKinds.ControllerRevision,
    httpRouteKind,
  ];
  const out: Record<string, string[]> = {};
  for (const kind of kinds) {
    const items = await admin.list(kind, { namespace, labelSelector }).then(
      (l) => l.items,
      (err: unknown) => {
        if (err instanceof ApiError && err.code === 404) return [];
        throw err;
      },
    );
    const names = items.filter((i) => !i.metadata.deletionTimestamp).map((i) => i.metadata.name!);
    if (names.length) out[kind.kind] = names.sort();
  }
  return out;
}

/** The serving pods (not terminating) as "revision[/canary] ready|unready", sorted. */
export async function servingPods(admin: KubeClient, namespace: string, model: string): Promise<string[]> {
  const list = await admin.list<
    KubeObject & { status?: { conditions?: { type: string; status: string }[] } }
  >(builtinKinds.Pod, { namespace, labelSelector: `${labels.model}=${model},${labels.component}=server` });
  return list.items
    .filter((p) => !p.metadata.deletionTimestamp)
    .map((p) => {
      const track = p.metadata.labels?.["serving.mlmodel.dev/track"] ? "/canary" : "";
      const ready = p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
      return `${p.metadata.labels?.[labels.revision]}${track} ${ready ? "ready" : "unready"}`;
    })
    .sort();
}

/** n copies of a line, for comparing pod lists. */
export function times(n: number, line: string): string[] {
  return Array.from({ length: n }, () => line);
}
