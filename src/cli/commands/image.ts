/** `mlmodel image list|build`: the images built locally from Debian packages, npm and PyPI. */
import { parseArgs } from "node:util";
import {
  cachedImage,
  ensureImage,
  ensureImagePrerequisites,
  imageCacheDir,
  imageNames,
  imageRecipes,
} from "../../images/index.ts";
import { CliError } from "../errors.ts";

export const summary = "build the project's and the serving runtimes' images locally (no registry needed)";

const help = `Usage: mlmodel image <list|build> [NAME...]

Builds container images from Debian packages (mmdebstrap), npm and PyPI, reproducibly, into
${imageCacheDir()} (MLMODEL_CACHE_DIR moves it), and prints for each its reference and an
archive that \`ctr -n k8s.io images import\` accepts. A build happens only when an input changed.
Needs root on Linux x86-64; missing build tools are installed with apt-get.

Commands:
  list          each image, its reference, and its archive when one is cached
  build NAME    build (or find in the cache) the named images, or all with --all

Flags:
  --all            (build) every image
  --archive-only   (build) print only each archive's path, one a line

Images: ${imageNames.join(", ")}

Examples:
  mlmodel image build mlserver
  ctr -n k8s.io images import "$(mlmodel image build mlserver --archive-only)"`;

function formatMB(bytes: number): string {
  return `${(bytes / 1e6).toFixed(0)} MB`;
}

export async function run(argv: string[]): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
  const { values, positionals } = parsed;
  const [action, ...names] = positionals;
  if (values.help || !action) {
    console.log(help);
    return action || values.help ? 0 : 2;
  }
  if (action === "list") {
    for (const recipe of imageRecipes) {
      const cached = await cachedImage(recipe.name);
      const where = cached
        ? `${cached.archive} (${formatMB(cached.record.archiveSize)}, ${cached.record.digest})`
        : "not built";
      console.log(`${recipe.name.padEnd(10)} ${recipe.ref}\n  ${recipe.description}\n  ${where}`);
    }
    return 0;
  }
  if (action !== "build") throw new CliError(`unknown action "${action}"\n\n${help}`, 2);
  const wanted = values.all ? imageNames : names;
  if (wanted.length === 0)
    throw new CliError(`name an image to build (${imageNames.join(", ")}) or pass --all`, 2);
  for (const name of wanted) {
    if (!imageNames.includes(name as (typeof imageNames)[number])) {
      throw new CliError(`no image named "${name}"; the images are: ${imageNames.join(", ")}`, 2);
    }
  }
  const log = (line: string) => console.error(`[image] ${line}`);
  try {
    await ensureImagePrerequisites(log);
    for (const name of wanted) {
      const image = await ensureImage(name, log);
      if (values["archive-only"]) console.log(image.archive);
      else
        console.log(
          `${image.ref} ${image.record.digest}\n  archive ${image.archive} (${formatMB(image.record.archiveSize)}, unpacked ${formatMB(image.record.unpackedSize)})`,
        );
    }
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError((err as Error).message, 1);
  }
  return 0;
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      all: { type: "boolean" },
      "archive-only": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
}
