/**
 * CPU and memory of another process from /proc (Linux): what the kernel counted, independent
 * of what the process reports about itself.
 */
import { readFileSync } from "node:fs";

export interface ProcStats {
  /** User + system CPU seconds used so far. */
  cpuSeconds: number;
  rssMiB: number;
  /** The resident set's file-backed pages (the Node binary's code, mapped files) and anonymous ones (heaps). */
  rssFileMiB: number;
  rssAnonMiB: number;
  /** Peak resident set size over the process's life (VmHWM). */
  peakRssMiB: number;
}

// USER_HZ is 100 on every Linux we run on (sysconf(_SC_CLK_TCK)); Node has no call for it.
const ticksPerSecond = 100;

/** Fields 14 and 15 (utime, stime) of /proc/PID/stat; the command may contain spaces, so split after ")". */
export function parseCpuSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
}

/** A "VmRSS:   1234 kB" line of /proc/PID/status, in MiB. */
export function parseStatusKiB(status: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (!m) throw new Error(`/proc status has no ${field} line`);
  return Number(m[1]) / 1024;
}

export function procStats(pid: number): ProcStats {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return {
    cpuSeconds: parseCpuSeconds(readFileSync(`/proc/${pid}/stat`, "utf8")),
    rssMiB: parseStatusKiB(status, "VmRSS"),
    rssFileMiB: parseStatusKiB(status, "RssFile"),
    rssAnonMiB: parseStatusKiB(status, "RssAnon"),
    peakRssMiB: parseStatusKiB(status, "VmHWM"),
  };
}
