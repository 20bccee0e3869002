/**
 * The one OCI image packer of the project: the image's documents (config, manifest, index,
 * Docker's manifest.json) as pure functions of its layers and settings, and the archive that
 * `ctr images import` (and `docker load`) reads, an OCI image layout in a tar. The real node's
 * own small images (pause, busybox: files listed in memory, `packImage`) and the images built
 * from Debian packages (src/images: layers packed from a root filesystem) both go through it.
 *
 * Reproducible: documents are fixed JSON of their inputs, dates are the build's epoch (never the
 * clock), tar entries are sorted, owned by root and dated at that epoch, and gzip writes no
 * timestamp, so the same inputs always give the same digests.
 *
 * The index names the image twice: `io.containerd.image.name` carries the full reference, which
 * `ctr images import` (containerd 1.6) uses as the image name as it is, and
 * `org.opencontainers.image.ref.name` carries the tag, as the OCI image layout specifies.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { stat } from "node:fs/promises";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { gzipSync } from "node:zlib";
import { Header } from "tar";

/**
 * Bumped whenever the same inputs would be written as different bytes, so that caches keyed by
 * their inputs (src/images, the real node's own images) write their archives again.
 */
export const archiveFormat = 2;

export const mediaTypes = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layer: "application/vnd.oci.image.layer.v1.tar+gzip",
} as const;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture: string; os: string };
}

/** One built layer: `digest` names the gzip blob, `diffId` the uncompressed tar. */
export interface LayerBlob {
  digest: string;
  diffId: string;
  size: number;
}

/** What `USER`, `ENV`, `ENTRYPOINT`, `CMD`, `WORKDIR` and `EXPOSE` say in a Dockerfile. */
export interface ImageSettings {
  user?: string;
  env: Record<string, string>;
  entrypoint?: string[];
  cmd?: string[];
  workingDir?: string;
  exposedPorts?: number[];
  labels?: Record<string, string>;
}

/** A JSON document with its digest: blobs are stored and named by these exact bytes. */
export interface Blob {
  bytes: Buffer;
  descriptor: Descriptor;
}

export function sha256Digest(bytes: Buffer | string): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

function jsonBlob(mediaType: string, doc: unknown): Blob {
  const bytes = Buffer.from(JSON.stringify(doc));
  return { bytes, descriptor: { mediaType, digest: sha256Digest(bytes), size: bytes.length } };
}

/** Node's process.arch in OCI's words. */
export function ociArchitecture(arch: string = process.arch): string {
  const names: Record<string, string> = {
    x64: "amd64",
    arm64: "arm64",
    arm: "arm",
    ppc64: "ppc64le",
    s390x: "s390x",
  };
  return names[arch] ?? arch;
}

/** `docker.io/seldonio/mlserver:1.6.1` -> `1.6.1`; a reference must carry a tag here. */
export function tagOf(ref: string): string {
  const slash = ref.lastIndexOf("/");
  const colon = ref.lastIndexOf(":");
  if (colon <= slash || ref.includes("@")) {
    throw new Error(`image reference "${ref}" must end in a :tag (and carry no @digest)`);
  }
  return ref.slice(colon + 1);
}

/** Image config: `created` and history use the build's fixed epoch, never the wall clock. */
export function imageConfig(
  settings: ImageSettings,
  layers: readonly LayerBlob[],
  epochSeconds: number,
): Blob {
  const created = new Date(epochSeconds * 1000).toISOString();
  const env = Object.entries(settings.env).map(([name, value]) => `${name}=${value}`);
  const exposed = settings.exposedPorts?.length
    ? { ExposedPorts: Object.fromEntries(settings.exposedPorts.map((p) => [`${p}/tcp`, {}])) }
    : {};
  return jsonBlob(mediaTypes.config, {
    created,
    architecture: ociArchitecture(),
    os: "linux",
    config: {
      ...(settings.user ? { User: settings.user } : {}),
      Env: env,
      ...(settings.entrypoint ? { Entrypoint: settings.entrypoint } : {}),
      ...(settings.cmd ? { Cmd: settings.cmd } : {}),
      ...(settings.workingDir ? { WorkingDir: settings.workingDir } : {}),
      ...exposed,
      ...(settings.labels ? { Labels: settings.labels } : {}),
    },
    rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) },
    history: layers.map(() => ({ created, created_by: "mlmodel image build" })),
  });
}

