/**
 * The `mlmodel describe` view: everything about one MLModel a person needs to understand it,
 * spec summary, status, conditions, revisions, the children the operator made, and events.
 * Pure: objects in, text out; children and events arrive already read from the cluster.
 */
import type { MLModel } from "../../api/mlmodel.ts";
import type { KubeObject } from "../../runtime/index.ts";
import { formatAge, formatBytes, oneLine, progressBar } from "./format.ts";
import { desiredReplicas, explainingCondition, hasRunningCanary, isStale, phaseCell } from "./status.ts";
import type { Style } from "./style.ts";
import { renderTable } from "./table.ts";

/** An events.k8s.io/v1 Event, as much of it as the view reads. */
export interface EventObject extends KubeObject {
  type?: string;
  reason?: string;
  note?: string;
  eventTime?: string | null;
  deprecatedLastTimestamp?: string;
  deprecatedCount?: number;
  series?: { count?: number; lastObservedTime?: string };
}

export interface ChildSummary {
  kind: string;
  name: string;
  state: string;
  /** True when the child is in a state that needs attention. */
  problem: boolean;
}

export interface DescribeInput {
  model: MLModel;
  children: readonly ChildSummary[];
  events: readonly EventObject[];
  now: Date;
  style: Style;
}

// biome-ignore lint/suspicious/noExplicitAny: children are read field by field as the API returns them.
type Loose = KubeObject & { spec?: any; status?: any };

function condition(obj: Loose, type: string): { status: string; reason?: string } | undefined {
  return (obj.status?.conditions as { type: string; status: string; reason?: string }[] | undefined)?.find(
    (c) => c.type === type,
  );
}

function podState(pod: Loose): ChildSummary["state"] {
  const waiting = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]
    .map((cs: { state?: { waiting?: { reason?: string } } }) => cs.state?.waiting?.reason)
    .find(Boolean);
  const ready = condition(pod, "Ready")?.status === "True";
  const scheduled = condition(pod, "PodScheduled");
  if (pod.metadata.deletionTimestamp) return "Terminating";
  if (waiting) return waiting;
  if (scheduled?.status === "False") return scheduled.reason ?? "Pending";
  return `${pod.status?.phase ?? "Pending"}${ready ? ", ready" : pod.status?.phase === "Running" ? ", not ready" : ""}`;
}

const troubledStates = /BackOff|Err|Error|Unschedulable|Failed|Lost|not ready/;

/** One line about a child object, in the terms `kubectl get` would use. */
export function summarizeChild(obj: Loose): ChildSummary {
  const name = obj.metadata.name ?? "";
  let state: string;
  switch (obj.kind) {
    case "Deployment": {
      const s = obj.status ?? {};
      state = `${s.readyReplicas ?? 0}/${obj.spec?.replicas ?? 1} ready, ${s.updatedReplicas ?? 0} up to date`;
      const progressing = condition(obj, "Progressing");
      if (progressing?.status === "False") state += ` (${progressing.reason})`;
      break;
    }
    case "Service": {
      const ports = (obj.spec?.ports ?? [])
        .map(
          (p: { port: number; name?: string; nodePort?: number }) =>
            `${p.name ? `${p.name} ` : ""}${p.port}${p.nodePort ? `:${p.nodePort}` : ""}`,
        )
        .join(", ");
      state = `${obj.spec?.type ?? "ClusterIP"} ${obj.spec?.clusterIP ?? ""} ports ${ports}`.replace(
        /\s+/g,
        " ",
      );
      break;
    }
    case "Job": {
      const s = obj.status ?? {};
      if (condition(obj, "Complete")?.status === "True") state = `Complete (${s.succeeded ?? 0} succeeded)`;
      else if (condition(obj, "Failed")?.status === "True")
        state = `Failed (${condition(obj, "Failed")?.reason ?? "failed"}, ${s.failed ?? 0} failed pods)`;
      else state = `Running (${s.active ?? 0} active, ${s.failed ?? 0} failed)`;
      break;
    }
    case "PersistentVolumeClaim":
      state = `${obj.status?.phase ?? "Pending"} ${obj.spec?.resources?.requests?.storage ?? ""}`.trim();
      break;
    case "HorizontalPodAutoscaler":
      state = `${obj.status?.currentReplicas ?? 0} replicas (min ${obj.spec?.minReplicas ?? 1}, max ${obj.spec?.maxReplicas})`;
      break;
    case "Pod":
      state = podState(obj);
      break;
    case "HTTPRoute": {
      const refs: { name?: string; weight?: number }[] = obj.spec?.rules?.[0]?.backendRefs ?? [];
      state = refs.map((b) => `${b.name} ${b.weight ?? 1}`).join(", ") || "no backends";
      break;
    }
    default:
      state = "";
  }
  return { kind: obj.kind, name, state, problem: troubledStates.test(state) };
}

function eventTime(e: EventObject): string | undefined {
  return (
    e.series?.lastObservedTime ??
    e.eventTime ??
    e.deprecatedLastTimestamp ??
    e.metadata.creationTimestamp ??
    undefined
  );
}

