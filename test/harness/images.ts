/**
 * Helpers for tests and benchmarks that run the locally built images (src/images): read an
 * archive's config, train and pack the sample scikit-learn model with the MLServer image's own
 * python, run the built-in `mlserver` runtime's command line, wait for readiness.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chownSync, mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { sklearnSampleScript } from "../../src/images/index.ts";
import { builtinRuntimes } from "../../src/install/builtin-runtimes.ts";
import { defaults } from "../../src/operator/plan.ts";
import type { Containerd, Exit } from "./containerd.ts";

export interface ImageConfig {
  config: { User: string; Env: string[]; Entrypoint?: string[]; Cmd?: string[]; WorkingDir: string };
}

/** The image config inside an archive, found the way a runtime finds it: index -> manifest -> config. */
export function readArchiveConfig(archive: string): ImageConfig {
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
export function userDir(path: string, uid: number = defaults.runAsUser): string {
  mkdirSync(path, { recursive: true });
  chownSync(path, uid, uid);
  return path;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Imports an archive and checks that containerd lists it under `ref` with the built digest. */
export async function importAndCheck(ctd: Containerd, ref: string, archive: string, digest: string) {
  const imported = await ctd.importArchive(archive);
  assert.equal(imported.code, 0, `ctr images import failed: ${imported.stderr}`);
  const listed = await ctd.ctr(["images", "ls"]);
  const line = listed.stdout.split("\n").find((l) => l.startsWith(`${ref} `));
  assert.ok(line, `ctr images ls does not list ${ref}:\n${listed.stdout}`);
  assert.match(line, new RegExp(digest), "the imported image has the built manifest's digest");
}

export interface SampleModel {
  dir: string;
  /** What scikit-learn predicted, in the image, for `inputs`. */
  inputs: number[][];
  predictions: number[];
}

/**
 * Trains the sample model (src/images/sklearn_sample.py) with the MLServer image's own python
 * and scikit-learn, into `dir` (created, owned by uid 1000): model.joblib, model-settings.json
 * and expected.json.
 */
export async function trainSampleModel(
  ctd: Containerd,
  ref: string,
  dir: string,
  opts: { name?: string; version?: number; broken?: boolean } = {},
): Promise<SampleModel> {
  userDir(dir);
  const args = [
    "python3",
    "/opt/sample/sklearn_sample.py",
    "--out",
    "/mnt/out",
    "--name",
    opts.name ?? "iris",
  ];
  if (opts.version !== undefined) args.push("--version", String(opts.version));
  if (opts.broken) args.push("--broken");
  const train = await ctd.run({
    ref,
    args,
    mounts: [
      {
        type: "bind",
        source: sklearnSampleScript,
        destination: "/opt/sample/sklearn_sample.py",
        options: ["rbind", "ro"],
      },
      { type: "bind", source: dir, destination: "/mnt/out", options: ["rbind", "rw"] },
    ],
  });
  assert.equal(train.code, 0, `training failed:\n${train.stderr}`);
  const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8")) as Omit<SampleModel, "dir">;
  return { dir, ...expected };
}

/** Packs a model directory as `tar -czf OUT -C DIR .` does; returns the archive's sha256. */
export function packModel(dir: string, out: string): string {
  const r = spawnSync("tar", ["-czf", out, "-C", dir, "."]);
  assert.equal(r.status, 0, `tar -czf ${out}: ${r.stderr}`);
  return createHash("sha256").update(readFileSync(out)).digest("hex");
}

export interface RuntimeInvocation {
  command: string[];
  env: Record<string, string>;
  readinessPath: string;
}

/**
 * The built-in `mlserver` runtime's command line and env, exactly as the operator fills them
 * ($(MODEL_DIR), $(REST_PORT), $(GRPC_PORT)), with its ports moved to the given ones: a
 * container on the host's network cannot assume 8080-8082 are free.
 */
export function mlserverInvocation(
  ports: {
    rest: number;
    grpc: number;
    metrics: number;
  },
  modelName = "iris",
): RuntimeInvocation {
  const runtime = builtinRuntimes.find((r) => r.metadata.name === "mlserver")!.spec;
  const vars: Record<string, string> = {
    MODEL_DIR: defaults.modelMountPath,
    MODEL_NAME: modelName,
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
  return { command, env, readinessPath: expand(runtime.readinessPath!) };
}

/** Polls `url` until it answers 200; fails at once if the server exits first. Returns ms waited. */
export async function waitForReady(url: string, exited: Promise<Exit>, attempts = 600): Promise<number> {
  const started = Date.now();
  for (let i = 0; i < attempts; i++) {
    const exit = await Promise.race([exited, new Promise<undefined>((r) => setTimeout(r, 250, undefined))]);
    assert.equal(exit, undefined, `the server exited before it was ready: ${JSON.stringify(exit)}`);
    const ok = await fetch(url).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return Date.now() - started;
  }
  assert.fail(`${url} never answered 200`);
}

/** A V2 inference request for `inputs` (one FP64 tensor); returns the first output's data. */
export async function inferV2(base: string, model: string, inputs: number[][]): Promise<number[]> {
  const response = await fetch(`${base}/v2/models/${model}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      inputs: [
        { name: "input-0", shape: [inputs.length, inputs[0]!.length], datatype: "FP64", data: inputs.flat() },
      ],
    }),
  });
  const answer = (await response.json()) as { model_name: string; outputs: { data: number[] }[] };
  assert.equal(response.status, 200, JSON.stringify(answer));
  assert.equal(answer.model_name, model);
  return answer.outputs[0]!.data;
}

/**
 * Starts MLServer from `ref` as the built-in runtime would (its command and env, free loopback
 * ports), serving `modelDir` mounted read-only, and waits until it is ready.
 */
export async function serveWithMlserverRuntime(ctd: Containerd, ref: string, modelDir: string) {
  const ports = { rest: await freePort(), grpc: await freePort(), metrics: await freePort() };
  const invocation = mlserverInvocation(ports);
  const started = Date.now();
  const server = ctd.start({
    ref,
    args: invocation.command,
    env: invocation.env,
    // The serving pod mounts the model read-only.
    mounts: [
      { type: "bind", source: modelDir, destination: defaults.modelMountPath, options: ["rbind", "ro"] },
    ],
  });
  const base = `http://127.0.0.1:${ports.rest}`;
  try {
    await waitForReady(`${base}${invocation.readinessPath}`, server.exited);
  } catch (err) {
    const exit = await server.stop();
    throw new Error(`${(err as Error).message}\nmlserver output:\n${exit.stderr.slice(-3000)}`);
  }
  return { base, invocation, readyMs: Date.now() - started, stop: server.stop };
}
