/**
 * The real node's own images, packed locally (there is no registry to pull from):
 * - pause: the sandbox image of every pod, our own static pause program (controlplane/modules/pause);
 * - busybox: Debian's static busybox, for the storage provisioner's helper pods and for tests
 *   (sh, wget, httpd, nc...).
 * Both are cached as OCI archives in `<cache>/images`, named by what they contain.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ProgressFn } from "../binaries.ts";
import { binaryCacheDir } from "../paths.ts";
import { run } from "./host.ts";
import { archiveFormat, type ImageEntry, type ImageSpec, packImage } from "./oci.ts";

/** Images are named in a registry that does not exist, so nothing can ever pull them. */
export const localRegistry = "mlmodel.local";

export interface LocalImage {
  name: string;
  archive: string;
}

export interface NodeImages {
  pause: LocalImage;
  busybox: LocalImage;
}

const imagesDir = () => join(binaryCacheDir(), "node-images");

/**
 * Packs an image into the cache unless an archive of that name is there already; the name
 * carries the packer's archive format, so a packer that writes differently writes it again.
 */
async function cachedImage(baseName: string, build: () => Promise<ImageSpec>): Promise<LocalImage> {
  const dir = imagesDir();
  await mkdir(dir, { recursive: true });
  const archive = join(dir, `${baseName}-oci${archiveFormat}.tar`);
  const spec = await build();
  if (!existsSync(archive)) {
    // Written aside and renamed: a reader never sees half an archive.
    const staging = `${archive}.${process.pid}.tmp`;
    await packImage(spec, staging);
    await rename(staging, archive);
  }
  return { name: spec.name, archive };
}

export async function pauseImage(pauseBinary: string): Promise<LocalImage> {
  const content = await readFile(pauseBinary);
  const tag = createHash("sha256").update(content).digest("hex").slice(0, 12);
  return cachedImage(`pause-${tag}`, async () => ({
    name: `${localRegistry}/pause:${tag}`,
    entries: [{ path: "pause", type: "file", mode: 0o755, content }],
    entrypoint: ["/pause"],
    // As Kubernetes' own pause image: nobody needs root to hold namespaces open.
    user: "65535:65535",
  }));
}

const busyboxRoot = () => join(binaryCacheDir(), "busybox-static");

/** The busybox fetched before, if any (read-only). */
export async function cachedBusybox(): Promise<{ binary: string; version: string } | undefined> {
  const root = busyboxRoot();
  const cached = existsSync(root) ? (await readdir(root)).filter((d) => !d.endsWith(".tmp")).sort() : [];
  const newest = cached.at(-1);
  if (newest && existsSync(join(root, newest, "bin", "busybox")))
    return { binary: join(root, newest, "bin", "busybox"), version: newest };
  return undefined;
}

/** `apt-get download` fetches the .deb without installing it (busybox-static conflicts with busybox). */
async function fetchBusybox(progress: ProgressFn): Promise<{ binary: string; version: string }> {
  const cached = await cachedBusybox();
  if (cached) return cached;
  const root = busyboxRoot();
  progress("fetching Debian's busybox-static (apt-get download) for the helper image");
  await mkdir(root, { recursive: true });
  const work = await mkdtemp(join(root, "download-"));
  try {
    const download = () => run("sh", ["-c", `cd "${work}" && apt-get download busybox-static`]);
    let result = await download();
    if (result.code !== 0) {
      await run("apt-get", ["update"]);
      result = await download();
    }
    const deb = (await readdir(work)).find((f) => f.endsWith(".deb"));
    if (result.code !== 0 || !deb)
      throw new Error(`apt-get download busybox-static failed: ${(result.stderr || result.stdout).trim()}`);
    const debVersion = (await run("dpkg-deb", ["-f", join(work, deb), "Version"])).stdout.trim();
    // 1:1.35.0-4+deb12u1 -> 1.35.0: the upstream version names the image.
    const version = debVersion.replace(/^\d+:/, "").replace(/-[^-]*$/, "");
    const extracted = join(work, "x");
    const unpack = await run("dpkg-deb", ["-x", join(work, deb), extracted]);
    if (unpack.code !== 0) throw new Error(`dpkg-deb -x ${deb} failed: ${unpack.stderr.trim()}`);
    const target = join(root, version);
    await rm(target, { recursive: true, force: true });
    await mkdir(join(target, "bin"), { recursive: true });
    await rename(join(extracted, "bin", "busybox"), join(target, "bin", "busybox"));
    return { binary: join(target, "bin", "busybox"), version };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

const passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const group = "root:x:0:\nnogroup:x:65534:\n";

export async function busyboxImage(progress: ProgressFn): Promise<LocalImage> {
  const { binary, version } = await fetchBusybox(progress);
  const content = await readFile(binary);
  const digest = createHash("sha256").update(content).digest("hex").slice(0, 12);
  return cachedImage(`busybox-${version}-${digest}`, async () => {
    const listed = await run(binary, ["--list-full"]);
    if (listed.code !== 0) throw new Error(`${binary} --list-full failed: ${listed.stderr.trim()}`);
    const applets: ImageEntry[] = listed.stdout
      .split("\n")
      .filter((path) => path && path !== "bin/busybox")
      .map((path) => ({ path, type: "symlink", target: "/bin/busybox" }));
    return {
      name: `${localRegistry}/busybox:${version}`,
      entries: [
        { path: "bin/busybox", type: "file", mode: 0o755, content },
        ...applets,
        { path: "etc/passwd", type: "file", mode: 0o644, content: Buffer.from(passwd) },
        { path: "etc/group", type: "file", mode: 0o644, content: Buffer.from(group) },
        { path: "tmp", type: "dir", mode: 0o1777 },
        { path: "root", type: "dir", mode: 0o700 },
      ],
      cmd: ["sh"],
    };
  });
}

export async function ensureNodeImages(pauseBinary: string, progress: ProgressFn): Promise<NodeImages> {
  return { pause: await pauseImage(pauseBinary), busybox: await busyboxImage(progress) };
}
