/**
 * Builds images into a cache outside the repo and hands out an archive that
 * `ctr -n k8s.io images import` accepts.
 *
 * Cache layout, under ~/.cache/mlmodel/images (MLMODEL_CACHE_DIR moves ~/.cache/mlmodel):
 *   layers/<layer>-<key>/layer.tar.gz + layer.json   one entry per layer, keyed by its inputs
 *   <image>-<key>/image.tar + image.json             the archive, keyed by its layers' keys and settings
 *   downloads/                                        wheels and other downloads kept between builds
 * The .json record is written last: an entry without it is an interrupted build, one whose
 * blob does not match the recorded digest is corrupted, and both are rebuilt. Builds of one
 * entry are serialised across processes by a lock file beside it.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { withBuildLock } from "../cluster/binaries.ts";
import { archiveFormat, type LayerBlob, writeImageArchive } from "../cluster/index.ts";
import { binaryCacheDir } from "../cluster/paths.ts";
import { sha256OfFile } from "../downloader/digest.ts";
import {
  buildEpochSeconds,
  builderVersion,
  type ImageRecipe,
  type LayerRecipe,
  recipeFor,
} from "./recipes.ts";
import { packLayer } from "./tarball.ts";

export type ProgressFn = (line: string) => void;

export function imageCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(binaryCacheDir(env), "images");
}

/** A short, stable hash of any JSON-able value (object keys sorted). */
export function keyOf(value: unknown): string {
  const canonical = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(canonical)
      : v && typeof v === "object"
        ? Object.fromEntries(
            Object.entries(v as Record<string, unknown>)
              .filter(([, x]) => x !== undefined)
              .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
              .map(([k, x]) => [k, canonical(x)]),
          )
        : v;
  return createHash("sha256")
    .update(JSON.stringify(canonical(value)))
    .digest("hex")
    .slice(0, 16);
}

export interface LayerRecord extends LayerBlob {
  name: string;
  key: string;
  /** Bytes of the uncompressed tar. */
  tarSize: number;
  buildSeconds: number;
  facts?: Record<string, unknown>;
}

export interface ImageRecord {
  name: string;
  ref: string;
  key: string;
  /** The manifest's digest: what `ctr images ls` shows as the image's digest. */
  digest: string;
  archiveSha256: string;
  archiveSize: number;
  /** Sum of the layers' uncompressed tars: about what the image takes unpacked. */
  unpackedSize: number;
  layers: LayerRecord[];
  buildSeconds: number;
}

export interface EnsuredImage {
  ref: string;
  /** A tar file `ctr -n k8s.io images import` accepts; the image is named `ref` in it. */
  archive: string;
  record: ImageRecord;
  /** True when this call built (part of) the image, false when everything came from the cache. */
  built: boolean;
}

type EntryState<T> = { state: "ok"; record: T } | { state: "missing" } | { state: "corrupted"; why: string };

async function readRecord<T>(dir: string, file: string): Promise<T | "missing" | "unreadable"> {
  if (!existsSync(dir)) return "missing";
  try {
    return JSON.parse(await readFile(join(dir, file), "utf8")) as T;
  } catch {
    return "unreadable";
  }
}

/**
 * An entry is ok when its record (written last) reads and its blob matches the digest the
 * record holds; no record is an interrupted build, a mismatch a corrupted entry.
 */
async function inspectEntry<T>(
  dir: string,
  files: { record: string; blob: string },
  recordedDigest: (record: T) => string,
): Promise<EntryState<T>> {
  const record = await readRecord<T>(dir, files.record);
  if (record === "missing") return { state: "missing" };
  if (record === "unreadable")
    return { state: "corrupted", why: `no readable ${files.record} (an interrupted build?)` };
  const blob = join(dir, files.blob);
  if (!existsSync(blob)) return { state: "corrupted", why: `${files.blob} is missing` };
  if (`sha256:${await sha256OfFile(blob)}` !== recordedDigest(record))
    return { state: "corrupted", why: `${files.blob} does not match its recorded digest` };
  return { state: "ok", record };
}

