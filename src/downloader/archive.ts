// Unpacks .tar.gz/.tgz/.tar/.zip models with guards a hostile archive cannot get past: every
// entry name must stay inside DEST (checked before anything is written), only regular files and
// directories are accepted (no symlinks, hard links or devices), and the unpacked bytes are
// bounded both absolutely and relative to the archive's size (a "zip bomb" fails early).
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Transform, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Parser, type ReadEntry } from "tar";
import yauzl from "yauzl";
import { DownloadError } from "./errors.ts";
import { safeRelativePath } from "./paths.ts";
import { formatBytes } from "./progress.ts";

export interface ExtractLimits {
  /** Largest total of unpacked bytes. */
  maxBytes: number;
  /** Largest unpacked/archive size ratio. */
  maxRatio: number;
  maxEntries: number;
}

export type ArchiveKind = "tar" | "zip";

export function archiveKind(name: string): ArchiveKind | undefined {
  const lower = name.toLowerCase();
  if (lower.endsWith(".tar.gz") || lower.endsWith(".tgz") || lower.endsWith(".tar")) return "tar";
  if (lower.endsWith(".zip")) return "zip";
  return undefined;
}

function unsafe(message: string): DownloadError {
  return new DownloadError("UnsafeArchive", message, {
    hint: "the archive was refused and nothing of it was published; rebuild it with plain relative files",
  });
}

/** Counts unpacked bytes and entries over a whole archive and fails past the limits. */
class Budget {
  private bytes = 0;
  private entries = 0;
  private readonly maxBytes: number;
  private readonly limits: ExtractLimits;
  constructor(limits: ExtractLimits, archiveBytes: number) {
    this.limits = limits;
    this.maxBytes = Math.min(limits.maxBytes, Math.max(1, archiveBytes) * limits.maxRatio);
  }
  entry(name: string): void {
    if (++this.entries > this.limits.maxEntries) {
      throw unsafe(`more than ${this.limits.maxEntries} entries (at "${name}")`);
    }
  }
  add(n: number): void {
    this.bytes += n;
    if (this.bytes <= this.maxBytes) return;
    if (this.maxBytes === this.limits.maxBytes) {
      throw new DownloadError("TooLarge", `unpacked size passed ${formatBytes(this.maxBytes)}`, {
        hint: "raise --max-size or check the archive",
      });
    }
    throw unsafe(`unpacks to more than ${this.limits.maxRatio} times its own size (expansion bomb?)`);
  }
  meter(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _enc, done) => {
        try {
          this.add(chunk.length);
          done(null, chunk);
        } catch (err) {
          done(err as Error);
        }
      },
    });
  }
}

type EntryType = "file" | "directory" | "link" | "other";

/**
 * The archive's own top directory, "./" in `tar -czf m.tgz -C dir .` (the usual way to pack a
 * model folder): it is DEST itself, which exists, so there is nothing to write.
 */
function isTopDirectory(name: string, type: EntryType): boolean {
  return type === "directory" && name.split("/").every((part) => part === "" || part === ".");
}

/** Validates one entry and returns where it goes, or throws UnsafeArchive. */
function checkEntry(name: string, type: EntryType, budget: Budget): string {
  budget.entry(name);
  const rel = safeRelativePath(name, "archive entry");
  if (type === "link") throw unsafe(`entry "${name}" is a link; only files and directories are accepted`);
  if (type === "other") throw unsafe(`entry "${name}" is a device, FIFO or other special file`);
  return rel;
}

async function writeEntry(source: NodeJS.ReadableStream, target: string, budget: Budget): Promise<void> {
  await mkdir(dirname(target), { recursive: true });
  // "wx" would refuse a duplicate entry; a later duplicate simply wins, as with tar(1).
  await pipeline(source, budget.meter(), createWriteStream(target, { flags: "w", mode: 0o644 }));
}

function tarEntryType(entry: ReadEntry): EntryType {
  switch (entry.type) {
    case "File":
    case "OldFile":
    case "ContiguousFile":
      return "file";
    case "Directory":
    case "GNUDumpDir":
      return "directory";
    case "SymbolicLink":
    case "Link":
      return "link";
    default:
      return "other";
  }
}

