// `mlmodel download --cache URL --cache-key KEY`: the download Job in node-cache mode. It first
// asks its node's agent to ensure KEY (a copy from a peer agent, no byte from the origin); only
// when no agent holds it does it download from the origin into --dest as usual, then upload
// the tree to the agent, which verifies every file's sha256 and commits the entry.
import { AgentClient } from "../nodecache/client.ts";
import type { EntryManifest } from "../nodecache/contract.ts";
import { completionMarkerName, type DownloadStatus } from "./contract.ts";
import { type DownloadOptions, type DownloadResult, download } from "./download.ts";
import { DownloadError } from "./errors.ts";
import { shortBytes } from "./progress.ts";
import { redactUri } from "./redact.ts";
import { parseModelUri } from "./uri.ts";

export interface NodeCacheTarget {
  /** The node's agent, e.g. http://mlmodel-node-cache.mlmodel-system:8375. */
  url: string;
  key: string;
  /** How long to wait for the agent in all (a peer copy included). */
  timeoutMs: number;
}

export type CachedDownloadResult =
  | { state: "FromNodeCache"; manifest: EntryManifest }
  | (Extract<DownloadResult, { state: "AlreadyComplete" | "Downloaded" }> & { uploaded: EntryManifest });

export const defaultCacheTimeoutMs = 3_600_000;

export async function downloadThroughCache(
  opts: DownloadOptions,
  cache: NodeCacheTarget,
): Promise<CachedDownloadResult> {
  if (parseModelUri(opts.uri).scheme === "pvc") {
    throw new DownloadError("InvalidArgument", "--cache does not apply to pvc:// models", {
      hint: "pvc:// models are mounted in place; drop --cache and --cache-key",
    });
  }
  const client = new AgentClient(cache.url, {
    deadline: Date.now() + cache.timeoutMs,
    idleTimeoutMs: opts.requestTimeoutMs,
    parallel: opts.parallel,
    log: opts.log,
    signal: opts.signal,
  });
  const held = await client.ensure(cache.key, { peerFailureIsAbsence: true });
  if (held) {
    opts.log(
      `the node cache holds entry ${cache.key} (${held.files.length} file(s), ${shortBytes(held.size)}): 0 bytes from the origin`,
    );
    return { state: "FromNodeCache", manifest: held };
  }
  opts.log(`no node cache agent holds entry ${cache.key}: downloading from the origin`);
  const result = await download(opts);
  if (result.state === "VerifiedInPlace") throw new Error("a pvc:// model reached the node cache upload");
  opts.log(`uploading ${result.marker.files} file(s) to the node cache as entry ${cache.key}`);
  const uploaded = await client.upload(
    cache.key,
    redactUri(opts.uri),
    result.dest,
    new Set([completionMarkerName]),
  );
  return { ...result, uploaded };
}

/**
 * The status of a download the node cache answered: nothing came from the origin (bytesDone 0),
 * and the message says where the bytes are.
 */
export function fromNodeCacheStatus(base: DownloadStatus, manifest: EntryManifest): DownloadStatus {
  const { bytesTotal: _t, filesTotal: _f, ...rest } = base;
  return {
    ...rest,
    phase: "Complete",
    bytesDone: 0,
    bytesPerSecond: 0,
    filesDone: 0,
    message: `copied from node cache: entry ${manifest.key}, ${manifest.files.length} file(s), ${shortBytes(manifest.size)}, 0 bytes from the origin`,
    progress: `node cache ${shortBytes(manifest.size)}`,
  };
}
