// The digest that --sha256 is compared with, and that the completion marker records:
// - one object: the sha256 of its bytes (as `sha256sum file` prints);
// - several objects (a prefix): the sha256 of the manifest of `<sha256>  <path>\n` lines sorted
//   by path, i.e. what `find . -type f -printf '%P\n' | LC_ALL=C sort | xargs sha256sum | sha256sum`
//   prints when run inside the model directory.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { DownloadError } from "./errors.ts";

export interface FileDigest {
  path: string;
  sha256: string;
}

export function treeDigest(files: readonly FileDigest[]): string {
  const sorted = [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const hash = createHash("sha256");
  for (const f of sorted) hash.update(`${f.sha256}  ${f.path}\n`);
  return hash.digest("hex");
}

export function contentDigest(files: readonly FileDigest[]): { sha256: string; digestOf: "file" | "tree" } {
  return files.length === 1
    ? { sha256: files[0]!.sha256, digestOf: "file" }
    : { sha256: treeDigest(files), digestOf: "tree" };
}

export async function sha256OfFile(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Every regular file under `dir`, as "/"-separated relative paths, skipping names in `skip`. */
export async function listFiles(dir: string, skip: ReadonlySet<string> = new Set()): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && !skip.has(e.name))
    .map((e) =>
      join(e.parentPath, e.name)
        .slice(dir.length + 1)
        .split("\\")
        .join("/"),
    );
}

export function normalizeSha256(value: string): string {
  const hex = value
    .trim()
    .toLowerCase()
    .replace(/^sha256:/, "");
  if (!/^[0-9a-f]{64}$/.test(hex)) {
    throw new DownloadError("InvalidArgument", `--sha256 "${value}" is not a sha256 digest`, {
      hint: "expected 64 hexadecimal characters, as printed by sha256sum",
    });
  }
  return hex;
}

export function checksumMismatch(
  what: string,
  got: string,
  want: string,
  digestOf: "file" | "tree",
): DownloadError {
  const how = digestOf === "file" ? "" : " (digest of the sorted sha256sum manifest, see docs/downloader.md)";
  return new DownloadError("ChecksumMismatch", `${what} has sha256 ${got}, expected ${want}${how}`, {
    hint: "the content is corrupt or changed at the source; check the URI and spec.model.sha256",
  });
}
