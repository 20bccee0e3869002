/**
 * Figures for the locally built images: build time (cold when the cache lacks an entry, warm
 * otherwise), sizes, `ctr images import` time, and MLServer's start-to-ready time for the
 * sample scikit-learn model, over a few runs. Prints figures; never passes or fails on time.
 *
 *   node bench/images/bench.ts [--runs 3] [--json]
 *
 * For a cold build, point MLMODEL_CACHE_DIR at an empty directory. Needs what the image tests
 * need (root, mmdebstrap, containerd); see docs/images.md.
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ensureImage, ensureImagePrerequisites, imageNames, imagesSupport } from "../../src/images/index.ts";
import { Containerd } from "../../test/harness/containerd.ts";
import { inferV2, serveWithMlserverRuntime, trainSampleModel } from "../../test/harness/images.ts";
import { scratchDir } from "../../test/harness/scratch.ts";
import { percentiles } from "../lib/stats.ts";

const { values } = parseArgs({
  options: { runs: { type: "string", default: "3" }, json: { type: "boolean" } },
});
const runs = Number(values.runs);
const log = (line: string) => console.error(`# ${line}`);
const mb = (bytes: number) => Math.round(bytes / 1e5) / 10;

await ensureImagePrerequisites(log);
const support = await imagesSupport();
if (!support.ok) {
  console.error(`cannot build images here: ${support.reason}`);
  process.exit(1);
}

const images = [];
for (const name of imageNames) {
  const started = Date.now();
  const image = await ensureImage(name, log);
  images.push({
    name,
    ref: image.ref,
    digest: image.record.digest,
    build: image.built ? "cold (built now)" : "warm (cache)",
    seconds: (Date.now() - started) / 1000,
    archiveMB: mb(image.record.archiveSize),
    unpackedMB: mb(image.record.unpackedSize),
    layers: image.record.layers.map((l) => `${l.name} ${mb(l.size)} MB gz (built in ${l.buildSeconds}s)`),
    archive: image.archive,
    importSeconds: 0,
  });
}

const ctd = await Containerd.start(scratchDir("bench-containerd"));
const readyMs: number[] = [];
const firstInferenceMs: number[] = [];
try {
  for (const image of images) {
    const started = Date.now();
    const imported = await ctd.importArchive(image.archive);
    if (imported.code !== 0) throw new Error(`import of ${image.ref} failed: ${imported.stderr}`);
    image.importSeconds = (Date.now() - started) / 1000;
  }
  const ref = images.find((i) => i.name === "mlserver")!.ref;
  const model = await trainSampleModel(ctd, ref, join(scratchDir("bench-model"), "model"));
  for (let run = 0; run < runs; run++) {
    const server = await serveWithMlserverRuntime(ctd, ref, model.dir);
    try {
      readyMs.push(server.readyMs);
      const before = Date.now();
      await inferV2(server.base, "iris", model.inputs);
      firstInferenceMs.push(Date.now() - before);
    } finally {
      await server.stop();
    }
  }
} finally {
  await ctd.stop();
}

const result = {
  images: images.map(({ archive: _archive, ...rest }) => rest),
  mlserverStartToReadyMs: { samples: readyMs, ...percentiles(readyMs) },
  mlserverFirstInferenceMs: { samples: firstInferenceMs, ...percentiles(firstInferenceMs) },
  loadAverage: loadavg().map((l) => Math.round(l * 10) / 10),
};
if (values.json) console.log(JSON.stringify(result));
else {
  for (const i of result.images) {
    console.log(
      `${i.ref}: ${i.build} ${i.seconds.toFixed(1)}s, archive ${i.archiveMB} MB, unpacked ${i.unpackedMB} MB, ctr import ${i.importSeconds.toFixed(1)}s`,
    );
    for (const l of i.layers) console.log(`  ${l}`);
  }
  console.log(
    `mlserver start -> /v2/health/ready (ms, ${runs} runs): ${JSON.stringify(result.mlserverStartToReadyMs)}`,
  );
  console.log(`mlserver first inference (ms): ${JSON.stringify(result.mlserverFirstInferenceMs)}`);
  console.log(`load average: ${result.loadAverage.join(" ")}`);
}
