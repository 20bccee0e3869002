/**
 * The `mlmodel status` table: one row per MLModel with its phase, ready/desired replicas,
 * download progress, URL, age, and, when something is wrong, the condition that says why.
 * Pure: objects in, text out.
 */
import type { Condition, MLModel } from "../../api/mlmodel.ts";
import { isRunning } from "../../operator/canary/state.ts";
import { formatAge, formatBytes, oneLine, progressBar, truncate } from "./format.ts";
import { type Style, stripAnsi, visibleLength } from "./style.ts";
import { type Row, renderTable } from "./table.ts";

export interface StatusOptions {
  now: Date;
  style: Style;
  /** Show the NAMESPACE column (for --all-namespaces). */
  showNamespace?: boolean;
  /** Show the CANARY column (when a model of the table runs a canary). */
  showCanary?: boolean;
}

/** Whether the model runs a canary now (status.canary, docs/canary.md). */
export function hasRunningCanary(model: MLModel): boolean {
  return isRunning(model.status?.canary);
}

/**
 * The split at a glance: each serving revision with its ready/total replicas and share of the
 * traffic, then the step and the phase, e.g. "r3 4/4 80% · r4 1/1 20% · step 1/1 Paused".
 */
export function canaryCell(model: MLModel): string {
  const canary = model.status?.canary;
  if (!canary || !isRunning(canary)) return "-";
  const serving = (model.status?.revision?.serving ?? []).map(
    (s) =>
      `r${s.number ?? s.revision.slice(0, 7)} ${s.readyReplicas ?? 0}/${s.replicas ?? 0} ${s.trafficPercent ?? 0}%`,
  );
  const step = canary.steps ? `step ${(canary.step ?? 0) + 1}/${canary.steps} ` : "";
  return [...serving, `${step}${canary.phase}`].join(" · ");
}

/** Replicas the user asked for: spec.replicas, or the autoscaler's current target. */
export function desiredReplicas(model: MLModel): number {
  if (model.spec.replicas !== undefined) return model.spec.replicas;
  if (model.spec.autoscaling)
    return Math.max(model.status?.replicas ?? 0, model.spec.autoscaling.minReplicas ?? 1);
  return 1;
}

/**
 * The condition that explains why the model is not Ready: the step whose reason is the phase's
 * reason (the operator reports the first blocking problem), else the first step not True.
 */
export function explainingCondition(model: MLModel): Condition | undefined {
  const status = model.status;
  if (!status || status.phase === "Ready") return undefined;
  const steps = (status.conditions ?? []).filter((c) => c.type !== "Ready");
  return (
    steps.find((c) => c.status !== "True" && c.reason === status.reason) ??
    steps.find((c) => c.status === "False") ??
    status.conditions?.find((c) => c.type === "Ready" && c.status !== "True")
  );
}

/** "ModelDownloaded=False DownloadFailed: message", or the phase's own message. */
export function problemText(model: MLModel): string {
  const c = explainingCondition(model);
  if (c) return oneLine(`${c.type}=${c.status} ${c.reason}: ${c.message}`);
  const s = model.status;
  if (!s) return "no status yet: is the operator running?";
  if (s.phase === "Ready") return "";
  return oneLine(`${s.reason ?? s.phase ?? ""}${s.message ? `: ${s.message}` : ""}`);
}

export function isStale(model: MLModel): boolean {
  const observed = model.status?.observedGeneration;
  return observed !== undefined && observed < (model.metadata.generation ?? 0);
}

const barWidth = 10;

