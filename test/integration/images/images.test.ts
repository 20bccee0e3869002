/**
 * The locally built images, proven on real containers without a node: each is built (or taken
 * from the cache), its config checked, imported with `ctr images import` into a throwaway
 * containerd of the test's own, and run by containerd + runc as its non-root user with the
 * restricted Pod Security level's settings (no capabilities, no new privileges, RuntimeDefault
 * seccomp; a read-only root where the operator sets one), on the host's network so that all
 * traffic stays on loopback.
 *
 * Needs root, Linux x86-64 and the build tools (installed with apt-get when missing); reported
 * as skipped, with the reason, where the machine cannot build images. A cold build takes
 * minutes (see docs/images.md); later runs use the cache.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chownSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  ensureImage,
  ensureImagePrerequisites,
  imagesSupport,
  recipeFor,
  type Support,
  sklearnSampleScript,
} from "../../../src/images/index.ts";
import { builtinRuntimes } from "../../../src/operator/builtin-runtimes.ts";
import { defaultOperatorConfig, defaults } from "../../../src/operator/plan.ts";
import { Containerd } from "../../harness/containerd.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { FileServer } from "../downloader/file-server.ts";

const log = (line: string) => console.error(`# [image] ${line}`);

async function machineSupport(): Promise<Support> {
  try {
    await ensureImagePrerequisites(log);
  } catch (err) {
    return { ok: false, reason: (err as Error).message };
  }
  return imagesSupport();
}

const support = await machineSupport();
const skip = support.ok ? false : `cannot build images here: ${support.reason}`;

interface ImageConfig {
  config: { User: string; Env: string[]; Entrypoint?: string[]; Cmd?: string[]; WorkingDir: string };
}

/** The image config inside an archive, found the way a runtime finds it: index -> manifest -> config. */
function readArchiveConfig(archive: string): ImageConfig {
  const member = (name: string) => {
    const r = spawnSync("tar", ["-xOf", archive, name], { maxBuffer: 16 * 1024 * 1024 });
    assert.equal(r.status, 0, `tar -xOf ${archive} ${name}: ${r.stderr}`);
    return JSON.parse(r.stdout.toString());
  };
  const blob = (digest: string) => member(`blobs/${digest.replace(":", "/")}`);
  const index = member("index.json") as { manifests: { digest: string }[] };
  const manifest = blob(index.manifests[0]!.digest) as { config: { digest: string } };
  return blob(manifest.config.digest) as ImageConfig;
}

