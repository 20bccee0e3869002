/**
 * The OCI documents of an image (config, manifest, index) as pure functions of its layers and
 * settings, so that the same inputs always give the same bytes and so the same digests.
 *
 * The archive's index names the image twice: `io.containerd.image.name` carries the full
 * reference, which `ctr images import` (containerd 1.6) uses as the image name as it is, and
 * `org.opencontainers.image.ref.name` carries the tag, as the OCI image layout specifies. A
 * Docker-style manifest.json beside them lets `docker load` read the same archive.
 */
import { createHash } from "node:crypto";

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
  user: string;
  env: Record<string, string>;
  entrypoint?: string[];
  cmd?: string[];
  workingDir: string;
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
    architecture: "amd64",
    os: "linux",
    config: {
      User: settings.user,
      Env: env,
      ...(settings.entrypoint ? { Entrypoint: settings.entrypoint } : {}),
      ...(settings.cmd ? { Cmd: settings.cmd } : {}),
      WorkingDir: settings.workingDir,
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
    platform: { architecture: "amd64", os: "linux" },
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
