/**
 * Counts writes in the API server's audit log (JSON lines; the local control plane logs writes
 * only). An independent witness next to the operator's own request counters: a write the
 * operator's metrics missed would still show here.
 */
import { readFileSync, statSync } from "node:fs";

export interface AuditWrites {
  total: number;
  /** "verb resource[/subresource]" -> count */
  byVerbResource: Record<string, number>;
  /** When the last counted write was received (epoch ms), if the log said. */
  lastAt?: number;
}

/** Only writes received in [fromMs, toMs) (epoch ms; either end open when undefined). */
export interface AuditWindow {
  fromMs?: number;
  toMs?: number;
}

interface AuditEvent {
  stage?: string;
  verb?: string;
  user?: { username?: string };
  objectRef?: { resource?: string; subresource?: string };
  requestReceivedTimestamp?: string;
}

const writeVerbs = new Set(["create", "update", "patch", "delete", "deletecollection"]);

function inWindow(receivedMs: number, w: AuditWindow): boolean {
  if (Number.isNaN(receivedMs)) return w.fromMs === undefined && w.toMs === undefined;
  return (w.fromMs === undefined || receivedMs >= w.fromMs) && (w.toMs === undefined || receivedMs < w.toMs);
}

/** Writes by `username` in audit JSON lines (one event per request: the ResponseComplete stage). */
export function countWrites(lines: string, username: string, window: AuditWindow = {}): AuditWrites {
  const out: AuditWrites = { total: 0, byVerbResource: {} };
  for (const raw of lines.split("\n")) {
    if (!raw.includes(username)) continue;
    let e: AuditEvent;
    try {
      e = JSON.parse(raw) as AuditEvent;
    } catch {
      continue; // a line cut by a concurrent write at the end of the window
    }
    if (e.user?.username !== username || !e.verb || !writeVerbs.has(e.verb)) continue;
    if (e.stage && e.stage !== "ResponseComplete") continue;
    const received = Date.parse(e.requestReceivedTimestamp ?? "");
    if (!inWindow(received, window)) continue;
    const r = e.objectRef;
    const key = `${e.verb} ${r?.resource ?? "?"}${r?.subresource ? `/${r.subresource}` : ""}`;
    out.byVerbResource[key] = (out.byVerbResource[key] ?? 0) + 1;
    out.total++;
    if (!Number.isNaN(received)) out.lastAt = Math.max(out.lastAt ?? received, received);
  }
  return out;
}

/** The log's size now: a window's start, to read only what was written after it. */
export function auditOffset(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Writes by `username` logged since `offset` (and received within `window`, if given). */
export function writesSince(
  path: string,
  offset: number,
  username: string,
  window: AuditWindow = {},
): AuditWrites {
  const all = readFileSync(path);
  // A smaller file than the offset was rotated (--audit-log-maxsize): count all of the new one.
  const start = all.length < offset ? 0 : offset;
  return countWrites(all.subarray(start).toString("utf8"), username, window);
}
