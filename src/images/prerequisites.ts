/**
 * What building images needs from the machine, whether it is there, and how to get it.
 *
 * Building needs root on Linux x86-64 (mmdebstrap's root mode chroots and creates device
 * nodes), mmdebstrap, GNU tar, unshare and npm. Running an image outside a cluster (the image
 * tests) also needs containerd's `ctr` and runc. The Debian packages install with apt-get.
 */
import { spawnSync } from "node:child_process";
import { aptInstall } from "../cluster/index.ts";

export type Support = { ok: true } | { ok: false; reason: string };

/** Debian packages that bring the commands below. */
export const imageAptPackages = [
  "mmdebstrap",
  "debian-archive-keyring",
  "containerd",
  "runc",
  "tar",
  "util-linux",
] as const;

const tools: { command: string; args: string[]; from: string; expect?: RegExp }[] = [
  { command: "mmdebstrap", args: ["--version"], from: "the mmdebstrap package" },
  { command: "tar", args: ["--version"], from: "the tar package (GNU tar)", expect: /GNU tar/ },
  { command: "unshare", args: ["--version"], from: "the util-linux package" },
  { command: "ctr", args: ["--version"], from: "the containerd package" },
  { command: "containerd", args: ["--version"], from: "the containerd package" },
  { command: "runc", args: ["--version"], from: "the runc package" },
  { command: "npm", args: ["--version"], from: "Node.js's npm" },
];

function missingTools(): string[] {
  return tools
    .filter((t) => {
      const r = spawnSync(t.command, t.args, { encoding: "utf8" });
      return r.error || r.status !== 0 || (t.expect && !t.expect.test(r.stdout));
    })
    .map((t) => `${t.command} (${t.from})`);
}

/** Why this machine can never build the images (no package would help), or undefined. */
export function machineProblem(): string | undefined {
  if (process.platform !== "linux" || process.arch !== "x64") {
    return `images are built for linux/amd64 on a Linux x86-64 machine; this is ${process.platform}/${process.arch}`;
  }
  if (process.getuid?.() !== 0) return "building images needs root (mmdebstrap --mode=root chroots)";
  return undefined;
}

/** Whether this machine can build and run the images now (nothing is installed). */
export async function imagesSupport(): Promise<Support> {
  const problem = machineProblem();
  if (problem) return { ok: false, reason: problem };
  const missing = missingTools();
  if (missing.length > 0) {
    return {
      ok: false,
      reason: `missing ${missing.join(", ")}; install with: apt-get install -y ${imageAptPackages.join(" ")}`,
    };
  }
  return { ok: true };
}

/**
 * Installs the Debian packages the image builds need when a tool is missing (as root, with
 * apt-get); throws an error naming what is missing and why it could not be installed.
 */
export async function ensureImagePrerequisites(progress: (line: string) => void = () => {}): Promise<void> {
  const problem = machineProblem();
  if (problem) throw new Error(problem);
  if (missingTools().length === 0) return;
  await aptInstall(imageAptPackages, progress);
  const missing = missingTools();
  if (missing.length > 0)
    throw new Error(`after installing ${imageAptPackages.join(" ")}, still missing: ${missing.join(", ")}`);
}
