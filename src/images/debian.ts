/**
 * A Debian root filesystem made by mmdebstrap: minbase plus named packages, the users an
 * image runs as, and optionally a Python virtualenv filled from a hash-pinned requirements lock.
 *
 * Packages come from the Debian mirror this machine's apt already uses (its sources lists), so
 * a machine that reaches only its own mirror builds all the same. PyPI wheels are fetched by
 * the image's own pip (so it picks wheels for the image's Python), through the host's CA
 * bundle and proxy settings, which are copied in for the build and removed before packing.
 */
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chown, mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface ImageUser {
  name: string;
  uid: number;
  home: string;
  shell: string;
}

export interface PythonVenv {
  /** Where the virtualenv goes in the image, e.g. /opt/mlserver. */
  dir: string;
  /** A requirements file with an exact version and sha256 hashes for every package. */
  requirementsFile: string;
}

export interface DebianRootfsSpec {
  suite: "bookworm";
  packages: string[];
  users: ImageUser[];
  venv?: PythonVenv;
}

export interface DebianBuildEnv {
  epochSeconds: number;
  /** Host directory that keeps downloaded wheels between builds. */
  wheelCacheDir: string;
  progress: (line: string) => void;
}

const suites = (suite: string) => [suite, `${suite}-updates`, `${suite}-security`];

/** Documentation stripped as debian:*-slim does; copyright files stay. */
const dpkgExcludes = [
  "path-exclude=/usr/share/doc/*",
  "path-include=/usr/share/doc/*/copyright",
  "path-exclude=/usr/share/man/*",
  "path-exclude=/usr/share/info/*",
  "path-exclude=/usr/share/locale/*",
  "path-include=/usr/share/locale/locale.alias",
];

interface AptSource {
  uri: string;
  suite: string;
  components: string[];
}

/**
 * The Debian entries of apt sources (one-line `deb` lists and deb822 `.sources` stanzas) for
 * `suite`, its -updates and -security, as one-line `deb` entries for mmdebstrap.
 */
export function debianMirrorLines(sourceTexts: readonly string[], suite: string): string[] {
  const wanted = new Set(suites(suite));
  const found: AptSource[] = [];
  for (const text of sourceTexts) {
    for (const line of text.split("\n")) {
      const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$/.exec(line);
      if (m) found.push({ uri: m[1]!, suite: m[2]!, components: m[3]!.trim().split(/\s+/) });
    }
    for (const stanza of text.split(/\n\s*\n/)) {
      const field = (name: string) =>
        new RegExp(`^${name}:\\s*(.+)$`, "mi").exec(stanza)?.[1]?.trim().split(/\s+/) ?? [];
      if (!field("Types").includes("deb")) continue;
      for (const uri of field("URIs"))
        for (const s of field("Suites")) found.push({ uri, suite: s, components: field("Components") });
    }
  }
  const lines = found
    .filter(
      (s) => wanted.has(s.suite) && /\/debian(-security)?\/?$/.test(s.uri) && s.components.includes("main"),
    )
    .map((s) => `deb ${s.uri} ${s.suite} main`);
  const unique = [...new Set(lines)];
  const covered = new Set(unique.map((l) => l.split(" ")[2]));
  // Whatever the machine does not list comes from Debian's own redirector.
  for (const s of suites(suite)) {
    if (covered.has(s)) continue;
    const base = s.endsWith("-security")
      ? "http://deb.debian.org/debian-security"
      : "http://deb.debian.org/debian";
    unique.push(`deb ${base} ${s} main`);
  }
  return unique;
}

function hostAptSources(): string[] {
  const texts: string[] = [];
  if (existsSync("/etc/apt/sources.list")) texts.push(readFileSync("/etc/apt/sources.list", "utf8"));
  const dir = "/etc/apt/sources.list.d";
  if (existsSync(dir)) {
    for (const f of readdirSync(dir).sort())
      if (f.endsWith(".list") || f.endsWith(".sources")) texts.push(readFileSync(join(dir, f), "utf8"));
  }
  return texts;
}

/** The CA bundle the host's own pip trusts (a proxy's CA, say), for the image's pip during the build. */
function hostCaBundle(): string {
  const candidates = [
    process.env.PIP_CERT,
    process.env.REQUESTS_CA_BUNDLE,
    process.env.SSL_CERT_FILE,
    "/etc/ssl/certs/ca-certificates.crt",
  ];
  const found = candidates.find((p) => p && existsSync(p));
  if (!found) throw new Error("no CA bundle found for pip (set PIP_CERT to one)");
  return found;
}

const passThroughEnv = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"];

