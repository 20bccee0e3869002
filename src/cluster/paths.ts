/** Where the local control plane keeps its state and its binary cache. Both live outside the repo. */
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