/** Download column: a bar with percent and size, the job state, or "-" when nothing is downloaded. */
export function downloadCell(model: MLModel, style: Style): string {
  const d = model.status?.download;
  const done = d?.jobState === "Succeeded" || d?.phase === "Complete";
  // Once the origin download is over (or with none), the copies onto nodes and into pods are
  // the bytes still moving: summed over nodes by the operator from the node cache's agents.
  const fill = model.status?.cache?.fill;
  if ((done || !d) && fill?.bytesTotal) {
    const fraction = Math.min(1, (fill.bytesDone ?? 0) / fill.bytesTotal);
    const where = `${fill.copies ?? 0} ${fill.copies === 1 ? "copy" : "copies"} on ${fill.nodes ?? 0} ${fill.nodes === 1 ? "node" : "nodes"}`;
    return `${progressBar(fraction, barWidth, style)} ${Math.floor(fraction * 100)}% of ${formatBytes(fill.bytesTotal)} (${where})`;
  }
  if (!d) return "-";
  if (done) {
    return `${progressBar(1, barWidth, style)} 100%`;
  }
  if (d.jobState === "Failed" || d.phase === "Failed") return style.red("failed");
  if (d.bytesTotal && d.bytesTotal > 0) {
    const fraction = (d.bytesDone ?? 0) / d.bytesTotal;
    return `${progressBar(fraction, barWidth, style)} ${Math.floor(fraction * 100)}% of ${formatBytes(d.bytesTotal)}`;
  }
  if (d.bytesDone) return `${formatBytes(d.bytesDone)} (${d.phase ?? "Downloading"})`;
  return (d.jobState ?? "Pending").toLowerCase();
}

export function phaseCell(model: MLModel, style: Style): string {
  const phase = model.status?.phase ?? "Unknown";
  const text = isStale(model) ? `${phase}*` : phase;
  switch (phase) {
    case "Ready":
      return style.green(text);
    case "Failed":
      return style.red(text);
    case "Terminating":
    case "Unknown":
      return style.dim(text);
    default:
      return style.yellow(text);
  }
}

export const statusHeaders = ["NAME", "PHASE", "READY", "DOWNLOAD", "URL", "AGE", "PROBLEM"] as const;

export function statusRow(model: MLModel, options: StatusOptions): string[] {
  const { style, now } = options;
  const ready = `${model.status?.readyReplicas ?? 0}/${desiredReplicas(model)}`;
  const problem = problemText(model);
  return [
    ...(options.showNamespace ? [model.metadata.namespace ?? ""] : []),
    model.metadata.name ?? "",
    phaseCell(model, style),
    ready,
    downloadCell(model, style),
    model.status?.url ?? "-",
    ...(options.showCanary ? [canaryCell(model)] : []),
    formatAge(model.metadata.creationTimestamp, now),
    problem ? (model.status?.phase === "Failed" ? style.red(problem) : problem) : "",
  ];
}

function byNamespaceAndName(a: MLModel, b: MLModel): number {
  const key = (m: MLModel) => `${m.metadata.namespace ?? ""}/${m.metadata.name ?? ""}`;
  return key(a).localeCompare(key(b));
}

/**
 * On a terminal the PROBLEM column is cut to what is left of its width (describe shows it
 * whole); piped output keeps every character.
 */
function fitProblem(rows: string[][], headers: string[], style: Style): void {
  if (!style.rich || !style.width) return;
  const last = headers.length - 1;
  const used = headers
    .slice(0, last)
    .map((h, i) => Math.max(h.length, ...rows.map((r) => visibleLength(r[i] ?? ""))) + 3)
    .reduce((a, b) => a + b, 0);
  const room = Math.max(20, style.width - used);
  for (const row of rows) {
    const cell = row[last] ?? "";
    const plain = stripAnsi(cell);
    if (plain.length <= room) continue;
    const cut = truncate(plain, room);
    row[last] = cell === plain ? cut : style.red(cut);
  }
}

export function statusHeadersFor(showNamespace = false, showCanary = false): string[] {
  const headers: string[] = [...statusHeaders];
  if (showCanary) headers.splice(headers.indexOf("AGE"), 0, "CANARY");
  return [...(showNamespace ? ["NAMESPACE"] : []), ...headers];
}

/** The table; the CANARY column appears when one of the models runs a canary. */
export function renderStatusTable(models: readonly MLModel[], options: StatusOptions): string {
  if (models.length === 0) return "";
  const showCanary = options.showCanary ?? models.some(hasRunningCanary);
  const headers = statusHeadersFor(options.showNamespace, showCanary);
  const rows = [...models].sort(byNamespaceAndName).map((m) => statusRow(m, { ...options, showCanary }));
  fitProblem(rows, headers, options.style);
  return renderTable(headers, rows as Row[], options.style);
}
