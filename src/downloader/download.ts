// The download as a sequence of explicit steps:
//   complete? -> list -> fetch (bounded parallelism) -> verify -> [extract] -> mark -> publish
// Everything happens in a sibling temporary directory; DEST appears by one rename, with the
// completion marker already inside, so a killed Job never leaves a half model that looks whole.
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { archiveKind, extractArchive } from "./archive.ts";
import {
  type CompletionMarker,
  completionMarkerName,
  defaultPvcRoot,
  partialDirFor,
  pvcRootEnv,
} from "./contract.ts";
import { Credentials, type Env } from "./credentials.ts";
import { checksumMismatch, contentDigest, type FileDigest, listFiles, sha256OfFile } from "./digest.ts";
import { DownloadError } from "./errors.ts";
import { type FetchContext, type FetchedFile, fetchFile } from "./fetch-file.ts";
import { formatBytes, type Progress } from "./progress.ts";
import { redactUri } from "./redact.ts";
import { defaultRetryPolicy, type RetryPolicy, withRetry } from "./retry.ts";
import { createSource } from "./sources/index.ts";
import type { RemoteFile, Source } from "./sources/source.ts";
import { type ModelLocation, parseModelUri } from "./uri.ts";

export interface DownloadOptions {
  uri: string;
  /** Required for every scheme but pvc://. */
  dest?: string;
  /** Lowercase hex, already validated. */
  sha256?: string;
  parallel: number;
  maxBytes: number;
  /** Unpack a single .tar.gz/.tgz/.tar/.zip object (default true). */
  extract: boolean;
  maxExpansionRatio: number;
  maxArchiveEntries: number;
  retry: RetryPolicy;
  /** How long a server may keep silent: before its answer, and between bytes of a body. */
  requestTimeoutMs: number;
  /** Pages one listing may take: a server that always sends a next page stops here. */
  maxListPages: number;
  env: Env;
  signal: AbortSignal;
  log: (line: string) => void;
  progress: Progress;
}

export const defaultDownloadOptions = {
  parallel: 4,
  maxBytes: 1024 ** 4, // 1 TiB: a sanity bound, set lower per model with --max-size
  extract: true,
  maxExpansionRatio: 100,
  maxArchiveEntries: 100_000,
  retry: defaultRetryPolicy,
  requestTimeoutMs: 60_000,
  // 10,000 pages of the stores' usual 1,000 entries: far more files than any model has.
  maxListPages: 10_000,
} as const;

export type DownloadResult =
  | { state: "AlreadyComplete"; dest: string; marker: CompletionMarker }
  | { state: "Downloaded"; dest: string; marker: CompletionMarker }
  | { state: "VerifiedInPlace"; path: string; sha256: string };

const stateFile = ".mlmodel-partial.json";

export async function readMarker(dest: string): Promise<CompletionMarker | undefined> {
  try {
    const m = JSON.parse(await readFile(join(dest, completionMarkerName), "utf8")) as CompletionMarker;
    return m.version === 1 ? m : undefined;
  } catch {
    return undefined;
  }
}

/**
 * What the marker and the partial state record about the URI: its shown form, and a digest of
 * the exact one to compare (the files are on the model volume, which the serving pods read).
 */
function uriRecord(uri: string): { uri: string; uriSha256: string } {
  return { uri: redactUri(uri), uriSha256: createHash("sha256").update(uri).digest("hex") };
}

/** Whether a marker or partial state was written for this exact URI (older ones hold it as is). */
function sameUri(recorded: { uri?: string; uriSha256?: string }, uri: string): boolean {
  return recorded.uriSha256 === undefined
    ? recorded.uri === uri
    : recorded.uriSha256 === uriRecord(uri).uriSha256;
}

/** A marker for the same URI (and digest, when one is asked for) means: nothing to do. */
function markerSatisfies(m: CompletionMarker | undefined, opts: DownloadOptions): m is CompletionMarker {
  return m !== undefined && sameUri(m, opts.uri) && (opts.sha256 === undefined || m.sha256 === opts.sha256);
}

