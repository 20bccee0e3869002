/**
 * Reproducible layer tarballs of a root filesystem with GNU tar (owners, modes, hard links and
 * long names as they are on disk): entries sorted by name, numeric owners, every mtime clamped
 * to the build's epoch, no atime/ctime, POSIX format with fixed extended-header names. The same
 * tree gives the same bytes, which is what makes layer digests repeatable. (The archive around
 * the layers is src/cluster/node/oci.ts's.)
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { readdir } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import type { LayerBlob } from "../cluster/index.ts";

export function reproducibleTarArgs(dir: string, entries: readonly string[], epochSeconds: number): string[] {
  return [
    "--create",
    "--file=-",
    `--directory=${dir}`,
    "--sort=name",
    "--format=posix",
    "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
    `--mtime=@${epochSeconds}`,
    "--clamp-mtime",
    "--numeric-owner",
    "--",
    ...entries,
  ];
}

/**
 * The names tar is given: the directory's own entries, sorted, not "." — the root entry would
 * carry the staging directory's mode onto the container's `/`.
 */
export async function topLevelEntries(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort();
}

class HashCounter {
  readonly hash = createHash("sha256");
  size = 0;
  update(chunk: Buffer): void {
    this.hash.update(chunk);
    this.size += chunk.length;
  }
  digest(): string {
    return `sha256:${this.hash.digest("hex")}`;
  }
}

async function* tee(source: AsyncIterable<Buffer>, counter: HashCounter): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    counter.update(chunk);
    yield chunk;
  }
}

/** Runs tar and streams its output through `sink`; rejects with tar's stderr when it fails. */
async function runTar(args: string[], sink: (stdout: AsyncIterable<Buffer>) => Promise<void>): Promise<void> {
  const child = spawn("tar", args, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<number>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve(code ?? 1));
  });
  await sink(child.stdout);
  const code = await exited;
  if (code !== 0)
    throw new Error(`tar ${args.slice(0, 3).join(" ")} failed (exit ${code}): ${stderr.trim()}`);
}

/**
 * Packs `dir` (its contents, owned as they are on disk) into a gzipped layer at `outFile` and
 * returns its digests. gzip is Node's zlib at a fixed level with no name or time in its header.
 */
export async function packLayer(
  dir: string,
  outFile: string,
  epochSeconds: number,
): Promise<LayerBlob & { tarSize: number }> {
  const diff = new HashCounter();
  const blob = new HashCounter();
  const entries = await topLevelEntries(dir);
  if (entries.length === 0) throw new Error(`layer directory ${dir} is empty`);
  await runTar(reproducibleTarArgs(dir, entries, epochSeconds), (stdout) =>
    pipeline(tee(stdout, diff), createGzip({ level: 6 }), (gz) => tee(gz, blob), createWriteStream(outFile)),
  );
  return { digest: blob.digest(), diffId: diff.digest(), size: blob.size, tarSize: diff.size };
}