async function extractTar(archive: string, dest: string, budget: Budget): Promise<void> {
  let failure: unknown;
  // A feed waiting for the parser to drain; a failure must wake it, since a failed entry
  // stops reading and the parser would then never drain.
  let wake: (() => void) | undefined;
  let rejectFailed: (err: unknown) => void = () => {};
  // Settles at the first failure, so no wait below can outlive a refused entry.
  const failed = new Promise<never>((_, reject) => {
    rejectFailed = reject;
  });
  failed.catch(() => {});
  const fail = (err: unknown) => {
    failure ??= err;
    rejectFailed(failure);
    wake?.();
  };
  const writes: Promise<void>[] = [];
  const parser = new Parser({
    noResume: true,
    // The Budget bounds expansion over the whole archive; tar's own ratio check also counts
    // header padding and trips on tiny, legitimate archives.
    maxDecompressionRatio: Number.POSITIVE_INFINITY,
    // Any warning (bad checksum, not a tar at all, truncated) fails the archive: a model
    // archive that tar(1) would grumble about is not one to publish.
    onwarn: (code: string, message: string | Error) => {
      fail(
        unsafe(
          `not a readable tar archive: ${code}: ${message instanceof Error ? message.message : message}`,
        ),
      );
    },
    onReadEntry: (entry: ReadEntry) => {
      try {
        if (failure) throw failure;
        if (isTopDirectory(entry.path, tarEntryType(entry))) {
          entry.resume();
          return;
        }
        const target = join(dest, checkEntry(entry.path, tarEntryType(entry), budget));
        const write =
          entry.type === "Directory" || entry.type === "GNUDumpDir"
            ? mkdir(target, { recursive: true }).then(() => {
                entry.resume();
              })
            : writeEntry(entry as unknown as NodeJS.ReadableStream, target, budget);
        write.catch(fail);
        writes.push(write);
      } catch (err) {
        fail(err);
        entry.resume();
      }
    },
  });
  const done = new Promise<void>((resolve, reject) => {
    parser.on("end", () => resolve());
    parser.on("error", (err: Error) => reject(err));
  });
  done.catch(fail);
  // Feeds the parser respecting its backpressure; stops at the first refused entry.
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (failure) return cb(failure as Error);
      if (parser.write(chunk)) return cb();
      if (failure) return cb(failure as Error);
      wake = () => {
        wake = undefined;
        cb(failure as Error | undefined);
      };
      parser.once("drain", () => wake?.());
    },
    final(cb) {
      parser.end();
      cb();
    },
  });
  try {
    await Promise.race([pipeline(createReadStream(archive), sink), failed]);
    await Promise.race([done, failed]);
    await Promise.race([Promise.all(writes), failed]);
  } catch (err) {
    sink.destroy(); // closes the archive file if the feed was still waiting
    await Promise.race([Promise.allSettled(writes), new Promise((r) => setTimeout(r, 1000))]);
    throw failure ?? tarError(err);
  }
  if (failure) throw failure;
}

function tarError(err: unknown): unknown {
  if (err instanceof DownloadError) return err;
  return unsafe(`not a readable tar archive: ${err instanceof Error ? err.message : String(err)}`);
}

function zipEntryType(entry: yauzl.Entry): EntryType {
  if (entry.fileName.endsWith("/")) return "directory";
  // Unix mode bits live in the high 16 bits of the external attributes (made by Unix zips).
  const mode = (entry.externalFileAttributes >>> 16) & 0o170000;
  if (mode === 0o120000) return "link";
  if (mode === 0 || mode === 0o100000) return "file";
  if (mode === 0o040000) return "directory";
  return "other";
}

function openZip(path: string): Promise<yauzl.ZipFile> {
  return new Promise((resolve, reject) => {
    // yauzl itself refuses absolute and "../" names ("invalid relative path") and checks that
    // each entry's stated size matches what it inflates to.
    yauzl.open(path, { lazyEntries: true, autoClose: true, validateEntrySizes: true }, (err, zip) =>
      err ? reject(unsafe(`not a readable zip archive: ${err.message}`)) : resolve(zip),
    );
  });
}

function openZipEntry(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<NodeJS.ReadableStream> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(entry, (err, stream) => (err ? reject(err) : resolve(stream)));
  });
}

async function extractZip(archive: string, dest: string, budget: Budget): Promise<void> {
  const zip = await openZip(archive);
  await new Promise<void>((resolve, reject) => {
    const fail = (err: unknown) => {
      zip.close();
      const message = err instanceof Error ? err.message : String(err);
      reject(err instanceof DownloadError ? err : unsafe(`zip entry refused: ${message}`));
    };
    zip.on("error", fail);
    zip.on("end", () => resolve());
    zip.on("entry", (entry: yauzl.Entry) => {
      handleZipEntry(zip, entry, dest, budget).then(() => zip.readEntry(), fail);
    });
    zip.readEntry();
  });
}

async function handleZipEntry(
  zip: yauzl.ZipFile,
  entry: yauzl.Entry,
  dest: string,
  budget: Budget,
): Promise<void> {
  const type = zipEntryType(entry);
  if (isTopDirectory(entry.fileName, type)) return;
  const target = join(dest, checkEntry(entry.fileName, type, budget));
  if (type === "directory") {
    await mkdir(target, { recursive: true });
    return;
  }
  await writeEntry(await openZipEntry(zip, entry), target, budget);
}

/** Unpacks `archive` into `dest` (which must exist), or throws and leaves `dest` to be discarded. */
export async function extractArchive(
  archive: string,
  kind: ArchiveKind,
  dest: string,
  limits: ExtractLimits,
): Promise<void> {
  const budget = new Budget(limits, (await stat(archive)).size);
  if (kind === "zip") await extractZip(archive, dest, budget);
  else await extractTar(archive, dest, budget);
}
