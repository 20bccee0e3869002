/**
 * The control plane's binaries (and the real node's): taken from a directory the user names
 * (MLMODEL_CONTROLPLANE_BIN_DIR), else from a cache outside the repo keyed by version, else
 * built from Go modules through the Go module proxy and put in that cache.
 *
 * A cache entry is a directory with the binaries and a manifest of their sha256 digests,
 * written last: an entry without a manifest is an interrupted build, one whose digests do not
 * match is corrupted, and both are rebuilt. The real node runs the cached binaries as root, so
 * its cache must be one only root can change (root-owned, 0700, under parents only root can
 * write): else whoever can write there could replace a binary and its digest together.
 */
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, readFileSync } from "node:fs";
import { access, constants, mkdir, open, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { binaryCacheDir, rootOnlyProblem, tightenRootOwned, wrapperModulesDir } from "./paths.ts";
import { versions } from "./versions.ts";

export const binaryNames = [
  "etcd",
  "kube-apiserver",
  "kube-controller-manager",
  "kube-scheduler",
  "kubectl",
  "kwok",
] as const;
export type BinaryName = (typeof binaryNames)[number];
export type BinaryPaths = Record<BinaryName, string>;

/** What `cluster up --real-node` runs besides the control plane (pause goes into an image). */
export const nodeBinaryNames = ["kubelet", "kube-proxy", "local-path-provisioner", "pause"] as const;
export type NodeBinaryName = (typeof nodeBinaryNames)[number];
export type NodeBinaryPaths = Record<NodeBinaryName, string>;

export type ProgressFn = (line: string) => void;

export interface Recipe {
  /** Cache key: one directory per component and version. */
  key: string;
  binaries: string[];
  /** Go packages to build, and the module directory to build them from (undefined: `go install pkg@version`). */
  packages: string[];
  moduleDir?: string;
  /** Build tags besides the ones every recipe builds with (buildTags). */
  tags?: string[];
  ldflags: string[];
  /** What a cold build took on a 2-core machine, to set expectations. */
  coldBuild: string;
}

const k8sVersion = versions.kubernetes;
const [k8sMajor, k8sMinor] = k8sVersion.slice(1).split(".");
const versionFlags = ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"].flatMap((pkg) => [
  `-X ${pkg}.gitVersion=${k8sVersion}`,
  `-X ${pkg}.gitMajor=${k8sMajor}`,
  `-X ${pkg}.gitMinor=${k8sMinor}`,
  `-X ${pkg}.gitTreeState=clean`,
]);

export const recipes: Recipe[] = [
  {
    key: `kubernetes-${k8sVersion}`,
    binaries: ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"],
    packages: ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"].map(
      (cmd) => `k8s.io/kubernetes/cmd/${cmd}`,
    ),
    moduleDir: join(wrapperModulesDir, "kubernetes"),
    ldflags: ["-s", "-w", ...versionFlags],
    coldBuild: "about 9 minutes",
  },
  {
    key: `etcd-${versions.etcd}`,
    binaries: ["etcd"],
    packages: ["."],
    moduleDir: join(wrapperModulesDir, "etcd"),
    ldflags: ["-s", "-w"],
    coldBuild: "about 1 minute",
  },
  {
    key: `kwok-${versions.kwok}`,
    binaries: ["kwok"],
    packages: [`sigs.k8s.io/kwok/cmd/kwok@${versions.kwok}`],
    ldflags: ["-s", "-w"],
    coldBuild: "about 2 minutes",
  },
];

/** The control plane's Kubernetes binaries: the largest build, which kubelet and kube-proxy share. */
const kubernetesRecipe = recipes.find((r) => r.binaries.includes("kube-apiserver"))!;

const pauseModuleDir = join(wrapperModulesDir, "pause");

/** The pause program has no upstream version: its cache key is a digest of its source. */
function pauseSourceDigest(): string {
  const hash = createHash("sha256");
  for (const file of ["go.mod", "main.go"]) hash.update(readFileSync(join(pauseModuleDir, file)));
  return hash.digest("hex").slice(0, 12);
}

/**
 * The real node's binaries, in entries of their own so that adding them left the control
 * plane's cache entry valid. kubelet and kube-proxy come from the same wrapper module and
 * with the same version stamp as the API server they talk to.
 */