export function inspectLayer(dir: string): Promise<EntryState<LayerRecord>> {
  return inspectEntry<LayerRecord>(dir, { record: "layer.json", blob: "layer.tar.gz" }, (r) => r.digest);
}

export function inspectImage(dir: string): Promise<EntryState<ImageRecord>> {
  return inspectEntry<ImageRecord>(dir, { record: "image.json", blob: "image.tar" }, (r) => r.archiveSha256);
}

function seconds(since: number): number {
  return Math.round((Date.now() - since) / 100) / 10;
}

/** Entries of an image or layer not used for this long are removed when a newer one is used. */
export const staleAfterMs = 24 * 60 * 60 * 1000;

/** Marks an entry as used now (its directory's mtime), so pruning keeps it. */
async function touch(dir: string): Promise<void> {
  const now = new Date();
  await utimes(dir, now, now).catch(() => {});
}

/**
 * Removes the other entries named `<name>-<key>` in `parent` (older keys of the same image or
 * layer) that nobody used for `staleAfterMs` and nobody is building: every edit under src/
 * makes a new project layer and image, and without this the cache would grow by about 130 MB
 * each time. Entries used within the day stay, so two checkouts sharing the cache do not
 * evict each other's.
 */
export async function pruneStale(
  parent: string,
  name: string,
  keep: string,
  now = Date.now(),
): Promise<string[]> {
  const pattern = new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-[0-9a-f]{16}$`);
  const removed: string[] = [];
  for (const entry of await readdir(parent).catch(() => [] as string[])) {
    const dir = join(parent, entry);
    if (!pattern.test(entry) || dir === keep || existsSync(`${dir}.lock`)) continue;
    const age = now - (await stat(dir)).mtimeMs;
    if (age < staleAfterMs) continue;
    await rm(dir, { recursive: true, force: true });
    removed.push(entry);
  }
  return removed;
}

/** Runs `build` under the entry's lock unless a good entry is (or, after waiting, has become) there. */
async function ensureEntry<T>(
  dir: string,
  what: string,
  inspect: (dir: string) => Promise<EntryState<T>>,
  build: (staging: string) => Promise<void>,
  progress: ProgressFn,
): Promise<{ record: T; built: boolean }> {
  const first = await inspect(dir);
  if (first.state === "ok") return { record: first.record, built: false };
  await mkdir(dirname(dir), { recursive: true });
  return withBuildLock(dir, async () => {
    const entry = await inspect(dir);
    if (entry.state === "ok") return { record: entry.record, built: false };
    if (entry.state === "corrupted")
      progress(`cache entry ${dir} is corrupted (${entry.why}); rebuilding ${what}`);
    else progress(`building ${what} into ${dir}`);
    const staging = `${dir}.building-${process.pid}`;
    await rm(staging, { recursive: true, force: true });
    await mkdir(staging, { recursive: true });
    try {
      await build(staging);
      await rm(dir, { recursive: true, force: true });
      await rename(staging, dir);
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
    const done = await inspect(dir);
    if (done.state !== "ok") throw new Error(`${what} was built but its cache entry does not check out`);
    return { record: done.record, built: true };
  });
}

/** The packer's archiveFormat is part of the key: a new format writes the archive again (not the layers). */
function imageKey(recipe: ImageRecipe, layerKeys: string[]): string {
  return keyOf({ ref: recipe.ref, settings: recipe.settings, layers: layerKeys, archiveFormat });
}

async function layerKey(layer: LayerRecipe): Promise<string> {
  return keyOf({ builderVersion, epoch: buildEpochSeconds, name: layer.name, inputs: await layer.inputs() });
}

async function ensureLayer(layer: LayerRecipe, root: string, progress: ProgressFn) {
  const key = await layerKey(layer);
  const dir = join(root, "layers", `${layer.name}-${key}`);
  const result = await ensureEntry<LayerRecord>(
    dir,
    `layer ${layer.name}`,
    inspectLayer,
    async (staging) => {
      const started = Date.now();
      const files = join(staging, "root");
      const scratch = join(staging, "scratch");
      await mkdir(files);
      await mkdir(scratch);
      const facts = await layer.build(files, {
        epochSeconds: buildEpochSeconds,
        downloadsDir: join(root, "downloads"),
        scratch,
        progress,
      });
      // The inputs were read before the build; a file edited meanwhile (src/ while npm ci ran)
      // would put bytes into the layer that its key does not describe.
      if ((await layerKey(layer)) !== key) {
        throw new Error(`the inputs of layer ${layer.name} changed while it was being built; build again`);
      }
      const blob = await packLayer(files, join(staging, "layer.tar.gz"), buildEpochSeconds);
      await rm(files, { recursive: true, force: true });
      await rm(scratch, { recursive: true, force: true });
      const record: LayerRecord = { name: layer.name, key, ...blob, buildSeconds: seconds(started), facts };
      await writeFile(join(staging, "layer.json"), `${JSON.stringify(record, null, 2)}\n`);
      progress(
        `built layer ${layer.name} in ${record.buildSeconds}s (${(blob.size / 1e6).toFixed(1)} MB gzipped)`,
      );
    },
    progress,
  );
  await touch(dir);
  await pruneStale(join(root, "layers"), layer.name, dir);
  return { ...result, dir };
}

/** The image's archive, image.tar: its layers' blobs straight from the layer entries. */
async function writeArchive(
  recipe: ImageRecipe,
  layers: { record: LayerRecord; dir: string }[],
  staging: string,
) {
  return writeImageArchive(join(staging, "image.tar"), {
    ref: recipe.ref,
    settings: recipe.settings,
    layers: layers.map((l) => ({ ...l.record, source: join(l.dir, "layer.tar.gz") })),
    epochSeconds: buildEpochSeconds,
  });
}

/**
 * The image `name` (see `imageNames`), built if the cache lacks it. Needs root and the build
 * tools (see imagesSupport / ensureImagePrerequisites).
 */
export async function ensureImage(name: string, progress: ProgressFn = () => {}): Promise<EnsuredImage> {
  const recipe = recipeFor(name);
  const root = imageCacheDir();
  await mkdir(root, { recursive: true });
  const started = Date.now();
  const layers: Awaited<ReturnType<typeof ensureLayer>>[] = [];
  for (const layer of recipe.layers) layers.push(await ensureLayer(layer, root, progress));
  const key = imageKey(
    recipe,
    layers.map((l) => l.record.key),
  );
  const dir = join(root, `${recipe.name}-${key}`);
  const image = await ensureEntry<ImageRecord>(
    dir,
    `image ${recipe.ref}`,
    inspectImage,
    async (staging) => {
      const archive = await writeArchive(recipe, layers, staging);
      const record: ImageRecord = {
        name: recipe.name,
        ref: recipe.ref,
        key,
        ...archive,
        unpackedSize: layers.reduce((sum, l) => sum + l.record.tarSize, 0),
        layers: layers.map((l) => l.record),
        buildSeconds: seconds(started),
      };
      await writeFile(join(staging, "image.json"), `${JSON.stringify(record, null, 2)}\n`);
    },
    progress,
  );
  await touch(dir);
  await pruneStale(root, recipe.name, dir);
  return {
    ref: recipe.ref,
    archive: join(dir, "image.tar"),
    record: image.record,
    built: image.built || layers.some((l) => l.built),
  };
}

/** The cache entry `ensureImage` would use now, without building anything. */
export async function cachedImage(name: string): Promise<EnsuredImage | undefined> {
  const recipe = recipeFor(name);
  const root = imageCacheDir();
  const keys = [];
  for (const layer of recipe.layers) keys.push(await layerKey(layer));
  const key = imageKey(recipe, keys);
  const dir = join(root, `${recipe.name}-${key}`);
  const record = await readRecord<ImageRecord>(dir, "image.json");
  if (typeof record === "string") return undefined;
  return { ref: recipe.ref, archive: join(dir, "image.tar"), record, built: false };
}
