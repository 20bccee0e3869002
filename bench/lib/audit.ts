/**
 * Counts writes in the API server's audit log (JSON lines; the local control plane logs writes
 * only). An independent witness next to the operator's own request counters: a write the
 * operator's metrics missed would still show here.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, extname, join } from "node:path";

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

/**
 * Where the log ends now: a window's start, to read only what is written after it. The file
 * (its inode) is kept with the size, so a rotation is followed: the API server renames the log
 * to a backup beside it (`--audit-log-maxsize`) and starts a new one, and the writes of the
 * window are then the backup's after `size`, the later backups', and the new log's.
 */
export interface AuditMark {
  ino: number;
  size: number;
}

export function auditOffset(path: string): AuditMark {
  try {
    const st = statSync(path);
    return { ino: st.ino, size: st.size };
  } catch {
    return { ino: -1, size: 0 };
  }
}

/** Writes by `username` logged since `mark` (and received within `window`, if given). */
export function writesSince(
  path: string,
  mark: AuditMark,
  username: string,
  window: AuditWindow = {},
): AuditWrites {
  return countWrites(textSince(path, mark), username, window);
}

/**
 * The log's text since `mark`, across rotations: the file `mark` names (the log itself, or the
 * backup it was renamed to) from its offset, then every file written after it, oldest first. A
 * backup already deleted (`--audit-log-maxbackup`) is lost, and its writes with it; a log that
 * cannot be told apart (no such inode found) is read whole.
 */
export function textSince(path: string, mark: AuditMark): string {
  const dir = dirname(path);
  const name = basename(path, extname(path));
  // Backups are named for the time of their rotation (audit-2026-11-24T21-00-34.748.log), so
  // their names sort oldest first; the log itself is the newest.
  const backups = readdirSync(dir)
    .filter((f) => f.startsWith(`${name}-`) && f.endsWith(extname(path)))
    .sort()
    .map((f) => join(dir, f));
  const files = [...backups, path].filter((f) => existsSync(f)).map((f) => ({ f, ino: statSync(f).ino }));
  const from = files.findIndex((x) => x.ino === mark.ino);
  const read = from < 0 ? files.filter((x) => x.f === path) : files.slice(from);
  return read
    .map((x, i) => {
      const all = readFileSync(x.f);
      return all.subarray(i === 0 && from >= 0 ? Math.min(mark.size, all.length) : 0).toString("utf8");
    })
    .join("\n");
}