/** Oldest first, as kubectl describe lists them. */
export function sortEvents(events: readonly EventObject[]): EventObject[] {
  return [...events].sort((a, b) => String(eventTime(a) ?? "").localeCompare(String(eventTime(b) ?? "")));
}

function field(label: string, value: string, style: Style): string {
  return `${style.bold(`${label}:`.padEnd(14))}${value}`;
}

function section(title: string, body: string, style: Style): string {
  return `\n${style.bold(title)}\n${body
    .split("\n")
    .map((l) => `  ${l}`)
    .join("\n")}`;
}

function summaryFields(model: MLModel, now: Date, style: Style): string[] {
  const s = model.status;
  const spec = model.spec;
  const source =
    spec.model.uri ??
    (spec.model.configMapRef
      ? `ConfigMap ${spec.model.configMapRef.name}/${spec.model.configMapRef.key}`
      : spec.image
        ? `image ${spec.image}`
        : "-");
  const modelDetail = [
    spec.model.format && `format ${spec.model.format}`,
    spec.model.version && `version ${spec.model.version}`,
  ]
    .filter(Boolean)
    .join(", ");
  const lines = [
    field("Name", model.metadata.name ?? "", style),
    field("Namespace", model.metadata.namespace ?? "", style),
    field("Age", formatAge(model.metadata.creationTimestamp, now), style),
    field("Phase", `${phaseCell(model, style)}${s?.reason ? ` (${s.reason})` : ""}`, style),
    field("Message", oneLine(s?.message ?? "no status yet: is the operator running?"), style),
    field("Model", `${source}${modelDetail ? ` (${modelDetail})` : ""}`, style),
    field("Runtime", s?.runtime ?? spec.runtime ?? "-", style),
    field(
      "Replicas",
      `${desiredReplicas(model)} desired, ${s?.readyReplicas ?? 0} ready, ${s?.updatedReplicas ?? 0} current revision, ${s?.replicas ?? 0} total`,
      style,
    ),
  ];
  if (s?.url) lines.push(field("URL", s.url, style));
  if (s?.restURL && s.restURL !== s.url) lines.push(field("REST", s.restURL, style));
  if (s?.grpcURL && s.grpcURL !== s.url) lines.push(field("gRPC", s.grpcURL, style));
  const d = s?.download;
  if (d) {
    const fraction = d.jobState === "Succeeded" ? 1 : d.bytesTotal ? (d.bytesDone ?? 0) / d.bytesTotal : 0;
    const size = d.bytesTotal
      ? ` of ${formatBytes(d.bytesTotal)}`
      : d.bytesDone
        ? ` ${formatBytes(d.bytesDone)}`
        : "";
    lines.push(
      field(
        "Download",
        `${progressBar(fraction, 20, style)} ${Math.floor(fraction * 100)}%${size}, Job ${d.job ?? "-"} ${d.jobState ?? ""}, ${d.attempts ?? 0} attempt(s)${d.message ? `: ${oneLine(d.message)}` : ""}`,
        style,
      ),
    );
  }
  if (isStale(model)) {
    lines.push(
      field(
        "Note",
        style.yellow(
          `status describes generation ${s?.observedGeneration}, spec is at ${model.metadata.generation}`,
        ),
        style,
      ),
    );
  }
  return lines;
}

function conditionsTable(model: MLModel, now: Date, style: Style): string {
  const explaining = explainingCondition(model);
  const rows = (model.status?.conditions ?? []).map((c) => {
    const status =
      c.status === "True"
        ? style.green(c.status)
        : c.status === "False"
          ? style.red(c.status)
          : style.yellow(c.status);
    const marker = c === explaining ? style.red("← ") : "";
    return [c.type, status, c.reason, formatAge(c.lastTransitionTime, now), `${marker}${oneLine(c.message)}`];
  });
  return rows.length ? renderTable(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows, style) : "<none>";
}

function revisionsTable(model: MLModel, style: Style): string {
  const r = model.status?.revision;
  if (!r) return "<none>";
  const rows = (r.history ?? []).map((h) => {
    const marks = [h.revision === r.current && "current", h.revision === r.lastReady && "last ready"].filter(
      Boolean,
    );
    return [
      h.revision,
      marks.join(", ") || "-",
      h.modelURI ?? "-",
      h.modelVersion ?? "-",
      h.image ?? "-",
      h.readyAt ?? "-",
    ];
  });
  if (r.current && !(r.history ?? []).some((h) => h.revision === r.current)) {
    rows.unshift([r.current, style.yellow("current, rolling out"), "-", "-", "-", "-"]);
  }
  return rows.length
    ? renderTable(["REVISION", "STATE", "MODEL", "VERSION", "IMAGE", "READY AT"], rows, style)
    : "<none>";
}

/**
 * The canary (status.canary): what it is doing and why, its step and split, the URLs that reach
 * each revision alone, and each revision serving with its replicas and share of the traffic.
 */
