/** Where the local control plane keeps its state and its binary cache. Both live outside the repo. */
import { chmod, lstat, realpath } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Per-user state dir of the default cluster; `--dir` overrides it. */
export function defaultClusterDir(env: NodeJS.ProcessEnv = process.env): string {
  const stateHome = env.XDG_STATE_HOME || join(homedir(), ".local", "state");
  return join(stateHome, "mlmodel", "cluster");
}

/** Root of the binary cache, keyed below by component and version. */
export function binaryCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.MLMODEL_CACHE_DIR) return resolve(env.MLMODEL_CACHE_DIR);
  const cacheHome = env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return join(cacheHome, "mlmodel");
}

/** The repository's (or installed package's) root, where controlplane/ lives. */
export const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export const wrapperModulesDir = join(packageRoot, "controlplane", "modules");
export const kwokStagesFile = join(packageRoot, "controlplane", "kwok", "stages.yaml");
/** kwok's KwokConfiguration (its parallelism). */
export const kwokConfigFile = join(packageRoot, "controlplane", "kwok", "kwok.yaml");

/** Owner and mode of a path, as `lstat` reports them. */
export interface PathOwnership {
  uid: number;
  mode: number;
  isDirectory: boolean;
}

export type StatPath = (path: string) => Promise<PathOwnership>;

const statPath: StatPath = async (path) => {
  const st = await lstat(path);
  return { uid: st.uid, mode: st.mode, isDirectory: st.isDirectory() };
};

const octal = (mode: number) => `0${(mode & 0o7777).toString(8)}`;
const stickyBit = 0o1000;

/**
 * Why `dir` is not a directory that only root can change, or undefined when it is: root-owned,
 * mode 0700, and every directory above it root-owned and writable by nobody else unless
 * sticky (else its owner, or whoever may write there, could swap `dir` for one of their own).
 * A real node runs as root what such a directory holds (its journal, its binaries), so a
 * local user who can write there can become root. `what` names the directory in the message.
 */
export async function rootOnlyProblem(
  what: string,
  dir: string,
  stat: StatPath = statPath,
  realPath: (path: string) => Promise<string> = realpath,
): Promise<string | undefined> {
  const real = await realPath(dir);
  const shown = real === dir ? dir : `${dir} (${real})`;
  const own = await stat(real);
  if (!own.isDirectory) return `${what} ${shown} is not a directory`;
  if (own.uid !== 0 || (own.mode & 0o077) !== 0)
    return `${what} ${shown} is owned by uid ${own.uid} with mode ${octal(own.mode)}: the real node runs as root what it holds, so it must be root-owned with mode 0700 (fix: chown root:root ${real} && chmod 0700 ${real})`;
  for (let parent = dirname(real), child = real; parent !== child; child = parent, parent = dirname(parent)) {
    const above = await stat(parent);
    const othersWrite = (above.mode & 0o022) !== 0 && (above.mode & stickyBit) === 0;
    if (above.uid !== 0 || othersWrite)
      return `${what} ${shown} is inside ${parent}, owned by uid ${above.uid} with mode ${octal(above.mode)}: a user other than root could replace ${real}, whose contents the real node runs as root (fix: use a directory whose parents only root can write, or chown root ${parent} && chmod go-w ${parent})`;
  }
  return undefined;
}

/**
 * Makes a root-owned directory that nobody else can write mode 0700 (a cache made before the
 * rule: nobody but root can have written it, so it can be trusted and tightened). Returns
 * whether it changed the mode; a directory others can write is left for rootOnlyProblem.
 */
export async function tightenRootOwned(dir: string, stat: StatPath = statPath): Promise<boolean> {
  const own = await stat(dir);
  if (!own.isDirectory || own.uid !== 0 || (own.mode & 0o022) !== 0 || (own.mode & 0o077) === 0) return false;
  await chmod(dir, 0o700);
  return true;
}
