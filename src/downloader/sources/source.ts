// What every store looks like to the downloader: a listing, then one ranged read per file.
import type { Readable } from "node:stream";
import { DownloadError } from "../errors.ts";

/** The bounds every store's client keeps, so that no server can hang or spin a download. */
export interface SourceLimits {
  /** How long a server may keep silent: before its answer, and between bytes of a body. */
  requestTimeoutMs: number;
  /** Pages one listing may take (a server that always sends a next page stops here). */
  maxListPages: number;
}

/**
 * Counts the pages of one listing: a next page already seen (a loop) fails at once, and so
 * does one past the bound. `endpoint` names what to check (HF_ENDPOINT, STORAGE_EMULATOR_HOST).
 */
export class PageBound {
  private pages = 0;
  private readonly seen = new Set<string>();
  private readonly what: string;
  private readonly max: number;
  private readonly endpoint: string;
  constructor(what: string, max: number, endpoint: string) {
    this.what = what;
    this.max = max;
    this.endpoint = endpoint;
  }

  /** Called with the next page's token or link once a page has been read. */
  next(token: string): void {
    this.pages++;
    if (this.seen.has(token)) {
      throw new DownloadError(
        "ServerError",
        `listing ${this.what}: after ${this.pages} pages the server sent a next page it had already sent, so the listing would never end`,
        { hint: `check ${this.endpoint}: it must be the store's API` },
      );
    }
    if (this.pages >= this.max) {
      throw new DownloadError(
        "ServerError",
        `listing ${this.what}: more than ${this.max} pages and the server still sends a next one`,
        {
          hint: `no model has that many files: check ${this.endpoint} and the URI, or narrow the URI to the model's folder (mlmodel download --max-list-pages sets the bound)`,
        },
      );
    }
    this.seen.add(token);
  }
}

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
