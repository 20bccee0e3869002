/**
 * No container engine runs here, so the image is proved piece by piece: the Dockerfile's
 * install step (`npm ci --omit=dev ...`, read from the Dockerfile itself) runs in a clean
 * directory, its bundle stage's steps in another, exactly the paths the final stage copies
 * are added (the bundle from the bundle stage's directory), and `mlmodel` on PATH, linked as
 * the Dockerfile links it (the image's entrypoint and the download Job's command), runs the
 * operator and download commands.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { scratchDir } from "../../harness/scratch.ts";
import { repoRoot } from "./support.ts";

interface Stages {
  /** The deps stage's RUN command, in steps (`&&`). */
  install: string[];
  /** What the deps stage copies before installing. */
  depsFiles: string[];
  /** The bundle stage's RUN commands, in order, and what it copies from the build context. */
  bundleRuns: string[];
  bundleFiles: string[];
  /** What the final stage copies from the build context, and from the bundle stage (from, to). */
  finalCopies: string[];
  fromBundle: { from: string; to: string }[];
  /** The `mlmodel` link's target. */
  mlmodelTarget: string;
  entrypoint: string[];
  user: string;
  /** The final stage's NODE_COMPILE_CACHE, and the RUN step after USER that fills it. */
  compileCache: string;
  fillCache: string;
}

