// Downloads one file into the partial directory: streamed (memory bounded by stream buffers),
// hashed on the way, resumed from a `.mlmodel-part` file with a Range request when the store
// allows, and renamed to its final name only when whole.
import { createHash, type Hash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat, truncate, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DownloadError, isTimeout, requestTimedOut } from "./errors.ts";
import { formatBytes, type Progress } from "./progress.ts";
import { type RetryPolicy, withRetry } from "./retry.ts";
import type { RemoteFile, Source } from "./sources/source.ts";

export const partSuffix = ".mlmodel-part";

export interface FetchContext {
  source: Source;
  progress: Progress;
  retry: RetryPolicy;
  signal: AbortSignal;
  /** Largest total of bytes the whole download may reach. */
  maxBytes: number;
  /** How long a body may send nothing before the attempt fails (and is retried, resumed). */
  requestTimeoutMs: number;
  log: (line: string) => void;
}

export interface FetchedFile {
  path: string;
  size: number;
  sha256: string;
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

async function hashFile(path: string, hash: Hash = createHash("sha256")): Promise<Hash> {
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash;
}

/** The resume validator saved beside a part file (ETag, generation...). */
async function readVersion(metaPath: string): Promise<string | undefined> {
  try {
    const v = JSON.parse(await readFile(metaPath, "utf8")) as { version?: unknown };
    return typeof v.version === "string" ? v.version : undefined;
  } catch {
    return undefined;
  }
}

function tooLarge(ctx: FetchContext, bytes: number): DownloadError {
  return new DownloadError("TooLarge", `the model reached ${formatBytes(bytes)}, over the limit`, {
    hint: `the limit is ${formatBytes(ctx.maxBytes)} (--max-size); raise it or check the URI`,
  });
}

/** A pass-through that hashes, counts and enforces the size limit as bytes arrive. */
function meter(ctx: FetchContext, file: RemoteFile, hash: Hash, start: number): Transform {
  let onDisk = start;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      onDisk += chunk.length;
      ctx.progress.received(chunk.length);
      ctx.progress.setFileBytes(file.path, onDisk);
      if (ctx.progress.bytesDone > ctx.maxBytes) return done(tooLarge(ctx, ctx.progress.bytesDone));
      done(null, chunk);
    },
  });
}

/**
 * Fails the read when no byte arrives for `ms`, whichever store sends the body (not every SDK
 * bounds a body that stops). A disk that takes as long to accept a chunk trips it too: the
 * attempt is retried and resumes from what was written.
 */
function idleGuard(ms: number, what: string): Transform {
  const guard: Transform = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      timer.refresh();
      done(null, chunk);
    },
    flush(done) {
      clearTimeout(timer);
      done();
    },
    destroy(err, done) {
      clearTimeout(timer);
      done(err);
    },
  });
  const timer = setTimeout(() => guard.destroy(requestTimedOut(what, ms)), ms);
  return guard;
}

/** One attempt: open at the part's length, append the rest, return the part's final length. */
async function attemptOnce(
  ctx: FetchContext,
  file: RemoteFile,
  part: string,
): Promise<{ size: number; hash: Hash }> {
  const metaPath = `${part}.json`;
  let offset = (await sizeOf(part)) ?? 0;
  if (file.size !== undefined && offset > file.size) offset = 0;
  const opened = await ctx.source.open(
    file,
    offset,
    offset > 0 ? await readVersion(metaPath) : undefined,
    ctx.signal,
  );
  if (opened.offset !== offset) {
    ctx.log(`${file.path}: the store sent the object from byte ${opened.offset}; restarting it`);
    offset = opened.offset;
  }
  if (offset === 0) await writeFile(part, "");
  else await truncate(part, offset);
  await writeFile(metaPath, JSON.stringify({ version: opened.version ?? null }));
  if (opened.size !== undefined) ctx.progress.setFileSize(file.path, opened.size);
  ctx.progress.setFileBytes(file.path, offset);
  const hash = offset > 0 ? await hashFile(part) : createHash("sha256");
  const what = `reading ${file.path}`;
  await pipeline(
    opened.body,
    idleGuard(ctx.requestTimeoutMs, what),
    meter(ctx, file, hash, offset),
    createWriteStream(part, { flags: "a", highWaterMark: 1 << 20 }),
    { signal: ctx.signal },
  ).catch((err: unknown) => {
    throw isTimeout(err) ? requestTimedOut(what, ctx.requestTimeoutMs, err) : err;
  });
  const size = (await sizeOf(part)) ?? 0;
  const expected = opened.size ?? file.size;
  if (expected !== undefined && size !== expected) {
    // The connection ended early: the next attempt resumes from here.
    throw new DownloadError("NetworkError", `${file.path}: got ${size} of ${expected} bytes`, {
      transient: true,
    });
  }
  return { size, hash };
}

/** Downloads `file` into `dir` (or finds it already whole there) and returns its digest. */
export async function fetchFile(dir: string, file: RemoteFile, ctx: FetchContext): Promise<FetchedFile> {
  const final = join(dir, file.path);
  const existing = await sizeOf(final);
  if (existing !== undefined && (file.size === undefined || existing === file.size)) {
    ctx.progress.setFileBytes(file.path, existing);
    ctx.progress.setFileSize(file.path, existing);
    ctx.progress.fileDone();
    return { path: file.path, size: existing, sha256: (await hashFile(final)).digest("hex") };
  }
  await mkdir(dirname(final), { recursive: true });
  const part = final + partSuffix;
  const { size, hash } = await withRetry(
    ctx.retry,
    ctx.signal,
    () => attemptOnce(ctx, file, part),
    (err, n, delay) => ctx.log(`${file.path}: ${err.message}; retry ${n} in ${delay} ms`),
  );
  await rename(part, final);
  await rm(`${part}.json`, { force: true });
  ctx.progress.fileDone();
  return { path: file.path, size, sha256: hash.digest("hex") };
}
