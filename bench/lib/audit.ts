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
}

interface AuditEvent {
  stage?: string;
  verb?: string;
  user?: { username?: string };
  objectRef?: { resource?: string; subresource?: string };
}

const writeVerbs = new Set(["create", "update", "patch", "delete", "deletecollection"]);

/** Writes by `username` in audit JSON lines (one event per request: the ResponseComplete stage). */
export function countWrites(lines: string, username: string): AuditWrites {
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
    const r = e.objectRef;
    const key = `${e.verb} ${r?.resource ?? "?"}${r?.subresource ? `/${r.subresource}` : ""}`;
    out.byVerbResource[key] = (out.byVerbResource[key] ?? 0) + 1;
    out.total++;
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

/** Writes by `username` logged since `offset`. */
export function writesSince(path: string, offset: number, username: string): AuditWrites {
  const all = readFileSync(path);
  // A smaller file than the offset was rotated (--audit-log-maxsize): count all of the new one.
  const start = all.length < offset ? 0 : offset;
  return countWrites(all.subarray(start).toString("utf8"), username);
}