function canarySection(model: MLModel, now: Date, style: Style): string {
  const c = model.status?.canary;
  if (!c?.phase) return "";
  const running = hasRunningCanary(model);
  const rev = (n: number | undefined, hash: string | undefined) => `revision ${n ?? "?"} (${hash ?? "?"})`;
  const asked = c.trafficPercent !== undefined ? `${c.trafficPercent}% asked` : "";
  const given =
    c.effectivePercent !== undefined
      ? `, ${c.effectivePercent}% given${c.exact === false ? " (coarse: the replicas cannot carry the percentage asked)" : ""}`
      : "";
  const lines = [
    field("Phase", `${c.phase}${c.reason ? ` (${c.reason})` : ""}`, style),
    field("Message", oneLine(c.message ?? ""), style),
    field("Canary", rev(c.revisionNumber, c.revision), style),
    field("Stable", rev(c.stableRevisionNumber, c.stableRevision), style),
  ];
  if (running && c.steps) lines.push(field("Step", `${(c.step ?? 0) + 1} of ${c.steps}`, style));
  if (running && asked)
    lines.push(field("Traffic", `${asked}${given}, split by ${c.mode ?? "Replicas"}`, style));
  if (c.pauseEndsAt && running) lines.push(field("Pause ends", c.pauseEndsAt, style));
  if (c.startedAt) lines.push(field("Started", `${formatAge(c.startedAt, now)} ago`, style));
  if (c.finishedAt && !running) lines.push(field("Finished", `${formatAge(c.finishedAt, now)} ago`, style));
  if (c.stableURL) lines.push(field("Stable URL", c.stableURL, style));
  if (c.canaryURL) lines.push(field("Canary URL", c.canaryURL, style));
  const serving = model.status?.revision?.serving ?? [];
  if (serving.length) {
    const rows = serving.map((x) => [
      String(x.number ?? "-"),
      x.revision,
      x.role ?? "-",
      `${x.readyReplicas ?? 0}/${x.replicas ?? 0}`,
      `${x.trafficPercent ?? 0}%`,
    ]);
    lines.push("", renderTable(["REVISION", "HASH", "ROLE", "READY", "TRAFFIC"], rows, style));
  }
  return section("Canary:", lines.join("\n"), style);
}

/**
 * The node cache (status.cache): the version's key, then per node what its agent holds of it,
 * its size, where it came from, whether a pod there serves it; and the bytes fetched from the
 * origin vs copied between nodes.
 */
function cacheSection(model: MLModel, style: Style): string {
  const s = model.status;
  const c = s?.cache;
  const lines = [field("Mode", s?.storageMode ?? "-", style)];
  if (c?.key) lines.push(field("Key", c.key, style));
  if (c?.url) lines.push(field("Agents", c.url, style));
  if (c) {
    const origin = formatBytes(c.bytesFromOrigin ?? 0);
    const peers = formatBytes(c.bytesFromPeers ?? 0);
    lines.push(
      field(
        "Cached on",
        `${c.nodesCached ?? 0} node(s); ${origin} from the origin, ${peers} from peers`,
        style,
      ),
    );
    const rows = (c.nodes ?? []).map((n) => [
      n.node,
      n.size !== undefined ? formatBytes(n.size) : "-",
      n.source === "Peer" ? `peer${n.peer ? ` ${n.peer}` : ""}` : "origin",
      n.inUse ? "yes" : "no",
    ]);
    if (rows.length) lines.push("", renderTable(["NODE", "SIZE", "FROM", "IN USE"], rows, style));
  }
  return section("Storage:", lines.join("\n"), style);
}

function childrenTable(children: readonly ChildSummary[], style: Style): string {
  if (children.length === 0) return "<none>";
  const rows = children.map((c) => [c.kind, c.name, c.problem ? style.red(c.state) : c.state]);
  return renderTable(["KIND", "NAME", "STATE"], rows, style);
}

function eventsTable(events: readonly EventObject[], now: Date, style: Style): string {
  if (events.length === 0) return "<none>";
  const rows = sortEvents(events).map((e) => {
    const count = e.series?.count ?? e.deprecatedCount;
    return [
      e.type === "Warning" ? style.red("Warning") : (e.type ?? ""),
      e.reason ?? "",
      `${formatAge(eventTime(e), now)}${count && count > 1 ? ` (x${count})` : ""}`,
      oneLine(e.note ?? ""),
    ];
  });
  return renderTable(["TYPE", "REASON", "AGE", "MESSAGE"], rows, style);
}

export function renderDescribe(input: DescribeInput): string {
  const { model, now, style } = input;
  return [
    ...summaryFields(model, now, style),
    section("Conditions:", conditionsTable(model, now, style), style),
    section("Revisions:", revisionsTable(model, style), style),
    ...(model.status?.canary?.phase ? [canarySection(model, now, style)] : []),
    ...(model.status?.storageMode ? [cacheSection(model, style)] : []),
    section("Children:", childrenTable(input.children, style), style),
    section("Events:", eventsTable(input.events, now, style), style),
  ].join("\n");
}