export function imageManifest(config: Blob, layers: readonly LayerBlob[]): Blob {
  return jsonBlob(mediaTypes.manifest, {
    schemaVersion: 2,
    mediaType: mediaTypes.manifest,
    config: config.descriptor,
    layers: layers.map((l) => ({ mediaType: mediaTypes.layer, digest: l.digest, size: l.size })),
  });
}

export function imageIndex(manifest: Blob, ref: string): Buffer {
  const entry: Descriptor = {
    ...manifest.descriptor,
    annotations: {
      "io.containerd.image.name": ref,
      "org.opencontainers.image.ref.name": tagOf(ref),
    },
    platform: { architecture: ociArchitecture(), os: "linux" },
  };
  return Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: mediaTypes.index, manifests: [entry] }));
}

export const ociLayoutFile = Buffer.from(JSON.stringify({ imageLayoutVersion: "1.0.0" }));

export function blobPath(digest: string): string {
  return `blobs/${digest.replace(":", "/")}`;
}

/** `docker save`'s manifest.json, pointing at the same blobs (Docker reads gzipped layers too). */
export function dockerManifest(config: Blob, layers: readonly LayerBlob[], ref: string): Buffer {
  return Buffer.from(
    JSON.stringify([
      {
        Config: blobPath(config.descriptor.digest),
        RepoTags: [ref],
        Layers: layers.map((l) => blobPath(l.digest)),
      },
    ]),
  );
}

// --- tar ---

export type ImageEntry =
  | { path: string; type: "file"; mode: number; content: Buffer }
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "symlink"; target: string };

const tarTypes = { file: "File", dir: "Directory", symlink: "SymbolicLink" } as const;

/** One ustar header block: root-owned, dated at the epoch. */
function tarHeader(
  entry: { path: string; type: keyof typeof tarTypes; mode: number; size: number; target?: string },
  epochSeconds: number,
): Buffer {
  const header = new Header({
    path: entry.type === "dir" ? `${entry.path.replace(/\/$/, "")}/` : entry.path,
    mode: entry.type === "symlink" ? 0o777 : entry.mode,
    uid: 0,
    gid: 0,
    uname: "",
    gname: "",
    size: entry.size,
    mtime: new Date(epochSeconds * 1000),
    type: tarTypes[entry.type],
    linkpath: entry.target,
  });
  header.encode();
  if (header.needPax || !header.block)
    throw new Error(`tar: ${entry.path} needs a pax header (name too long)`);
  return Buffer.from(header.block);
}

const padding = (size: number) => Buffer.alloc((512 - (size % 512)) % 512);

/** A ustar archive of `entries`, in the order given (a layer of a few files, in memory). */
export function tarArchive(entries: ImageEntry[], epochSeconds = 0): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const content = entry.type === "file" ? entry.content : Buffer.alloc(0);
    const target = entry.type === "symlink" ? entry.target : undefined;
    const mode = entry.type === "symlink" ? 0o777 : entry.mode;
    blocks.push(
      tarHeader({ path: entry.path, type: entry.type, mode, size: content.length, target }, epochSeconds),
    );
    if (content.length > 0) blocks.push(content, padding(content.length));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** Parent directories first, then each path once, sorted: a layer any unpacker accepts. */
