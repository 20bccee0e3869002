// What every store looks like to the downloader: a listing, then one ranged read per file.
import type { Readable } from "node:stream";

export interface RemoteFile {
  /** Path relative to DEST, "/"-separated, already checked to stay inside DEST. */
  path: string;
  /** Bytes, when the listing knows it. */
  size?: number;
  /** An opaque store-specific handle (object key, URL) used by open(). */
  ref: string;
}

export interface OpenedBody {
  body: Readable;
  /** The byte offset the body starts at: the one asked for, or 0 if the store could not honour it. */
  offset: number;
  /** The whole object's size, when the response tells it. */
  size?: number;
  /** A validator (ETag, generation) that a later resume passes back to open(). */
  version?: string;
}

export interface Source {
  list(signal: AbortSignal): Promise<RemoteFile[]>;
  /**
   * Opens the file at `offset`. With `version` (from an earlier open), a store that finds the
   * object changed must start at 0 instead, so a resume never splices two versions together.
   */
  open(
    file: RemoteFile,
    offset: number,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody>;
  close?(): Promise<void>;
}

/** Parses "bytes 100-199/1000" (Content-Range) into its start and total. */
export function parseContentRange(value: string | undefined): { start: number; total?: number } | undefined {
  const m = value ? /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(value.trim()) : null;
  if (!m) return undefined;
  return m[2] === "*" ? { start: Number(m[1]) } : { start: Number(m[1]), total: Number(m[2]) };
}

/** The relative path of an object under a prefix: the base name for a single object. */
export function relativePath(key: string, prefix: string): string {
  if (key === prefix) return key.slice(key.lastIndexOf("/") + 1);
  const base = prefix === "" || prefix.endsWith("/") ? prefix : `${prefix}/`;
  return key.startsWith(base) ? key.slice(base.length) : key;
}
