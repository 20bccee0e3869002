// The contract between the operator (which builds the pods that use the node cache), the node
// cache agent (`mlmodel node-cache`, one pod per node) and the two commands that talk to it from
// model pods (`mlmodel download --cache ...` in the download Job, `mlmodel cache-copy` as the
// serving pods' init container). Each side imports these names instead of repeating strings;
// docs/model-cache.md explains the design. Change a value here only together with every side.
import { createHash } from "node:crypto";

/** The agent's HTTP port, in its pod and on its Service. */
export const nodeCachePort = 8375;

/**
 * The Service in the operator's namespace that selects the agents, with
 * `internalTrafficPolicy: Local`: a pod that calls its ClusterIP reaches the agent of its own
 * node and no other. The agents find their peers through this Service's EndpointSlices.
 */
export const nodeCacheServiceName = "mlmodel-node-cache";

/** Labels of the agents' pods (the Service's selector) and of their state ConfigMaps. */
export const nodeCacheComponentLabels = {
  "app.kubernetes.io/name": "mlmodel-node-cache",
  "app.kubernetes.io/component": "node-cache",
} as const;

/** `mlmodel node-cache --dir DIR --budget BYTES --node NAME --namespace NS [--port N]`. */
export const nodeCacheAgentCommand = ["mlmodel", "node-cache"] as const;

/**
 * `mlmodel cache-copy --cache URL --key KEY --dest DIR`: asks the node's agent to hold KEY
 * (`POST .../ensure`, which copies from a peer when the node lacks it), then copies the entry
 * into DEST, checking every file's sha256 against the manifest. Exits 0 when DEST is complete,
 * 1 with one line in the termination log when no agent has the key or a file does not verify
 * after a retry (the agent drops a corrupt entry and fetches it again).
 */
export const cacheCopyCommand = ["mlmodel", "cache-copy"] as const;

/**
 * Flags of `mlmodel download` in node-cache mode: `--cache URL --cache-key KEY`. The download
 * first asks the node's agent to ensure KEY (peers included); only when no agent has it does it
 * fetch from the origin into --dest (a scratch emptyDir) and upload the tree to the agent, which
 * verifies and commits it as an entry whose source is "origin".
 */
export const downloadCacheFlags = { url: "--cache", key: "--cache-key" } as const;

/**
 * The label on serving pods naming the cache key they serve: an agent never evicts an entry
 * while a pod on its node carries that key (it reads pods' metadata on its node only).
 */
export const cacheKeyLabel = "serving.mlmodel.dev/cache-key";

/**
 * The header `mlmodel cache-copy` sends on each file it reads out of its node's agent: one id
 * per copy into a pod, so the agent can report that copy's bytes so far against the entry's size.
 */
export const copyIdHeader = "x-mlmodel-copy-id";

/**
 * The cache key of a model version: its exact URI and the checksum the spec pins, hashed, so
 * two models with the same URI and sha256 share one entry, and the key never shows the URI
 * (which may hold credentials). 20 lowercase hex characters (fits a label value).
 */
export function cacheKey(exactUri: string, sha256?: string): string {
  return createHash("sha256")
    .update(JSON.stringify([exactUri, sha256 ?? ""]))
    .digest("hex")
    .slice(0, 20);
}

/**
 * HTTP API of an agent (all JSON unless noted; KEY as returned by {@link cacheKey}):
 * - `GET  /v1/entries`                  -> {@link NodeCacheState}
 * - `GET  /v1/entries/KEY`              -> {@link EntryManifest} | 404
 * - `GET  /v1/entries/KEY/files/PATH`   -> the file's bytes (PATH relative, URL-encoded segments)
 * - `PUT  /v1/entries/KEY/files/PATH`   -> stages one file of an upload (body: bytes)
 * - `POST /v1/entries/KEY/commit`       -> body {@link EntryManifest}: verifies the staged files
 *                                          against it and publishes the entry (source "origin")
 * - `POST /v1/entries/KEY/ensure`       -> {@link EntryManifest} when the node holds KEY, after
 *                                          copying it from a peer if needed; 404 when no peer has it
 * - `GET  /healthz`                     -> 200 when the agent serves
 */
export const nodeCacheApi = {
  entries: "/v1/entries",
  entry: (key: string) => `/v1/entries/${key}`,
  file: (key: string, path: string) =>
    `/v1/entries/${key}/files/${path.split("/").map(encodeURIComponent).join("/")}`,
  commit: (key: string) => `/v1/entries/${key}/commit`,
  ensure: (key: string) => `/v1/entries/${key}/ensure`,
  health: "/healthz",
} as const;

export interface EntryFile {
  /** Relative to the entry's root, "/"-separated, no "..". */
  path: string;
  size: number;
  /** Lowercase hex. */
  sha256: string;
}

export interface EntryManifest {
  key: string;
  /** The URI as shown (credentials redacted), for people reading the state. */
  uri: string;
  files: EntryFile[];
  /** Sum of the files' sizes. */
  size: number;
}

/** One entry as an agent reports it. */
export interface NodeCacheEntry {
  key: string;
  uri: string;
  size: number;
  files: number;
  /** Where this node got it: the origin (a download Job on this node) or a peer agent. */
  source: "origin" | "peer";
  /** The peer's node when source is "peer". */
  peer?: string;
  completedAt: string;
  lastUsedAt: string;
  /** A pod on this node carries the key ({@link cacheKeyLabel}): never evicted while true. */
  inUse: boolean;
}

/** A copy of an entry under way on a node, as its agent reports it. */
export interface NodeCacheFill {
  key: string;
  /**
   * "peer": the agent copies the entry from another node's agent into its cache; "pod": a
   * serving pod's `cache-copy` copies it out of this node's cache into the pod's volume.
   */
  kind: "peer" | "pod";
  /** The node copied from, for a peer copy. */
  peer?: string;
  bytesDone: number;
  /** The entry's size. */
  bytesTotal: number;
  /** Average since the copy started. */
  bytesPerSecond: number;
  startedAt: string;
}

/**
 * What an agent holds, served at `GET /v1/entries` and written to its state ConfigMap (name
 * {@link nodeCacheStateConfigMap}, labels {@link nodeCacheComponentLabels}, key
 * {@link nodeCacheStateKey}) so the operator and `mlmodel describe` can show it per node.
 */
export interface NodeCacheState {
  node: string;
  budgetBytes: number;
  usedBytes: number;
  /** Bytes this agent fetched from peers and received from origin downloads, since it started. */
  bytesFromPeers: number;
  bytesFromOrigin: number;
  evictions: number;
  entries: NodeCacheEntry[];
  /** Copies under way on this node (absent from agents that do not report them). */
  fills?: NodeCacheFill[];
  updatedAt: string;
}

export const nodeCacheStateKey = "state.json";
export const nodeCacheStateConfigMap = (node: string) => `mlmodel-node-cache-${node}`;
