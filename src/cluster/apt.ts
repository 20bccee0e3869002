/**
 * Debian packages, installed with apt-get: the one helper for everything this project installs
 * from Debian (the real node's packages, the image build tools, the tests' tools).
 */
import { existsSync } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ProgressFn } from "./binaries.ts";
import { run } from "./node/host.ts";

/** A prerequisite of a command that is missing and could not be installed; says what to do. */
export class PrerequisiteError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PrerequisiteError";
  }
}

/** Who asks: the running process unless a test says otherwise. */
export interface Asker {
  uid: number | undefined;
}
export const thisProcess = (): Asker => ({ uid: process.getuid?.() });

const aptEnv = () => ({ ...process.env, DEBIAN_FRONTEND: "noninteractive" });
/** Another apt-get (a second test run, say) holds dpkg's lock for a while: wait for it. */
const aptLockWait = ["-o", "DPkg::Lock::Timeout=600"];

const onPath = (command: string) =>
  (process.env.PATH ?? "")
    .split(":")
    .concat(["/usr/sbin", "/sbin"])
    .some((dir) => dir && existsSync(join(dir, command)));

/**
 * Installs Debian packages with apt-get (without recommends), refreshing the package lists once
 * when a package is unknown (a fresh machine has none), and starting none of the services they
 * bring (`withoutServiceStarts`: containerd's would otherwise run beside the node's own). Throws
 * a PrerequisiteError saying what failed and the command to run by hand: without root, without
 * apt-get, or when apt-get fails.
 */
export async function aptInstall(
  packages: readonly string[],
  progress: ProgressFn = () => {},
  asker: Asker = thisProcess(),
): Promise<void> {
  const byHand = `apt-get install -y ${packages.join(" ")}`;
  if (asker.uid !== 0)
    throw new PrerequisiteError(`installing Debian packages needs root: run sudo ${byHand}`);
  if (!onPath("apt-get"))
    throw new PrerequisiteError(
      `no apt-get on this machine: install ${packages.join(", ")} with its package manager`,
    );
  progress(`installing Debian packages: ${packages.join(" ")}`);
  const install = () =>
    run("apt-get", ["install", "-y", "--no-install-recommends", ...aptLockWait, ...packages], {
      env: aptEnv(),
    });
  const held = await withoutServiceStarts(policyRcdPath, async () => {
    let result = await install();
    if (
      result.code !== 0 &&
      /Unable to locate package|has no installation candidate|404/.test(result.stderr + result.stdout)
    ) {
      progress("refreshing the package lists (apt-get update)");
      await run("apt-get", ["update", ...aptLockWait], { env: aptEnv() });
      result = await install();
    }
    return result;
  });
  if (held.policy === "theirs")
    progress(`${policyRcdPath} exists and is not ours: it decides which services the packages start`);
  const result = held.result;
  if (result.code !== 0) {
    const tail = (result.stderr || result.stdout).trim().split("\n").slice(-6).join("\n    ");
    throw new PrerequisiteError(
      `apt-get could not install ${packages.join(" ")} (exit ${result.code}):\n    ${tail}\n` +
        `  Install them yourself (as root: ${byHand}) and run again.`,
    );
  }
}

/** Where Debian's maintainer scripts ask (invoke-rc.d, deb-systemd-invoke) whether a service may start. */
export const policyRcdPath = "/usr/sbin/policy-rc.d";

/** The first lines of the policy we write: 101 is "action forbidden" for every service. */
export const ourPolicyRcd = `#!/bin/sh
# mlmodel cluster: no service starts while it installs Debian packages (removed after).
exit 101
`;

type Policy = "ours" | "theirs";

/** The installs of this process under each policy file: the last to finish removes ours. */
const holders = new Map<string, { count: number; policy: Promise<Policy> }>();

/** Writes our policy unless one that is not ours is there; says whose policy holds. */
async function placePolicy(path: string): Promise<Policy> {
  const existing = await readFile(path, "utf8").catch(() => undefined);
  if (existing !== undefined && existing !== ourPolicyRcd) return "theirs";
  await writeFile(path, ourPolicyRcd, { mode: 0o755 });
  return "ours";
}

/**
 * Runs `action` (an apt-get install) with a policy-rc.d that forbids every service start, and
 * removes it after (once no other install of this process needs it). A policy-rc.d that is not
 * ours is left as it is and decides (a container image's most often forbids starts too); one
 * of ours left by a run that died is used and removed. `policy` says which.
 */
export async function withoutServiceStarts<T>(
  path: string,
  action: () => Promise<T>,
): Promise<{ result: T; policy: Policy }> {
  const holder = holders.get(path) ?? { count: 0, policy: placePolicy(path) };
  holders.set(path, holder);
  holder.count++;
  try {
    const policy = await holder.policy;
    return { result: await action(), policy };
  } finally {
    if (--holder.count === 0) {
      holders.delete(path);
      if ((await holder.policy.catch(() => "theirs")) === "ours") await rm(path, { force: true });
    }
  }
}
