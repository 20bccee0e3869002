/** Building blocks for prerequisites' installs: commands, cache entries, Debian packages. */
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { withBuildLock } from "../../../src/cluster/binaries.ts";

/** Root of the test servers' cache: MLMODEL_TEST_SERVERS_DIR, else $XDG_CACHE_HOME or ~/.cache. */
export function testServersDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.MLMODEL_TEST_SERVERS_DIR) return env.MLMODEL_TEST_SERVERS_DIR;
  return join(env.XDG_CACHE_HOME || join(homedir(), ".cache"), "mlmodel-test-servers");
}

/** Runs a command to its end; rejects with the command and the tail of its output. */
export function run(
  command: string,
  args: readonly string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: { ...process.env, ...opts.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let tail = "";
    const collect = (chunk: Buffer) => {
      tail = (tail + chunk.toString()).slice(-6000);
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    child.on("error", (err) => reject(new Error(`${command} could not be started: ${err.message}`)));
    child.on("close", (code, signal) => {
      if (code === 0) resolvePromise();
      else
        reject(
          new Error(`${[command, ...args].join(" ")} failed (${signal ?? `exit ${code}`}):\n${tail.trim()}`),
        );
    });
  });
}

/** True when `command args` runs and exits 0 (e.g. `openssl version`). */
export function commandWorks(command: string, args: readonly string[]): boolean {
  const r = spawnSync(command, args, { stdio: "ignore" });
  return !r.error && r.status === 0;
}

/** Fails unless Go is on PATH, for a prerequisite built from its Go module. */
export function requireGo(what: string): void {
  if (!commandWorks("go", ["version"])) {
    throw new Error(
      `building ${what} needs Go on PATH: install Go 1.26 or newer (https://go.dev/dl, or your distribution's package)`,
    );
  }
}

const completeMarker = ".mlmodel-complete";

/** True when `dir` holds a finished install (its marker is written last). */
export function isComplete(dir: string): boolean {
  return existsSync(join(dir, completeMarker));
}

/**
 * Installs into `dir` once across processes: under a lock (two test runs at once wait for one
 * install), from an empty directory, and marked complete only at the end, so an interrupted
 * install is redone rather than trusted. In place, not renamed: a Python venv is not relocatable.
 */
export async function installOnce(dir: string, fill: (dir: string) => Promise<void>): Promise<void> {
  await mkdir(dirname(dir), { recursive: true });
  await withBuildLock(dir, async () => {
    if (isComplete(dir)) return;
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    await fill(dir);
    await writeFile(join(dir, completeMarker), `${new Date().toISOString()}\n`);
  });
}

/** Debian packages, installed as everything else of ours installs them (src/cluster/apt.ts). */
export { aptInstall } from "../../../src/cluster/index.ts";