/** Keeps a partial directory only if it was started for this very URI; else starts afresh. */
async function preparePartial(partial: string, uri: string, log: (l: string) => void): Promise<void> {
  let owner: { uri?: string; uriSha256?: string } | undefined;
  try {
    owner = JSON.parse(await readFile(join(partial, stateFile), "utf8")) as {
      uri?: string;
      uriSha256?: string;
    };
  } catch {
    owner = undefined;
  }
  if (owner && sameUri(owner, uri)) {
    log(`resuming the partial download in ${partial}`);
    return;
  }
  await rm(partial, { recursive: true, force: true });
  await mkdir(partial, { recursive: true });
  await writeFile(join(partial, stateFile), JSON.stringify(uriRecord(uri)));
}

async function listWithRetry(source: Source, opts: DownloadOptions): Promise<RemoteFile[]> {
  const files = await withRetry(opts.retry, opts.signal, () => source.list(opts.signal));
  if (files.length === 0) {
    throw new DownloadError("NotFound", "no object at this URI or under this prefix", {
      hint: "check the URI",
    });
  }
  const known = files.reduce((sum, f) => sum + (f.size ?? 0), 0);
  if (known > opts.maxBytes) {
    throw new DownloadError("TooLarge", `the objects add up to ${formatBytes(known)}`, {
      hint: `the limit is ${formatBytes(opts.maxBytes)} (--max-size); raise it or check the URI`,
    });
  }
  return files;
}

/**
 * Runs `work` over `items` with at most `limit` at once. The first failure stops new starts
 * and aborts the ones in flight (through `work`'s signal); it is thrown once all have settled,
 * so no download is still writing while the caller cleans up.
 */
