/**
 * Container images built without a registry or a Docker engine: from Debian packages, npm and
 * PyPI, reproducibly, into a cache outside the repo (see docs/images.md). The operator never
 * imports this; the CLI (`mlmodel image`) and the tests do.
 */
export { cachedImage, type EnsuredImage, ensureImage, type ImageRecord, imageCacheDir } from "./build.ts";
export {
  ensureImagePrerequisites,
  imageAptPackages,
  imagesSupport,
  machineProblem as imagesMachineProblem,
  type Support,
} from "./prerequisites.ts";
export {
  type ImageName,
  imageNames,
  imageRecipes,
  mlserverVenv,
  recipeFor,
  sklearnSampleScript,
} from "./recipes.ts";