export function normaliseEntries(entries: ImageEntry[]): ImageEntry[] {
  const byPath = new Map<string, ImageEntry>();
  for (const entry of entries) {
    const path = entry.path.replace(/^\/+/, "").replace(/\/+$/, "");
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const parent = parts.slice(0, i).join("/");
      if (!byPath.has(parent)) byPath.set(parent, { path: parent, type: "dir", mode: 0o755 });
    }
    byPath.set(path, { ...entry, path });
  }
  return [...byPath.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

// --- the archive ---

/** A layer of an archive: its blob's bytes, or the path of the file that holds them. */
export interface ArchiveLayer extends LayerBlob {
  source: Buffer | string;
}

export interface ArchiveSpec {
  /** Full reference, e.g. `docker.io/seldonio/mlserver:1.6.1` or `mlmodel.local/pause:1`. */
  ref: string;
  settings: ImageSettings;
  layers: readonly ArchiveLayer[];
  epochSeconds: number;
}

export interface WrittenArchive {
  /** The manifest's digest: what containerd lists as the image's digest. */
  digest: string;
  /** The archive file's own digest (`sha256:<hex>`) and size. */
  archiveSha256: string;
  archiveSize: number;
}

/** The archive's tar stream: the layout's files sorted by name, blobs streamed from disk. */
async function* archiveStream(
  files: { path: string; source: Buffer | string; size: number }[],
  epochSeconds: number,
): AsyncGenerator<Buffer> {
  for (const dir of ["blobs", "blobs/sha256"])
    yield tarHeader({ path: dir, type: "dir", mode: 0o755, size: 0 }, epochSeconds);
  for (const file of [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    yield tarHeader({ path: file.path, type: "file", mode: 0o644, size: file.size }, epochSeconds);
    if (Buffer.isBuffer(file.source)) yield file.source;
    else for await (const chunk of createReadStream(file.source)) yield chunk as Buffer;
    yield padding(file.size);
  }
  yield Buffer.alloc(1024);
}

/**
 * Writes the image as an OCI image layout (plus Docker's manifest.json) in a tar at `outFile`,
 * streaming layer files from disk (an image's layers can be hundreds of megabytes).
 */
export async function writeImageArchive(outFile: string, spec: ArchiveSpec): Promise<WrittenArchive> {
  const config = imageConfig(spec.settings, spec.layers, spec.epochSeconds);
  const manifest = imageManifest(config, spec.layers);
  const files: { path: string; source: Buffer | string; size: number }[] = [
    { path: "oci-layout", source: ociLayoutFile, size: ociLayoutFile.length },
    ...[imageIndex(manifest, spec.ref)].map((b) => ({ path: "index.json", source: b, size: b.length })),
    ...[dockerManifest(config, spec.layers, spec.ref)].map((b) => ({
      path: "manifest.json",
      source: b,
      size: b.length,
    })),
    { path: blobPath(config.descriptor.digest), source: config.bytes, size: config.bytes.length },
    { path: blobPath(manifest.descriptor.digest), source: manifest.bytes, size: manifest.bytes.length },
  ];
  for (const layer of spec.layers) {
    const size = Buffer.isBuffer(layer.source) ? layer.source.length : (await stat(layer.source)).size;
    if (size !== layer.size)
      throw new Error(`layer ${layer.digest} is ${size} bytes, its record says ${layer.size}`);
    files.push({ path: blobPath(layer.digest), source: layer.source, size });
  }
  const hash = createHash("sha256");
  let archiveSize = 0;
  await pipeline(
    Readable.from(archiveStream(files, spec.epochSeconds)),
    async function* (chunks: AsyncIterable<Buffer>) {
      for await (const chunk of chunks) {
        hash.update(chunk);
        archiveSize += chunk.length;
        yield chunk;
      }
    },
    createWriteStream(outFile),
  );
  return { digest: manifest.descriptor.digest, archiveSha256: `sha256:${hash.digest("hex")}`, archiveSize };
}

/** A small image of files listed in memory (the real node's pause and busybox). */
export interface ImageSpec {
  /** Full reference, e.g. `mlmodel.local/pause:1`. */
  name: string;
  entries: ImageEntry[];
  entrypoint?: string[];
  cmd?: string[];
  user?: string;
  env?: Record<string, string>;
  workingDir?: string;
}

/** Packs `spec` as one layer into an archive at `outFile`; returns the image's digest. */
export async function packImage(spec: ImageSpec, outFile: string): Promise<{ name: string; digest: string }> {
  const layerTar = tarArchive(normaliseEntries(spec.entries));
  const layer = gzipSync(layerTar);
  const written = await writeImageArchive(outFile, {
    ref: spec.name,
    settings: {
      user: spec.user,
      env: spec.env ?? { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" },
      entrypoint: spec.entrypoint,
      cmd: spec.cmd,
      workingDir: spec.workingDir,
    },
    layers: [
      { source: layer, digest: sha256Digest(layer), diffId: sha256Digest(layerTar), size: layer.length },
    ],
    epochSeconds: 0,
  });
  return { name: spec.name, digest: written.digest };
}
