/**
 * Runs one program of the local control plane and starts it again whenever it exits, as a
 * kubelet restarts a control plane's static pods.
 *
 * The controller manager needs it. It runs leader-elected, as on every real cluster, so it exits
 * when it cannot renew its lease: an API server outage longer than the renew deadline. A fresh
 * start is what clears its stale view of the kubelets' leases. A controller manager that stayed
 * up through the outage compares the leases it saw before it with the clock after it. It marks
 * a healthy node Unknown and that node's pods not ready, and Services drop pods that still
 * answer.
 *
 * The supervisor and its program share one process group (the supervisor leads it: it is
 * started detached), so stopping the group stops both, even when the supervisor is SIGKILLed.
 *
 * Usage (internal): node supervise.ts BINARY [ARG...]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { basename } from "node:path";

/** The first restart waits this long; each quick exit doubles it, up to maxRestartDelayMs. */
export const firstRestartDelayMs = 1000;
export const maxRestartDelayMs = 5000;
/** A run this long counts as healthy: the next exit restarts after firstRestartDelayMs again. */
export const healthyRunMs = 60_000;

/** How long to wait before starting the program again, after a run of `ranForMs`. */
export function restartDelayMs(ranForMs: number, previousDelayMs: number | undefined): number {
  if (previousDelayMs === undefined || ranForMs >= healthyRunMs) return firstRestartDelayMs;
  return Math.min(previousDelayMs * 2, maxRestartDelayMs);
}

/** The line the supervisor logs when its program exits, beside the program's own log. */
export function exitLine(
  program: string,
  exit: { code: number | null; signal: NodeJS.Signals | null },
  ranForMs: number,
  delayMs: number,
): string {
  const how = exit.signal ? `on ${exit.signal}` : `with code ${exit.code}`;
  return `supervise: ${program} exited ${how} after ${(ranForMs / 1000).toFixed(1)} s; starting it again in ${delayMs / 1000} s`;
}

function supervise(binary: string, args: string[]): void {
  const program = basename(binary);
  let child: ChildProcess | undefined;
  let stopping = false;
  let delayMs: number | undefined;
  let restartTimer: NodeJS.Timeout | undefined;

  const run = () => {
    restartTimer = undefined;
    const startedAt = Date.now();
    child = spawn(binary, args, { stdio: "inherit" });
    child.on("error", (err) => process.stderr.write(`supervise: cannot start ${binary}: ${err.message}\n`));
    child.on("exit", (code, signal) => {
      child = undefined;
      if (stopping) process.exit(0);
      const ranForMs = Date.now() - startedAt;
      delayMs = restartDelayMs(ranForMs, delayMs);
      process.stderr.write(`${exitLine(program, { code, signal }, ranForMs, delayMs)}\n`);
      restartTimer = setTimeout(run, delayMs);
    });
  };

  const stop = (signal: NodeJS.Signals) => {
    stopping = true;
    if (restartTimer) clearTimeout(restartTimer);
    if (!child) process.exit(0);
    child.kill(signal);
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  run();
}

if (import.meta.main) {
  const [binary, ...args] = process.argv.slice(2);
  if (!binary) {
    console.error("usage: node supervise.ts BINARY [ARG...]");
    process.exit(2);
  }
  supervise(binary, args);
}
