/**
 * Starting and stopping the control plane's processes. They run detached, each with its log
 * in a file, so that `mlmodel cluster up` can return and `mlmodel cluster down` (another
 * process, later) can stop them by pid.
 */
import { spawn } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import http, { type IncomingMessage } from "node:http";
import https from "node:https";
import { fileURLToPath } from "node:url";
import { isAlive } from "./binaries.ts";
import type { Component } from "./versions.ts";

export interface ProcessRecord<C extends Component = Component> {
  component: C;
  pid: number;
  binary: string;
  args: string[];
  log: string;
  /**
   * The pid leads a process group that is stopped as a whole: a supervisor (supervise.ts) and
   * the program it restarts, which a signal to the supervisor alone could leave running.
   */
  group?: true;
}

export class ComponentError extends Error {
  readonly component: Component;
  readonly log: string;
  constructor(component: Component, log: string, why: string) {
    super(`${component} ${why}; its log is ${log}${tailOf(log)}`);
    this.name = "ComponentError";
    this.component = component;
    this.log = log;
  }
}

function tailOf(log: string): string {
  try {
    const lines = readFileSync(log, "utf8").trimEnd().split("\n").slice(-8);
    return lines.length && lines[0] ? `\n  last lines:\n    ${lines.join("\n    ")}` : "";
  } catch {
    return "";
  }
}

export function startProcess<C extends Component>(
  component: C,
  binary: string,
  args: string[],
  log: string,
  env?: NodeJS.ProcessEnv,
): ProcessRecord<C> {
  const fd = openSync(log, "a");
  const child = spawn(binary, args, { detached: true, stdio: ["ignore", fd, fd], ...(env ? { env } : {}) });
  child.unref();
  if (child.pid === undefined) throw new ComponentError(component, log, "could not be started");
  return { component, pid: child.pid, binary, args, log };
}

const supervisorScript = fileURLToPath(new URL("./supervise.ts", import.meta.url));

/** Starts `binary` under a supervisor that starts it again whenever it exits (supervise.ts). */
export function startSupervised<C extends Component>(
  component: C,
  binary: string,
  args: string[],
  log: string,
): ProcessRecord<C> {
  return {
    ...startProcess(component, process.execPath, [supervisorScript, binary, ...args], log),
    group: true,
  };
}

/** Starts the process `record` describes again, as it was started (supervised or not). */
export function startAgain<C extends Component>(
  record: ProcessRecord<C>,
  env?: NodeJS.ProcessEnv,
): ProcessRecord<C> {
  const next = startProcess(record.component, record.binary, record.args, record.log, env);
  return record.group ? { ...next, group: true } : next;
}

/** True when pid is alive and still runs the binary we started (pids get reused). */
export async function isOurs(record: ProcessRecord): Promise<boolean> {
  if (!isAlive(record.pid)) return false;
  try {
    const cmdline = await readFile(`/proc/${record.pid}/cmdline`, "utf8");
    return cmdline.split("\0")[0] === record.binary;
  } catch {
    // No /proc (not Linux): trust the pid.
    return true;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The state letter of a `/proc/PID/stat` line (R, S, D, Z...): the field after the command's closing parenthesis. */
export function procState(stat: string): string | undefined {
  return /^\s*(\S)/.exec(stat.slice(stat.lastIndexOf(")") + 1))?.[1];
}

/**
 * True while pid runs. A zombie has exited: it only waits for its parent to reap it, which a
 * parent blocked in spawnSync (the test runner, which started the cluster) does not do until it
 * returns. A stop that waited for the pid to vanish would wait that long.
 */
function isRunning(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    return procState(readFileSync(`/proc/${pid}/stat`, "utf8")) !== "Z";
  } catch {
    // Gone meanwhile, or no /proc (not Linux): the signal's answer stands.
    return isAlive(pid);
  }
}

export async function stopProcess(record: ProcessRecord, graceMs = 5000): Promise<void> {
  if (!(await isOurs(record))) return;
  const target = record.group ? -record.pid : record.pid;
  process.kill(target, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isRunning(record.pid)) return;
    await sleep(50);
  }
  if (isRunning(record.pid)) process.kill(target, "SIGKILL");
  while (isRunning(record.pid)) await sleep(20);
}

export interface HealthTarget {
  url: string;
  ca?: string;
  cert?: string;
  key?: string;
}

/** One GET; resolves to the status code (0 when the connection failed) and the body. */
export function probe(target: HealthTarget, timeoutMs = 2000): Promise<{ code: number; body: string }> {
  return new Promise((resolve) => {
    const url = new URL(target.url);
    const onResponse = (res: IncomingMessage) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () => resolve({ code: res.statusCode ?? 0, body }));
      res.on("error", () => resolve({ code: 0, body }));
    };
    const request =
      url.protocol === "https:"
        ? https.get(
            url,
            {
              ca: target.ca,
              cert: target.cert,
              key: target.key,
              // Controller-manager and scheduler serve self-signed certs of their own.
              rejectUnauthorized: target.ca !== undefined,
              timeout: timeoutMs,
            },
            onResponse,
          )
        : http.get(url, { timeout: timeoutMs }, onResponse);
    request.on("error", () => resolve({ code: 0, body: "" }));
    request.on("timeout", () => request.destroy());
  });
}

/**
 * Waits until `check` passes, failing fast (with the component's log) if the process dies,
 * and with a timeout that names the component.
 */
export async function waitUntil(
  record: ProcessRecord,
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!isAlive(record.pid))
      throw new ComponentError(record.component, record.log, "exited during start-up");
    if (await check()) return;
    if (Date.now() > deadline) {
      throw new ComponentError(record.component, record.log, `was not ${what} after ${timeoutMs / 1000}s`);
    }
    await sleep(100);
  }
}
