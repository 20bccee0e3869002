// Counts bytes and files as they land and turns them into a DownloadStatus snapshot. The rate
// is over a sliding window, so a resumed download does not report the bytes it already had as
// speed.
import type { DownloadStatus } from "./contract.ts";

const rateWindowMs = 10_000;

export class Progress {
  private readonly perFile = new Map<string, number>();
  private readonly totals = new Map<string, number>();
  private filesDoneCount = 0;
  private filesTotalCount: number | undefined;
  private bytesDoneCount = 0;
  private readonly samples: Array<{ at: number; bytes: number }> = [];
  private phase: DownloadStatus["phase"] = "Downloading";
  private readonly startedAt: Date;
  private finishedAt: Date | undefined;
  private message: string | undefined;
  private readonly now: () => number;

  constructor(now: () => number = Date.now) {
    this.now = now;
    this.startedAt = new Date(now());
  }

  setFiles(files: Array<{ path: string; size?: number }>): void {
    this.filesTotalCount = files.length;
    for (const f of files) if (f.size !== undefined) this.totals.set(f.path, f.size);
  }

  setFileSize(path: string, size: number): void {
    this.totals.set(path, size);
  }

  /** The file now has `bytes` on disk (it may go down: a restart from 0). */
  setFileBytes(path: string, bytes: number): void {
    this.bytesDoneCount += bytes - (this.perFile.get(path) ?? 0);
    this.perFile.set(path, bytes);
  }

  /** Bytes that arrived over the network now (for the rate only). */
  received(bytes: number): void {
    const at = this.now();
    const last = this.samples.at(-1);
    if (last && at - last.at < 100) last.bytes += bytes;
    else this.samples.push({ at, bytes });
    while (this.samples.length > 1 && at - this.samples[0]!.at > rateWindowMs) this.samples.shift();
  }

  fileDone(): void {
    this.filesDoneCount++;
  }

  setPhase(phase: DownloadStatus["phase"], message?: string): void {
    this.phase = phase;
    if (message !== undefined) this.message = message;
    if (phase === "Complete" || phase === "Failed") this.finishedAt = new Date(this.now());
  }

  get bytesDone(): number {
    return this.bytesDoneCount;
  }

  bytesPerSecond(): number {
    const at = this.now();
    const recent = this.samples.filter((s) => at - s.at <= rateWindowMs);
    if (recent.length === 0) return 0;
    const bytes = recent.reduce((sum, s) => sum + s.bytes, 0);
    const span = Math.max(1000, at - recent[0]!.at);
    return Math.round((bytes * 1000) / span);
  }

  /** The total when every file's size is known, else undefined. */
  bytesTotal(): number | undefined {
    if (this.filesTotalCount === undefined || this.totals.size < this.filesTotalCount) return undefined;
    let sum = 0;
    for (const v of this.totals.values()) sum += v;
    return sum;
  }

  snapshot(): DownloadStatus {
    const s: DownloadStatus = {
      phase: this.phase,
      bytesDone: this.bytesDoneCount,
      bytesPerSecond: this.phase === "Downloading" ? this.bytesPerSecond() : 0,
      filesDone: this.filesDoneCount,
      startedAt: this.startedAt.toISOString(),
      updatedAt: new Date(this.now()).toISOString(),
      progress: "",
    };
    const total = this.bytesTotal();
    if (total !== undefined) s.bytesTotal = total;
    if (this.filesTotalCount !== undefined) s.filesTotal = this.filesTotalCount;
    if (this.finishedAt) s.finishedAt = this.finishedAt.toISOString();
    if (this.message !== undefined) s.message = this.message;
    s.progress = progressText(s);
    return s;
  }
}

/** "1.2 GiB" style, for log lines. */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

/** One human line for stderr: "412.0 MiB / 1.0 GiB (40%) 85.3 MiB/s, 3/10 files". */
export function progressLine(s: DownloadStatus): string {
  const pct = s.bytesTotal ? ` (${Math.floor((100 * s.bytesDone) / s.bytesTotal)}%)` : "";
  const total = s.bytesTotal === undefined ? "" : ` / ${formatBytes(s.bytesTotal)}`;
  const files = s.filesTotal === undefined ? "" : `, ${s.filesDone}/${s.filesTotal} files`;
  return `${s.phase}: ${formatBytes(s.bytesDone)}${total}${pct} ${formatBytes(s.bytesPerSecond)}/s${files}`;
}

/** Kubernetes-style short size for a table cell: "412Mi", "1.2Gi", "980Ki", "512B". */
export function shortBytes(n: number): string {
  const units = ["B", "Ki", "Mi", "Gi", "Ti", "Pi"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  if (i === 0) return `${v}B`;
  // One decimal below 10 (1.2Gi), none above (412Mi); never "10.0".
  const text = v < 9.95 ? v.toFixed(1) : String(Math.round(v));
  return `${text}${units[i]}`;
}

/**
 * status.download.progress, the `Download` column of `kubectl get mlm`: short enough for a
 * table cell, and only what is known (no percent without a total).
 */
export function progressText(s: DownloadStatus): string {
  const total = s.bytesTotal;
  const pct = total ? `${Math.min(100, Math.floor((100 * s.bytesDone) / total))}% ` : "";
  const sizes =
    total === undefined ? shortBytes(s.bytesDone) : `${shortBytes(s.bytesDone)}/${shortBytes(total)}`;
  switch (s.phase) {
    case "Downloading": {
      const files =
        s.filesTotal !== undefined && s.filesTotal > 1 ? ` ${s.filesDone}/${s.filesTotal} files` : "";
      return `${pct}${sizes} ${shortBytes(s.bytesPerSecond)}/s${files}`;
    }
    case "Verifying":
    case "Extracting":
      return `${s.phase.toLowerCase()} ${shortBytes(s.bytesDone)}`;
    case "Complete":
      return `100% ${shortBytes(s.bytesDone)}`;
    case "Failed":
      return `failed at ${pct}${sizes}`;
  }
}
