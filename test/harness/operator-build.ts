/**
 * A second build of the project image for upgrade tests: the cached `mlmodel` image's layers
 * (nothing rebuilt) under another tag, with MLMODEL_BUILD set in its config, so the operator it
 * runs reports that build (mlmodel_operator_build_info, src/operator/build-info.ts). A real image
 * of its own: another config, so another manifest digest, imported beside the first.
 */
import { join } from "node:path";
import { writeImageArchive } from "../../src/cluster/index.ts";
import { ensureImage, imageCacheDir, recipeFor } from "../../src/images/index.ts";
import { buildEpochSeconds } from "../../src/images/recipes.ts";
import { buildEnv } from "../../src/operator/build-info.ts";

export interface OperatorBuild {
  ref: string;
  archive: string;
  digest: string;
  build: string;
}

/** Writes the build `build` (a tag suffix too: `<tag>-<build>`) as an archive in `dir`. */
export async function operatorImageBuild(build: string, dir: string): Promise<OperatorBuild> {
  if (!/^[a-z0-9][a-z0-9.-]*$/.test(build))
    throw new Error(
      `build "${build}" must be lowercase letters, digits, dots and dashes (it is a tag suffix)`,
    );
  const recipe = recipeFor("mlmodel");
  const base = await ensureImage(recipe.name);
  const ref = `${base.ref}-${build}`;
  const layers = base.record.layers.map((layer) => ({
    ...layer,
    source: join(imageCacheDir(), "layers", `${layer.name}-${layer.key}`, "layer.tar.gz"),
  }));
  const archive = join(dir, `mlmodel-${build}.tar`);
  const written = await writeImageArchive(archive, {
    ref,
    settings: { ...recipe.settings, env: { ...recipe.settings.env, [buildEnv]: build } },
    layers,
    epochSeconds: buildEpochSeconds,
  });
  return { ref, archive, digest: written.digest, build };
}