export function nodeRecipes(): Recipe[] {
  const pause = pauseSourceDigest();
  return [
    {
      key: `kubernetes-node-${k8sVersion}`,
      binaries: ["kubelet", "kube-proxy"],
      packages: ["kubelet", "kube-proxy"].map((cmd) => `k8s.io/kubernetes/cmd/${cmd}`),
      moduleDir: join(wrapperModulesDir, "kubernetes"),
      ldflags: ["-s", "-w", ...versionFlags],
      // Built after the control plane's Kubernetes binaries (nodeBuildOrder).
      coldBuild: "2-4 minutes, after the control plane's Kubernetes binaries (shared Go build cache)",
    },
    {
      key: `local-path-provisioner-${versions.localPathProvisioner}`,
      binaries: ["local-path-provisioner"],
      packages: [`github.com/rancher/local-path-provisioner@${versions.localPathProvisioner}`],
      ldflags: ["-s", "-w", `-X main.VERSION=${versions.localPathProvisioner}`],
      // It compiles a client-go tree of its own (0.30), shared with nothing else we build.
      coldBuild: "about 8 minutes",
    },
    {
      key: `pause-${pause}`,
      binaries: ["pause"],
      packages: ["."],
      moduleDir: pauseModuleDir,
      ldflags: ["-s", "-w", `-X main.version=${pause}`],
      coldBuild: "a few seconds",
    },
  ];
}

export class BinaryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BinaryError";
  }
}

const minimumGo = [1, 26] as const;

/** Checks that a Go toolchain new enough for the wrapper modules is on PATH. */
export function checkGoToolchain(): string {
  const result = spawnSync("go", ["env", "GOVERSION"], { encoding: "utf8" });
  if (result.error || result.status !== 0) {
    throw new BinaryError(
      "the local control plane's binaries are not cached and no Go toolchain was found on PATH to build them.\n" +
        `  Install Go ${minimumGo.join(".")} or newer (https://go.dev/dl, or your distribution's package), or set\n` +
        `  MLMODEL_CONTROLPLANE_BIN_DIR to a directory holding ${binaryNames.join(", ")}.`,
    );
  }
  const version = result.stdout.trim();
  const match = /^go(\d+)\.(\d+)/.exec(version);
  const [major, minor] = match ? [Number(match[1]), Number(match[2])] : [0, 0];
  if (major < minimumGo[0] || (major === minimumGo[0] && minor < minimumGo[1])) {
    throw new BinaryError(
      `Go ${minimumGo.join(".")} or newer is needed to build Kubernetes ${k8sVersion}; found ${version || "an unknown version"}.`,
    );
  }
  return version;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

interface Manifest {
  key: string;
  digests: Record<string, string>;
  goVersion: string;
  buildSeconds: number;
}

type EntryState = { state: "ok" } | { state: "missing" } | { state: "corrupted"; why: string };

export async function inspectEntry(dir: string, recipe: Recipe): Promise<EntryState> {
  const manifestPath = join(dir, "manifest.json");
  if (!existsSync(dir)) return { state: "missing" };
  if (!existsSync(manifestPath))
    return { state: "corrupted", why: "no manifest.json (an interrupted build?)" };
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await readFile(manifestPath, "utf8")) as Manifest;
  } catch {
    return { state: "corrupted", why: "unreadable manifest.json" };
  }
  for (const name of recipe.binaries) {
    const path = join(dir, name);
    try {
      await access(path, constants.X_OK);
    } catch {
      return { state: "corrupted", why: `${name} is missing or not executable` };
    }
    if ((await sha256File(path)) !== manifest.digests[name]) {
      return { state: "corrupted", why: `${name} does not match its recorded sha256` };
    }
  }
  return { state: "ok" };
}

function formatDuration(ms: number): string {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

function goEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, CGO_ENABLED: "0", GOTOOLCHAIN: "local", GOFLAGS: "-buildvcs=false", ...extra };
}

/** The build tags of a recipe: Kubernetes' own (selinux, notest) and the recipe's. */
export function buildTags(recipe: Recipe): string {
  return ["selinux", "notest", ...(recipe.tags ?? [])].join(",");
}