/** Shell commands, run by mmdebstrap with the new root filesystem as $1. */
export function customizeHooks(spec: DebianRootfsSpec, epochSeconds: number): string[] {
  const hooks: string[] = [];
  for (const u of spec.users) {
    hooks.push(
      `chroot "$1" groupadd --gid ${u.uid} ${u.name}`,
      `chroot "$1" useradd --uid ${u.uid} --gid ${u.uid} --home-dir ${u.home} --create-home --shell ${u.shell} ${u.name}`,
    );
  }
  if (spec.venv) {
    const env = [
      "env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LC_ALL=C.UTF-8",
      `SOURCE_DATE_EPOCH=${epochSeconds}`,
      "PIP_CERT=/tmp/mlmodel-build/in/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1",
      ...passThroughEnv.filter((n) => process.env[n]).map((n) => `${n}='${process.env[n]}'`),
    ].join(" ");
    const pip = `chroot "$1" ${env} ${spec.venv.dir}/bin/pip`;
    const pins = "--only-binary=:all: --no-deps --require-hashes -r /tmp/mlmodel-build/in/requirements.lock";
    hooks.push(
      `chroot "$1" ${env} python3 -m venv ${spec.venv.dir}`,
      `${pip} download --dest /tmp/mlmodel-build/wheels ${pins}`,
      `${pip} install --no-index --find-links /tmp/mlmodel-build/wheels --no-cache-dir ${pins}`,
    );
  }
  return hooks;
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv, progress: (l: string) => void) {
  return new Promise<void>((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const collect = (chunk: Buffer) => {
      const text = chunk.toString();
      tail = (tail + text).slice(-6000);
      for (const line of text.split("\n"))
        if (/^I: |^Successfully installed/.test(line)) progress(line.trim());
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} failed (exit ${code}):\n${tail.trim()}`)),
    );
  });
}

/**
 * Builds the root filesystem into `target` (which must not exist). mmdebstrap runs in a mount
 * namespace of its own, so an interrupted build leaves no mount behind on the host.
 */
export async function buildDebianRootfs(spec: DebianRootfsSpec, target: string, env: DebianBuildEnv) {
  const scratch = `${target}.in`;
  await rm(scratch, { recursive: true, force: true });
  await mkdir(join(scratch, "in"), { recursive: true });
  await mkdir(env.wheelCacheDir, { recursive: true });
  const hooks: string[] = [];
  if (spec.venv) {
    await writeFile(join(scratch, "in", "requirements.lock"), readFileSync(spec.venv.requirementsFile));
    await writeFile(join(scratch, "in", "host-ca.crt"), readFileSync(hostCaBundle()));
    hooks.push(
      'mkdir -p "$1/tmp/mlmodel-build/in" "$1/tmp/mlmodel-build/wheels"',
      `sync-in ${join(scratch, "in")} /tmp/mlmodel-build/in`,
      `sync-in ${env.wheelCacheDir} /tmp/mlmodel-build/wheels`,
    );
  }
  hooks.push(...customizeHooks(spec, env.epochSeconds));
  if (spec.venv) hooks.push(`sync-out /tmp/mlmodel-build/wheels ${env.wheelCacheDir}`);
  const args = [
    "--mount",
    "--propagation",
    "private",
    "mmdebstrap",
    "--variant=minbase",
    "--mode=root",
    "--format=directory",
    `--include=${spec.packages.join(",")}`,
    ...dpkgExcludes.map((o) => `--dpkgopt=${o}`),
    "--aptopt=Acquire::Retries 3",
    ...hooks.map((h) => `--customize-hook=${h}`),
    spec.suite,
    target,
    ...debianMirrorLines(hostAptSources(), spec.suite),
  ];
  try {
    await run("unshare", args, { ...process.env, SOURCE_DATE_EPOCH: String(env.epochSeconds) }, env.progress);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
  // The build's scratch files, the host's name and resolver (a runtime mounts its own) and
  // device nodes (a runtime makes /dev) do not belong in an image.
  const leftovers = ["tmp/mlmodel-build", "etc/hostname", "etc/resolv.conf"];
  for (const path of leftovers) await rm(join(target, path), { recursive: true, force: true });
  for (const dev of readdirSync(join(target, "dev"))) await rm(join(target, "dev", dev), { recursive: true });
  // apt leaves its partial/ directories owned by root or by _apt depending on whether it could
  // drop privileges for the download: give them the owner apt itself sets.
  const aptUid = userId(target, "_apt");
  for (const dir of ["var/cache/apt/archives/partial", "var/lib/apt/lists/partial"]) {
    if (aptUid !== undefined && existsSync(join(target, dir))) await chown(join(target, dir), aptUid, 0);
  }
}

/** A user's uid from the root filesystem's own /etc/passwd. */
function userId(root: string, name: string): number | undefined {
  const line = readFileSync(join(root, "etc/passwd"), "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${name}:`));
  return line ? Number(line.split(":")[2]) : undefined;
}

/** `name=version` of every installed Debian package, for the build record. */
export function installedPackages(root: string): string[] {
  const status = readFileSync(join(root, "var/lib/dpkg/status"), "utf8");
  return status
    .split(/\n\n+/)
    .map((s) => [/^Package: (.+)$/m.exec(s)?.[1], /^Version: (.+)$/m.exec(s)?.[1]])
    .filter(([p, v]) => p && v)
    .map(([p, v]) => `${p}=${v}`)
    .sort();
}
