// test-needs: images
/**
 * The locally built images, proven on real containers without a node: each is built (or taken
 * from the cache), its config checked, imported with `ctr images import` into a throwaway
 * containerd of the test's own, and run by containerd + runc as its non-root user with the
 * restricted Pod Security level's settings (no capabilities, no new privileges, RuntimeDefault
 * seccomp; a read-only root where the operator sets one), on the host's network so that all
 * traffic stays on loopback.
 *
 * Needs root, Linux x86-64 and the build tools: the `images` prerequisite installs them and
 * builds both images before the tests (a cold build takes minutes, see docs/images.md); where
 * the machine cannot build them the file is reported as skipped, with the reason.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ensureImage, recipeFor } from "../../../src/images/index.ts";
import { builtinRuntimes } from "../../../src/install/builtin-runtimes.ts";
import { defaultOperatorConfig, defaults } from "../../../src/operator/plan.ts";
import { Containerd } from "../../harness/containerd.ts";
import {
  importAndCheck,
  inferV2,
  packModel,
  readArchiveConfig,
  serveWithMlserverRuntime,
  trainSampleModel,
  userDir,
} from "../../harness/images.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { FileServer } from "../downloader/file-server.ts";

const log = (line: string) => console.error(`# [image] ${line}`);

// The images prerequisite built both images (or the file is reported skipped, with the reason,
// where this machine cannot build them); a warm ensureImage takes seconds.
const imageTest = { timeout: 45 * 60_000 };

describe("locally built images on real containers", () => {
  let ctd: Containerd;
  before(async () => {
    ctd = await Containerd.start(scratchDir("containerd"));
  });
  after(async () => {
    await ctd?.stop();
  });

  test(
    "the project image: the Dockerfile's settings, downloads a model as uid 1000 on a read-only root, runs the operator",
    imageTest,
    async () => {
      const recipe = recipeFor("mlmodel");
      assert.equal(
        recipe.ref,
        defaultOperatorConfig.downloaderImage,
        "built under the download Job's image name",
      );
      const image = await ensureImage("mlmodel", log);
      const { config } = readArchiveConfig(image.archive);
      assert.equal(config.User, `${defaults.runAsUser}:${defaults.runAsUser}`);
      assert.deepEqual(config.Entrypoint, ["mlmodel"]);
      assert.deepEqual(config.Cmd, ["operator", "--help"]);
      assert.ok(config.Env.includes("NODE_ENV=production"), `Env: ${config.Env.join(" ")}`);
      assert.equal(config.WorkingDir, "/app");
      await importAndCheck(ctd, image.ref, image.archive, image.record.digest);

      // The model: a tar.gz on a loopback server, checked by its sha256, as a download Job gets it.
      const work = scratchDir("image-download");
      const model = userDir(join(work, "src"), 0);
      // Random bytes: a model compresses little (the downloader refuses an expansion bomb).
      const weights = randomBytes(300_000);
      writeFileSync(join(model, "model.bin"), weights);
      writeFileSync(join(model, "config.json"), '{"layers": 3}\n');
      const tgz = join(work, "m.tgz");
      const sha256 = packModel(model, tgz);
      const body = readFileSync(tgz);
      const server = await new FileServer().start();
      server.files.set("/m.tgz", body);
      const volume = userDir(join(work, "volume"), defaults.runAsUser);
      const tmp = userDir(join(work, "tmp"), defaults.runAsUser);
      try {
        const run = await ctd.run({
          ref: image.ref,
          args: [
            "mlmodel",
            "download",
            "--uri",
            `${server.url}/m.tgz`,
            "--dest",
            `${defaults.modelMountPath}/m`,
            "--sha256",
            sha256,
          ],
          // desiredDownloadJob: readOnlyRootFilesystem, an emptyDir on /tmp, the claim on the mount path.
          readOnlyRootfs: true,
          mounts: [
            { type: "bind", source: volume, destination: defaults.modelMountPath, options: ["rbind", "rw"] },
            { type: "bind", source: tmp, destination: "/tmp", options: ["rbind", "rw"] },
          ],
        });
        assert.equal(run.code, 0, `mlmodel download failed:\n${run.stdout}\n${run.stderr}`);
      } finally {
        await server.stop();
      }
      assert.equal(
        server.fileRequests("/m.tgz").length >= 1,
        true,
        "the download came from the loopback server",
      );
      const dest = join(volume, "m");
      assert.deepEqual(readFileSync(join(dest, "model.bin")), weights);
      assert.equal(readFileSync(join(dest, "config.json"), "utf8"), '{"layers": 3}\n');
      assert.equal(statSync(join(dest, "model.bin")).uid, defaults.runAsUser, "written by the image's user");

      const help = await ctd.run({
        ref: image.ref,
        args: ["mlmodel", "operator", "--help"],
        readOnlyRootfs: true,
      });
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, /Usage: mlmodel operator/);
      // `mlmodel` on the image's PATH (entrypoint and download command above) is the bundled CLI.
      const which = await ctd.run({
        ref: image.ref,
        args: ["node", "-p", "require('node:fs').realpathSync('/usr/local/bin/mlmodel')"],
        readOnlyRootfs: true,
      });
      assert.equal(which.code, 0, which.stderr);
      assert.equal(which.stdout.trim(), "/app/dist/bundle/mlmodel.mjs");
    },
  );

  test(
    "the MLServer image: the built-in runtime's command and env serve a scikit-learn model with local predictions",
    imageTest,
    async () => {
      const runtime = builtinRuntimes.find((r) => r.metadata.name === "mlserver")!.spec;
      const recipe = recipeFor("mlserver");
      assert.equal(recipe.ref, runtime.image, "built under the built-in runtime's own image name");
      const image = await ensureImage("mlserver", log);
      const { config } = readArchiveConfig(image.archive);
      assert.equal(config.User, `${runtime.runAsUser}:${runtime.runAsUser}`);
      await importAndCheck(ctd, image.ref, image.archive, image.record.digest);

      // Who the server runs as, and where it may write.
      const who = await ctd.run({
        ref: image.ref,
        args: [
          "python3",
          "-c",
          "import os; print(os.getuid(), os.getgid(), os.environ['HOME'], os.getcwd())",
        ],
      });
      assert.equal(who.code, 0, who.stderr);
      assert.equal(who.stdout.trim(), "1000 1000 /home/mlserver /home/mlserver");

      // The model, trained by the image's own python and scikit-learn.
      const model = await trainSampleModel(ctd, image.ref, join(scratchDir("image-mlserver"), "model"));
      assert.deepEqual(readdirSync(model.dir).sort(), [
        "expected.json",
        "model-settings.json",
        "model.joblib",
      ]);

      // Served exactly as the runtime says: its command, its model args with $(MODEL_DIR), its
      // env with the ports (free loopback ports here: the container shares the host's network).
      const server = await serveWithMlserverRuntime(ctd, image.ref, model.dir);
      try {
        assert.deepEqual(server.invocation.command, ["mlserver", "start", defaults.modelMountPath]);
        log(
          `mlserver answered ${server.invocation.readinessPath} ${(server.readyMs / 1000).toFixed(1)}s after start`,
        );
        assert.deepEqual(await inferV2(server.base, "iris", model.inputs), model.predictions);
      } finally {
        await server.stop();
      }
    },
  );
});