/** Counts the packages a build will compile, so progress can be shown as a fraction. */
function countPackages(recipe: Recipe): number | undefined {
  if (!recipe.moduleDir) return undefined;
  const result = spawnSync("go", ["list", "-deps", "-tags", buildTags(recipe), ...recipe.packages], {
    cwd: recipe.moduleDir,
    env: goEnv(),
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  return result.status === 0 ? result.stdout.split("\n").filter(Boolean).length : undefined;
}

function runGo(
  args: string[],
  cwd: string | undefined,
  env: NodeJS.ProcessEnv,
  onLine: () => void,
): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn("go", args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const collect = (chunk: Buffer) => {
      const text = chunk.toString();
      for (const line of text.split("\n")) if (line.trim()) onLine();
      tail = (tail + text).slice(-8000);
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0) resolvePromise(tail);
      else reject(new BinaryError(`go ${args[0]} failed (exit ${code}):\n${tail}`));
    });
  });
}

async function build(recipe: Recipe, dir: string, progress: ProgressFn): Promise<void> {
  const goVersion = checkGoToolchain();
  const staging = `${dir}.building-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  await mkdir(staging, { recursive: true });
  const started = Date.now();
  const total = countPackages(recipe);
  let compiled = 0;
  const report = () => {
    const fraction = total ? ` ${Math.min(compiled, total)}/${total} packages` : ` ${compiled} packages`;
    progress(`building ${recipe.key}:${fraction}, ${formatDuration(Date.now() - started)}`);
  };
  const timer = setInterval(report, 15_000);
  try {
    const common = ["-v", "-trimpath", "-tags", buildTags(recipe), "-ldflags", recipe.ldflags.join(" ")];
    if (recipe.moduleDir) {
      const out = recipe.packages.length > 1 ? `${staging}/` : join(staging, recipe.binaries[0]!);
      await runGo(
        ["build", ...common, "-o", out, ...recipe.packages],
        recipe.moduleDir,
        goEnv(),
        () => compiled++,
      );
    } else {
      await runGo(
        ["install", ...common, ...recipe.packages],
        undefined,
        goEnv({ GOBIN: staging }),
        () => compiled++,
      );
    }
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    throw err;
  } finally {
    clearInterval(timer);
  }
  const digests: Record<string, string> = {};
  for (const name of recipe.binaries) digests[name] = await sha256File(join(staging, name));
  const buildSeconds = Math.round((Date.now() - started) / 1000);
  const manifest: Manifest = { key: recipe.key, digests, goVersion, buildSeconds };
  await writeFile(join(staging, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  await rm(dir, { recursive: true, force: true });
  await rename(staging, dir);
  progress(`built ${recipe.key} in ${formatDuration(Date.now() - started)}`);
}

/**
 * Serialises builds of one cache entry across processes (two test runs, or the control plane's
 * and the real node's installs of one run, say). `onWait` hears once which process holds it.
 */
export async function withBuildLock<T>(
  dir: string,
  fn: () => Promise<T>,
  onWait: (holder: number) => void = () => {},
): Promise<T> {
  const lockPath = `${dir}.lock`;
  let waited = false;
  for (;;) {
    try {
      const handle = await open(lockPath, "wx");
      await handle.writeFile(String(process.pid));
      await handle.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = Number(await readFile(lockPath, "utf8").catch(() => "0"));
      if (!holder || !isAlive(holder)) await rm(lockPath, { force: true });
      else {
        if (!waited) onWait(holder);
        waited = true;
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lockPath, { force: true });
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function fromUserDir<N extends string>(dir: string, names: readonly N[]): Promise<Record<N, string>> {
  const missing: string[] = [];
  const paths = {} as Record<N, string>;
  for (const name of names) {
    paths[name] = join(dir, name);
    try {
      await access(paths[name], constants.X_OK);
    } catch {
      missing.push(name);
    }
  }
  if (missing.length > 0) {
    throw new BinaryError(`MLMODEL_CONTROLPLANE_BIN_DIR=${dir} lacks executable ${missing.join(", ")}.`);
  }
  return paths;
}

/** Where the cache entries live: one directory per recipe key. */
export const entriesDir = (): string => join(binaryCacheDir(), "controlplane");

/**
 * Why the cache cannot hold binaries the real node runs as root (see rootOnlyProblem), or
 * undefined; reads only (a cache not made yet has no problem).
 */
export async function nodeCacheProblem(): Promise<string | undefined> {
  const root = entriesDir();
  if (!existsSync(root)) return undefined;
  return rootOnlyProblem("the binary cache", root);
}

/**
 * Makes the cache one the real node may run binaries from, or throws why it cannot be: made
 * 0700 when missing; one made before the rule, root-owned and writable by nobody else (so
 * nobody else can have written it), tightened to 0700.
 */
async function secureNodeCache(progress: ProgressFn): Promise<void> {
  const root = entriesDir();
  await mkdir(root, { recursive: true, mode: 0o700 });
  if (await tightenRootOwned(root))
    progress(`made the binary cache ${root} mode 0700: the real node runs as root what it holds`);
  const problem = await rootOnlyProblem("the binary cache", root);
  if (problem) throw new BinaryError(problem);
}

/** Takes each recipe's entry from the cache, building (under a lock) the ones it lacks. */
export async function ensureRecipes<N extends string>(
  recipeList: Recipe[],
  progress: ProgressFn,
): Promise<Record<N, string>> {
  const root = entriesDir();
  await mkdir(root, { recursive: true });
  const paths = {} as Record<N, string>;
  for (const recipe of recipeList) {
    const dir = join(root, recipe.key);
    let entry = await inspectEntry(dir, recipe);
    if (entry.state !== "ok") {
      await withBuildLock(
        dir,
        async () => {
          entry = await inspectEntry(dir, recipe);
          if (entry.state === "ok") return;
          if (entry.state === "corrupted")
            progress(`cache entry ${dir} is corrupted (${entry.why}); rebuilding`);
          else
            progress(
              `${recipe.key} is not cached; building it from Go modules into ${dir} (cold: ${recipe.coldBuild} on 2 cores; later runs reuse it)`,
            );
          await build(recipe, dir, progress);
        },
        (holder) => progress(`waiting for the build of ${recipe.key} that pid ${holder} is running`),
      );
    }
    for (const name of recipe.binaries) paths[name as N] = join(dir, name);
  }
  return paths;
}

/**
 * Returns the path of every control-plane binary, building what the cache lacks. The recipes
 * build side by side: etcd and kwok are done while Kubernetes, the longest, still builds, so
 * that nothing is left to build after it but the real node's kubelet and kube-proxy.
 */
export async function ensureBinaries(progress: ProgressFn = () => {}): Promise<BinaryPaths> {
  const userDir = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
  if (userDir) return fromUserDir(userDir, binaryNames);
  const built = await Promise.allSettled(recipes.map((r) => ensureRecipes<BinaryName>([r], progress)));
  const failed = built.find((b) => b.status === "rejected");
  if (failed) throw failed.reason;
  return Object.assign({}, ...built.map((b) => (b as PromiseFulfilledResult<BinaryPaths>).value));
}

/** Whether the real node's binaries are cached (or given), or Go can build them. */
export async function nodeBinariesAvailable(): Promise<boolean> {
  const userDir = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
  if (userDir && nodeBinaryNames.every((name) => existsSync(join(userDir, name)))) return true;
  if (spawnSync("go", ["env", "GOVERSION"]).status === 0) return true;
  const root = entriesDir();
  for (const recipe of nodeRecipes())
    if ((await inspectEntry(join(root, recipe.key), recipe)).state !== "ok") return false;
  return true;
}

/**
 * The order the real node's recipes build in: the ones that share no package with Kubernetes
 * first, while the control plane's Kubernetes build (this process's or another install's)
 * runs; then the control plane's Kubernetes entry itself, waited for or built; then kubelet
 * and kube-proxy, whose packages are nearly all the control plane's too (1,683 of 1,809 at
 * v1.36.3), built with the same flags: they come from Go's build cache instead of being
 * compiled a second time beside that build on the same cores. The real node needs the control
 * plane's binaries anyway.
 */
export function nodeBuildOrder(): Recipe[] {
  const node = nodeRecipes();
  const kubernetesNode = node.filter((r) => r.moduleDir === kubernetesRecipe.moduleDir);
  const independent = node.filter((r) => !kubernetesNode.includes(r));
  return [...independent, kubernetesRecipe, ...kubernetesNode];
}

/**
 * Returns the path of every binary of the real node, building what the cache lacks (in
 * nodeBuildOrder). A user's MLMODEL_CONTROLPLANE_BIN_DIR is used when it holds them all.
 */
export async function ensureNodeBinaries(progress: ProgressFn = () => {}): Promise<NodeBinaryPaths> {
  const userDir = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
  if (userDir && nodeBinaryNames.every((name) => existsSync(join(userDir, name))))
    return fromUserDir(userDir, nodeBinaryNames);
  await secureNodeCache(progress);
  const paths = await ensureRecipes<string>(nodeBuildOrder(), progress);
  return Object.fromEntries(nodeBinaryNames.map((name) => [name, paths[name]!])) as NodeBinaryPaths;
}
