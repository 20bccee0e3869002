/**
 * A minimal OCI image packer: a list of files becomes one gzipped layer, an image config, a
 * manifest and an index, written as an OCI image-layout tar archive that
 * `ctr images import` accepts (its index names the image with containerd's annotation).
 *
 * Reproducible: entries are sorted, owned by root, dated at the epoch, and gzip writes no
 * timestamp, so the same files always give the same digests.
 */
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { Header } from "tar";

export type ImageEntry =
  | { path: string; type: "file"; mode: number; content: Buffer }
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "symlink"; target: string };

export interface ImageSpec {
  /** Full reference, e.g. `mlmodel.local/pause:1`. */
  name: string;
  entries: ImageEntry[];
  entrypoint?: string[];
  cmd?: string[];
  user?: string;
  env?: string[];
  workingDir?: string;
}

const epoch = new Date(0);
const tarTypes = { file: "File", dir: "Directory", symlink: "SymbolicLink" } as const;

/** A ustar archive of `entries`, in the order given. */
export function tarArchive(entries: ImageEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const content = entry.type === "file" ? entry.content : Buffer.alloc(0);
    const header = new Header({
      path: entry.type === "dir" ? `${entry.path.replace(/\/$/, "")}/` : entry.path,
      mode: entry.type === "symlink" ? 0o777 : entry.mode,
      uid: 0,
      gid: 0,
      uname: "",
      gname: "",
      size: content.length,
      mtime: epoch,
      type: tarTypes[entry.type],
      linkpath: entry.type === "symlink" ? entry.target : undefined,
    });
    header.encode();
    if (header.needPax || !header.block)
      throw new Error(`tar: ${entry.path} needs a pax header (name too long)`);
    blocks.push(Buffer.from(header.block));
    if (content.length > 0) {
      blocks.push(content);
      const padding = (512 - (content.length % 512)) % 512;
      if (padding) blocks.push(Buffer.alloc(padding));
    }
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

const sha256 = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

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

export interface PackedImage {
  name: string;
  /** The manifest's digest: what containerd lists as the image's digest. */
  digest: string;
  archive: Buffer;
}

/** Packs `spec` into an OCI image-layout tar archive. */
export function packImage(spec: ImageSpec): PackedImage {
  const layerTar = tarArchive(normaliseEntries(spec.entries));
  const layer = gzipSync(layerTar);
  const config = Buffer.from(
    JSON.stringify({
      created: epoch.toISOString(),
      architecture: ociArchitecture(),
      os: "linux",
      config: {
        ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
        ...(spec.cmd ? { Cmd: spec.cmd } : {}),
        ...(spec.user ? { User: spec.user } : {}),
        Env: spec.env ?? ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        ...(spec.workingDir ? { WorkingDir: spec.workingDir } : {}),
      },
      rootfs: { type: "layers", diff_ids: [sha256(layerTar)] },
      history: [{ created: epoch.toISOString(), created_by: "mlmodel cluster (src/cluster/node/oci.ts)" }],
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {
        mediaType: "application/vnd.oci.image.config.v1+json",
        digest: sha256(config),
        size: config.length,
      },
      layers: [
        {
          mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
          digest: sha256(layer),
          size: layer.length,
        },
      ],
    }),
  );
  const tag = spec.name.slice(spec.name.lastIndexOf(":") + 1);
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [
        {
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          digest: sha256(manifest),
          size: manifest.length,
          annotations: { "io.containerd.image.name": spec.name, "org.opencontainers.image.ref.name": tag },
          platform: { architecture: ociArchitecture(), os: "linux" },
        },
      ],
    }),
  );
  const blob = (data: Buffer): ImageEntry => ({
    path: `blobs/sha256/${sha256(data).slice("sha256:".length)}`,
    type: "file",
    mode: 0o644,
    content: data,
  });
  const archive = tarArchive(
    normaliseEntries([
      {
        path: "oci-layout",
        type: "file",
        mode: 0o644,
        content: Buffer.from('{"imageLayoutVersion":"1.0.0"}'),
      },
      { path: "index.json", type: "file", mode: 0o644, content: index },
      blob(config),
      blob(manifest),
      blob(layer),
    ]),
  );
  return { name: spec.name, digest: sha256(manifest), archive };
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