/** A directory a pod with `fsGroup: 1000` could write: owned by the image's user. */
function userDir(path: string, uid: number): string {
  mkdirSync(path, { recursive: true });
  chownSync(path, uid, uid);
  return path;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function importAndCheck(ctd: Containerd, ref: string, archive: string, digest: string) {
  const imported = await ctd.importArchive(archive);
  assert.equal(imported.code, 0, `ctr images import failed: ${imported.stderr}`);
  const listed = await ctd.ctr(["images", "ls"]);
  const line = listed.stdout.split("\n").find((l) => l.startsWith(`${ref} `));
  assert.ok(line, `ctr images ls does not list ${ref}:\n${listed.stdout}`);
  assert.match(line, new RegExp(digest), "the imported image has the built manifest's digest");
}

// Each test carries the skip (not only the suite), so the run counts them as skipped.
describe("locally built images on real containers", () => {
  let ctd: Containerd;
  before(async () => {
    if (!skip) ctd = await Containerd.start(scratchDir("containerd"));
  });
  after(async () => {
    await ctd?.stop();
  });

  test("the project image: the Dockerfile's settings, downloads a model as uid 1000 on a read-only root, runs the operator", {
    skip,
  }, async () => {
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
    assert.equal(spawnSync("tar", ["-czf", tgz, "-C", model, "."]).status, 0);
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
          createHash("sha256").update(body).digest("hex"),
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
  });

  test("the MLServer image: the built-in runtime's command and env serve a scikit-learn model with local predictions", {
    skip,
  }, async () => {
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
      args: ["python3", "-c", "import os; print(os.getuid(), os.getgid(), os.environ['HOME'], os.getcwd())"],
    });
    assert.equal(who.code, 0, who.stderr);
    assert.equal(who.stdout.trim(), "1000 1000 /home/mlserver /home/mlserver");

    // The model, trained by the image's own python and scikit-learn.
    const work = scratchDir("image-mlserver");
    const modelDir = userDir(join(work, "model"), runtime.runAsUser!);
    const train = await ctd.run({
      ref: image.ref,
      args: ["python3", "/opt/sample/sklearn_sample.py", "--out", "/mnt/out", "--name", "iris"],
      mounts: [
        {
          type: "bind",
          source: sklearnSampleScript,
          destination: "/opt/sample/sklearn_sample.py",
          options: ["rbind", "ro"],
        },
        { type: "bind", source: modelDir, destination: "/mnt/out", options: ["rbind", "rw"] },
      ],
    });
    assert.equal(train.code, 0, `training failed:\n${train.stderr}`);
    assert.deepEqual(readdirSync(modelDir).sort(), ["expected.json", "model-settings.json", "model.joblib"]);
    const expected = JSON.parse(readFileSync(join(modelDir, "expected.json"), "utf8")) as {
      inputs: number[][];
      predictions: number[];
    };

    // Served exactly as the runtime says: its command, its model args with $(MODEL_DIR), its
    // env with the ports (free loopback ports here: the container shares the host's network).
    const ports = { rest: await freePort(), grpc: await freePort(), metrics: await freePort() };
    const modelMount = defaults.modelMountPath;
    const vars: Record<string, string> = {
      MODEL_DIR: modelMount,
      REST_PORT: String(ports.rest),
      GRPC_PORT: String(ports.grpc),
    };
    const expand = (s: string) =>
      s.replace(/\$\(([A-Z_]+)\)/g, (_, name: string) => vars[name] ?? `$(${name})`);
    const env = Object.fromEntries((runtime.env ?? []).map((e) => [e.name, expand(e.value ?? "")]));
    assert.equal(env.MLSERVER_METRICS_PORT, "8082", "the runtime's fixed metrics port");
    env.MLSERVER_METRICS_PORT = String(ports.metrics);
    const command = [
      ...(runtime.command ?? []),
      ...(runtime.args ?? []),
      ...(runtime.modelArgs ?? []).map(expand),
    ];
    assert.deepEqual(command, ["mlserver", "start", modelMount]);
    const started = Date.now();
    const server = ctd.start({
      ref: image.ref,
      args: command,
      env,
      // The serving pod mounts the model read-only.
      mounts: [{ type: "bind", source: modelDir, destination: modelMount, options: ["rbind", "ro"] }],
    });
    try {
      const base = `http://127.0.0.1:${ports.rest}`;
      let ready = false;
      for (let i = 0; i < 600 && !ready; i++) {
        const exited = await Promise.race([server.exited, new Promise((r) => setTimeout(r, 500, undefined))]);
        assert.equal(exited, undefined, `mlserver exited before it was ready: ${JSON.stringify(exited)}`);
        ready = await fetch(`${base}${runtime.readinessPath}`).then(
          (r) => r.status === 200,
          () => false,
        );
      }
      assert.ok(ready, `${runtime.readinessPath} never answered 200`);
      log(
        `mlserver answered ${runtime.readinessPath} ${((Date.now() - started) / 1000).toFixed(1)}s after start`,
      );

      const response = await fetch(`${base}/v2/models/iris/infer`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          inputs: [
            {
              name: "input-0",
              shape: [expected.inputs.length, expected.inputs[0]!.length],
              datatype: "FP64",
              data: expected.inputs.flat(),
            },
          ],
        }),
      });
      const answer = (await response.json()) as { model_name: string; outputs: { data: number[] }[] };
      assert.equal(response.status, 200, JSON.stringify(answer));
      assert.equal(answer.model_name, "iris");
      assert.deepEqual(answer.outputs[0]!.data, expected.predictions);
    } finally {
      const exit = await server.stop();
      if (exit.code !== 0 && exit.code !== 137) log(`mlserver output:\n${exit.stderr.slice(-3000)}`);
    }
  });
});