export async function mapBounded<T, R>(
  items: readonly T[],
  limit: number,
  parent: AbortSignal,
  work: (item: T, signal: AbortSignal) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  const stop = new AbortController();
  const signal = AbortSignal.any([parent, stop.signal]);
  let next = 0;
  let firstError: { err: unknown } | undefined;
  const worker = async () => {
    while (!firstError && next < items.length) {
      const i = next++;
      try {
        results[i] = await work(items[i]!, signal);
      } catch (err) {
        firstError ??= { err };
        stop.abort();
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (firstError) throw firstError.err;
  return results;
}

function verify(
  files: readonly FileDigest[],
  opts: DownloadOptions,
): { sha256: string; digestOf: "file" | "tree" } {
  const digest = contentDigest(files);
  if (opts.sha256 !== undefined && digest.sha256 !== opts.sha256) {
    const what = digest.digestOf === "file" ? files[0]!.path : `the tree of ${files.length} files`;
    throw checksumMismatch(what, digest.sha256, opts.sha256, digest.digestOf);
  }
  return digest;
}

/**
 * DEST is replaced only if it is absent, empty, or an earlier download's (it has a marker):
 * never a directory of someone else's files that a wrong --dest happens to name.
 */
export async function refuseForeignDest(dest: string): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(dest);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return;
    if (code === "ENOTDIR") {
      throw new DownloadError("InvalidArgument", `--dest "${dest}" is a file`, {
        hint: "give a directory path",
      });
    }
    throw err;
  }
  if (entries.length > 0) {
    throw new DownloadError(
      "InvalidArgument",
      `--dest "${dest}" is not empty and holds no ${completionMarkerName}`,
      {
        hint: "it was not written by mlmodel download; give a new or empty directory, or remove it",
      },
    );
  }
}

/** Swaps `content` in as DEST: the old DEST (an incomplete or other model) goes away. */
export async function publish(content: string, dest: string, partial: string): Promise<void> {
  const old = join(partial, "old");
  await rm(old, { recursive: true, force: true });
  try {
    await rename(dest, old);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  await rename(content, dest);
  await rm(partial, { recursive: true, force: true });
}

async function downloadToDest(
  loc: Exclude<ModelLocation, { scheme: "pvc" }>,
  dest: string,
  opts: DownloadOptions,
) {
  const partial = partialDirFor(dest);
  await preparePartial(partial, opts.uri, opts.log);
  const source = await createSource(loc, new Credentials(opts.env), opts);
  try {
    const files = await listWithRetry(source, opts);
    opts.progress.setFiles(files);
    opts.log(`${files.length} file(s)${sizeNote(opts.progress)} from ${redactUri(opts.uri)}`);
    const downloadDir = join(partial, "download");
    const fetched = await mapBounded(files, opts.parallel, opts.signal, (f, signal) => {
      const ctx: FetchContext = { ...opts, source, signal };
      return fetchFile(downloadDir, f, ctx);
    });
    opts.progress.setPhase("Verifying");
    const digest = await verifyOrDiscard(fetched, opts, partial);
    const content = await maybeExtract(fetched, downloadDir, partial, opts);
    const marker: CompletionMarker = {
      version: 1,
      ...uriRecord(opts.uri),
      ...digest,
      files: fetched.length,
      bytes: fetched.reduce((s, f) => s + f.size, 0),
      extracted: content !== downloadDir,
      completedAt: new Date().toISOString(),
    };
    await writeFile(join(content, completionMarkerName), `${JSON.stringify(marker, null, 2)}\n`);
    await publish(content, dest, partial);
    return marker;
  } finally {
    await source.close?.();
  }
}

function sizeNote(p: Progress): string {
  const total = p.bytesTotal();
  return total === undefined ? "" : `, ${formatBytes(total)}`;
}

/** A checksum failure throws the partial download away: a rerun must not resume bad bytes. */
async function verifyOrDiscard(fetched: FetchedFile[], opts: DownloadOptions, partial: string) {
  try {
    return verify(fetched, opts);
  } catch (err) {
    await rm(partial, { recursive: true, force: true });
    throw err;
  }
}

async function maybeExtract(
  fetched: FetchedFile[],
  downloadDir: string,
  partial: string,
  opts: DownloadOptions,
) {
  const only = fetched.length === 1 ? fetched[0]! : undefined;
  const kind = only && opts.extract ? archiveKind(only.path) : undefined;
  if (!only || !kind) return downloadDir;
  opts.progress.setPhase("Extracting");
  const content = join(partial, "content");
  await rm(content, { recursive: true, force: true });
  await mkdir(content, { recursive: true });
  try {
    await extractArchive(join(downloadDir, only.path), kind, content, {
      maxBytes: opts.maxBytes,
      maxRatio: opts.maxExpansionRatio,
      maxEntries: opts.maxArchiveEntries,
    });
  } catch (err) {
    // A refused archive is refused for good: drop everything so nothing of it survives.
    await rm(partial, { recursive: true, force: true });
    throw err;
  }
  return content;
}

/** pvc://claim/path: the claim is mounted already; check it is there (and its digest). */
async function verifyPvc(loc: Extract<ModelLocation, { scheme: "pvc" }>, opts: DownloadOptions) {
  const root = opts.env[pvcRootEnv] || defaultPvcRoot;
  const path = join(root, loc.claim, loc.path);
  const info = await stat(path).catch(() => undefined);
  if (!info) {
    throw new DownloadError("NotFound", `${path} does not exist`, {
      hint: `check that claim ${loc.claim} holds ${loc.path || "the model"} and is mounted at ${join(root, loc.claim)}`,
    });
  }
  const names = info.isDirectory() ? await listFiles(path) : [""];
  if (names.length === 0) {
    throw new DownloadError("NotFound", `${path} is an empty directory`, {
      hint: `check claim ${loc.claim}`,
    });
  }
  const digests = await Promise.all(
    names.map(async (n) => ({ path: n || loc.path, sha256: await sha256OfFile(n ? join(path, n) : path) })),
  );
  return { path, sha256: verify(digests, opts).sha256 };
}

export async function download(opts: DownloadOptions): Promise<DownloadResult> {
  const loc = parseModelUri(opts.uri);
  if (loc.scheme === "pvc") return { state: "VerifiedInPlace", ...(await verifyPvc(loc, opts)) };
  const dest = opts.dest;
  if (!dest) {
    throw new DownloadError("InvalidArgument", "--dest is missing", {
      hint: "give the directory to publish the model into, e.g. --dest /mnt/models/resnet",
    });
  }
  const existing = await readMarker(dest);
  if (markerSatisfies(existing, opts)) return { state: "AlreadyComplete", dest, marker: existing };
  if (!existing) await refuseForeignDest(dest);
  const marker = await downloadToDest(loc, dest, opts);
  return { state: "Downloaded", dest, marker };
}
