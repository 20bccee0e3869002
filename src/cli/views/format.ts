/** Small formatters shared by the views: ages, sizes, the download bar, cut text. */
import type { Style } from "./style.ts";

/** kubectl's age: 42s, 5m, 3h, 2d, 1y (two units while short: 5m10s, 3h12m). */
export function formatAge(since: string | undefined, now: Date): string {
  if (!since) return "<unknown>";
  const seconds = Math.max(0, Math.floor((now.getTime() - new Date(since).getTime()) / 1000));
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 10) return `${minutes}m${seconds % 60 ? `${seconds % 60}s` : ""}`;
  if (minutes < 180) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 8) return `${hours}h${minutes % 60 ? `${minutes % 60}m` : ""}`;
  if (hours < 48) return `${hours}h`;
  const days = Math.floor(hours / 24);
  return days < 365 ? `${days}d` : `${Math.floor(days / 365)}y${days % 365 ? `${days % 365}d` : ""}`;
}

const units = ["B", "KiB", "MiB", "GiB", "TiB"];

export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** A bar of `width` cells: blocks on a terminal, `#` and `.` when plain. */
export function progressBar(fraction: number, width: number, style: Style): string {
  const clamped = Math.min(1, Math.max(0, fraction));
  const filled = Math.round(clamped * width);
  if (!style.rich) return `[${"#".repeat(filled)}${".".repeat(width - filled)}]`;
  return `${style.green("█".repeat(filled))}${style.dim("░".repeat(width - filled))}`;
}

/** Cuts text to `max` characters with an ellipsis (never mid-escape: call on plain text). */
export function truncate(text: string, max: number): string {
  if (max <= 0) return "";
  return text.length <= max ? text : `${text.slice(0, Math.max(0, max - 1))}…`;
}

/** First line of a message: table cells are one line. */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ").trim();
}