function readDockerfile(text: string): Stages {
  const stages = text.split(/^FROM /m).slice(1);
  assert.equal(stages.length, 3, "a deps stage, a bundle stage and a final stage");
  const [deps, bundle, final] = stages as [string, string, string];
  assert.match(bundle, /^\S+ AS bundle$/m, "the second stage is named bundle");
  const copies = (stage: string) =>
    [...stage.matchAll(/^COPY (?!--from)(.+)$/gm)].flatMap((m) => m[1]!.trim().split(/\s+/).slice(0, -1));
  const runs = (stage: string) =>
    [...stage.matchAll(/^RUN ((?:.*\\\n)*.*)$/gm)].map((m) => m[1]!.replace(/\\\n/g, " "));
  const run = runs(deps)[0];
  assert.ok(run, "the deps stage has a RUN step");
  return {
    bundleRuns: runs(bundle),
    bundleFiles: copies(bundle),
    fromBundle: [...final.matchAll(/^COPY --from=bundle (\S+) (\S+)$/gm)].map((m) => ({
      from: m[1]!,
      to: m[2]!,
    })),
    mlmodelTarget: /ln -s (\S+) \/usr\/local\/bin\/mlmodel/.exec(final)?.[1] ?? "",
    install: run
      .replace(/\\\n/g, " ")
      .split("&&")
      .map((step) => step.trim().replace(/\s+/g, " ")),
    depsFiles: copies(deps),
    finalCopies: copies(final),
    entrypoint: JSON.parse(/^ENTRYPOINT (.+)$/m.exec(final)?.[1] ?? "[]") as string[],
    user: /^USER (.+)$/m.exec(final)?.[1]?.trim() ?? "",
    compileCache: /^ENV NODE_COMPILE_CACHE=(\S+)$/m.exec(final)?.[1] ?? "",
    fillCache: /^USER .+\n(?:#.*\n)*RUN (.+)$/m.exec(final)?.[1] ?? "",
  };
}

describe("the image's production install (npm ci --omit=dev into a clean directory)", () => {
  const stages = readDockerfile(readFileSync(join(repoRoot, "Dockerfile"), "utf8"));
  let app: string;
  let pathDir: string;

  before(() => {
    app = scratchDir("image");
    for (const file of stages.depsFiles) cpSync(join(repoRoot, file), join(app, file));
    // The deps stage's own command, but for `npm cache clean`: that would empty this machine's cache.
    const steps = stages.install.filter((step) => !step.startsWith("npm cache clean"));
    const ci = spawnSync("sh", ["-c", steps.join(" && ")], { cwd: app, encoding: "utf8" });
    assert.equal(ci.status, 0, ci.stderr);
    const fromContext = (dir: string, paths: string[]) => {
      for (const path of paths) {
        cpSync(join(repoRoot, path), join(dir, path), {
          recursive: true,
          filter: (src) => !src.endsWith(".test.ts"), // as .dockerignore
        });
      }
    };
    fromContext(app, stages.finalCopies);
    // The bundle stage, in a clean directory of its own, its commands as the Dockerfile has them.
    const bundleApp = scratchDir("image-bundle");
    fromContext(bundleApp, stages.bundleFiles);
    for (const step of stages.bundleRuns) {
      const r = spawnSync("sh", ["-c", step], { cwd: bundleApp, encoding: "utf8" });
      assert.equal(r.status, 0, `${step}: ${r.stderr}`);
    }
    for (const { from, to } of stages.fromBundle) {
      cpSync(join(bundleApp, from.replace(/^\/app\//, "")), join(app, to), { recursive: true });
    }
    // The image links /usr/local/bin/mlmodel as the Dockerfile does; node 24 is the image's node.
    pathDir = join(app, ".path");
    mkdirSync(pathDir);
    symlinkSync(join(app, stages.mlmodelTarget.replace(/^\/app\//, "")), join(pathDir, "mlmodel"));
  });

  after(() => {
    if (app) rmSync(app, { recursive: true, force: true });
  });

  const mlmodel = (args: string[]) =>
    spawnSync(stages.entrypoint[0]!, args, {
      cwd: app,
      encoding: "utf8",
      env: {
        HOME: app,
        PATH: [pathDir, dirname(process.execPath), "/usr/bin", "/bin"].join(delimiter),
        NODE_ENV: "production",
      },
    });

  it("the Dockerfile is multi-stage, runs as a non-root user and has mlmodel as entrypoint", () => {
    assert.deepEqual(stages.entrypoint, ["mlmodel"]);
    assert.match(stages.user, /^[1-9][0-9]*(:[1-9][0-9]*)?$/, "a numeric non-root user");
    assert.ok(
      stages.install.some((step) => /^npm ci .*--omit=dev/.test(step)),
      stages.install.join(" && "),
    );
    assert.deepEqual(stages.finalCopies.sort(), ["bin", "package.json", "src"]);
    // The entrypoint is the bundle the bundle stage made.
    assert.deepEqual(stages.fromBundle, [{ from: "/app/dist/bundle", to: "./dist/bundle" }]);
    assert.equal(stages.mlmodelTarget, "/app/dist/bundle/mlmodel.mjs");
  });

  it("holds production dependencies only", () => {
    const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    for (const dep of Object.keys(pkg.dependencies)) {
      assert.ok(existsSync(join(app, "node_modules", dep, "package.json")), `${dep} is installed`);
    }
    // The lock marks what only development needs (TypeScript, Biome, the Node binary package).
    const lock = JSON.parse(readFileSync(join(repoRoot, "package-lock.json"), "utf8")) as {
      packages: Record<string, { dev?: boolean }>;
    };
    const devOnly = Object.entries(lock.packages)
      .filter(([path, entry]) => path && entry.dev)
      .map(([path]) => path);
    assert.ok(devOnly.includes("node_modules/typescript"), "the check knows what is dev-only");
    for (const path of devOnly) assert.ok(!existsSync(join(app, path)), `${path} is dev-only`);
  });

  it("runs `mlmodel operator`", () => {
    const help = mlmodel(["operator", "--help"]);
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^Usage: mlmodel operator/);
    // Past flag parsing: the operator's modules load, and a bad kubeconfig is reported plainly.
    const bad = mlmodel(["operator", "--kubeconfig", join(app, "missing.kubeconfig")]);
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /mlmodel: cannot load kubeconfig .*missing\.kubeconfig/);
  });

  it("ships a compile cache filled at build time by the image's user, so starts compile nothing", () => {
    assert.match(stages.compileCache, /^\/app\//, "NODE_COMPILE_CACHE lies in the image");
    assert.match(stages.fillCache, /mlmodel operator --help/);
    const cache = join(app, stages.compileCache.slice("/app/".length));
    mkdirSync(cache, { recursive: true });
    const env = {
      HOME: app,
      PATH: [pathDir, dirname(process.execPath), "/usr/bin", "/bin"].join(delimiter),
      NODE_COMPILE_CACHE: cache,
    };
    const fill = spawnSync("sh", ["-c", stages.fillCache], { cwd: app, encoding: "utf8", env });
    assert.equal(fill.status, 0, fill.stderr);
    // One directory per Node version, architecture and user id; one entry per module.
    const [version] = readdirSync(cache);
    assert.match(version ?? "", new RegExp(`^v${process.versions.node}-.*-${process.getuid?.() ?? 0}$`));
    // A start after the fill: Node's compile cache log shows every module's code taken from
    // the cache (the bundle's entry and chunks) and nothing compiled and written anew.
    for (const command of ["operator", "download"]) {
      const start = spawnSync("mlmodel", [command, "--help"], {
        cwd: app,
        encoding: "utf8",
        env: { ...env, NODE_DEBUG_NATIVE: "COMPILE_CACHE" },
      });
      assert.equal(start.status, 0, start.stderr);
      const verdicts = [...start.stderr.matchAll(/V8 code cache for \w+ (\S+) was (\w+)/g)];
      assert.ok(verdicts.length >= 5, `${command}: ${verdicts.length} modules from the cache`);
      assert.ok(
        verdicts.some((v) => v[1]!.endsWith("/dist/bundle/mlmodel.mjs")),
        "the bundle's entry ran",
      );
      assert.deepEqual(
        verdicts.filter((v) => v[2] !== "accepted").map((v) => v[0]),
        [],
        `${command}: every cached module accepted`,
      );
      assert.doesNotMatch(start.stderr, /writing cache for/, `${command}: nothing compiled anew`);
    }
  });

  it("runs `mlmodel download`", () => {
    const help = mlmodel(["download", "--help"]);
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /mlmodel download/);
  });
});
