/** The prerequisite engine and the test files' declarations, with fake prerequisites. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, it } from "node:test";
import {
  type CheckResult,
  failureReport,
  type Outcome,
  type Prerequisite,
  prepare,
  requiredNames,
  splitUnavailable,
  unavailableFiles,
  withRequirements,
} from "../../harness/prerequisites/engine.ts";
import { registry } from "../../harness/prerequisites/index.ts";
import {
  declaredNeeds,
  needsOf,
  planNeeds,
  repoRoot,
  requireDeclared,
  runnerMarker,
} from "../../harness/prerequisites/needs.ts";
import { requiredOn } from "../../harness/prerequisites/real-node.ts";
import { scratchDir } from "../../harness/scratch.ts";

/** A fake prerequisite: `check` answers `state` until `install` (if any) makes it ready. */
function fake(
  name: string,
  state: CheckResult,
  opts: { requires?: string[]; install?: () => Promise<void>; staysMissing?: boolean; log?: string[] } = {},
): Prerequisite {
  let current = state;
  return {
    name,
    summary: `${name} (fake)`,
    ...(opts.requires ? { requires: opts.requires } : {}),
    check: async () => current,
    install: async () => {
      opts.log?.push(`start ${name}`);
      await opts.install?.();
      opts.log?.push(`end ${name}`);
      if (!opts.staysMissing) current = { state: "ready" };
    },
    byHand: `install ${name} by hand`,
  };
}

const missing: CheckResult = { state: "missing", why: "not there" };
const quiet = { progress: () => {} };
const states = (outcomes: Outcome[]) => Object.fromEntries(outcomes.map((o) => [o.name, o.state]));

describe("prepare", () => {
  it("installs only what is missing, and re-checks it after the install", async () => {
    const log: string[] = [];
    const outcomes = await prepare(
      [
        fake("a", { state: "ready" }, { log }),
        fake("b", missing, { log }),
        fake("c", missing, { log, staysMissing: true }),
      ],
      quiet,
    );
    assert.deepEqual(states(outcomes), { a: "ready", b: "installed", c: "failed" });
    assert.ok(!log.includes("start a"), "a ready prerequisite is not installed again");
    const c = outcomes.find((o) => o.name === "c");
    assert.ok(c?.state === "failed");
    assert.match(c.error, /the install finished but its check still fails: not there/);
  });

  it("reports a failed install with its error and how to do it by hand; independent installs still finish", async () => {
    const outcomes = await prepare(
      [
        fake("broken", missing, {
          install: async () => {
            throw new Error("pip install moto[server]==5.2.5 failed (exit 1):\nno network");
          },
        }),
        fake("fine", missing),
      ],
      quiet,
    );
    assert.deepEqual(states(outcomes), { broken: "failed", fine: "installed" });
    const report = failureReport(outcomes[0] as Extract<Outcome, { state: "failed" }>);
    assert.equal(
      report,
      [
        '# FAILED to install prerequisite "broken":',
        "#     pip install moto[server]==5.2.5 failed (exit 1):",
        "#     no network",
        "#   to install it by hand:",
        "#     install broken by hand",
      ].join("\n"),
    );
  });

  it("never installs an unavailable prerequisite, and what requires it is unavailable too", async () => {
    const log: string[] = [];
    const outcomes = await prepare(
      [
        fake("kernel", { state: "unavailable", reason: "not root" }, { log }),
        fake("real-node", missing, { requires: ["kernel"], log }),
      ],
      quiet,
    );
    assert.deepEqual(outcomes, [
      { name: "kernel", state: "unavailable", reason: "not root" },
      { name: "real-node", state: "unavailable", reason: "needs kernel, which is unavailable: not root" },
    ]);
    assert.deepEqual(log, []);
  });

  it("installs what is required first, and does not install on top of a failed requirement", async () => {
    const log: string[] = [];
    const first = await prepare(
      [fake("base", missing, { log }), fake("top", missing, { requires: ["base"], log })],
      quiet,
    );
    assert.deepEqual(states(first), { base: "installed", top: "installed" });
    assert.deepEqual(log, ["start base", "end base", "start top", "end top"]);
    const failing = fake("base", missing, {
      install: async () => {
        throw new Error("boom");
      },
    });
    const second = await prepare([failing, fake("top", missing, { requires: ["base"] })], quiet);
    const top = second.find((o) => o.name === "top");
    assert.ok(top?.state === "failed");
    assert.match(top.error, /needs base, which failed/);
  });

  it("runs independent installs at the same time", { timeout: 60_000 }, async () => {
    // a's install finishes only once b's has started: run one after the other, this never ends.
    let bStarted!: () => void;
    const started = new Promise<void>((resolve) => (bStarted = resolve));
    const outcomes = await prepare(
      [
        fake("a", missing, { install: () => started }),
        fake("b", missing, { install: async () => bStarted() }),
      ],
      quiet,
    );
    assert.deepEqual(states(outcomes), { a: "installed", b: "installed" });
  });

  it("says which installs are still running, and treats a check that throws as missing", async () => {
    const lines: string[] = [];
    let heard!: () => void;
    const heartbeat = new Promise<void>((resolve) => (heard = resolve));
    const slow: Prerequisite = { ...fake("slow", missing, { install: () => heartbeat }) };
    let checks = 0;
    slow.check = async () => {
      if (checks++ === 0) throw new Error("cannot read the cache");
      return { state: "ready" };
    };
    const outcomes = await prepare([slow], {
      heartbeatMs: 1,
      progress: (line) => {
        lines.push(line);
        if (line.startsWith("still installing: slow")) heard();
      },
    });
    assert.deepEqual(states(outcomes), { slow: "installed" });
    assert.equal(lines[0], "slow: installing slow (fake) (its check failed: cannot read the cache)");
    assert.ok(lines.some((l) => /^still installing: slow \(\d+s\)$/.test(l)));
    assert.match(lines.at(-1)!, /^slow: ready \(installed in \d+s\)$/);
  });
});

describe("unavailableFiles", () => {
  it("names each file that needs an unavailable prerequisite, with every reason", () => {
    const needs = new Map([
      ["test/e2e/node/a.test.ts", ["cluster", "real-node"]],
      ["test/e2e/node/b.test.ts", ["real-node", "images"]],
      ["test/unit/c.test.ts", []],
    ]);
    const outcomes: Outcome[] = [
      { name: "cluster", state: "ready" },
      { name: "real-node", state: "unavailable", reason: "not root" },
      { name: "images", state: "unavailable", reason: "no mmdebstrap" },
    ];
    assert.deepEqual(unavailableFiles(needs, outcomes), [
      { file: "test/e2e/node/a.test.ts", reason: "needs real-node, unavailable on this machine: not root" },
      {
        file: "test/e2e/node/b.test.ts",
        reason:
          "needs real-node, unavailable on this machine: not root; needs images, unavailable on this machine: no mmdebstrap",
      },
    ]);
  });
});

describe("required prerequisites (MLMODEL_TEST_REQUIRE)", () => {
  const needs = new Map([
    ["test/e2e/realnode/serve.test.ts", ["cluster", "real-node", "images"]],
    ["test/integration/realnode/lifecycle.test.ts", ["cluster", "own-real-node"]],
    ["test/integration/downloader/s3.test.ts", ["cluster", "moto"]],
  ]);
  const outcomes: Outcome[] = [
    { name: "cluster", state: "ready" },
    { name: "real-node", state: "unavailable", reason: "not root" },
    {
      name: "own-real-node",
      state: "unavailable",
      reason: "needs real-node, which is unavailable: not root",
    },
    { name: "images", state: "ready" },
    { name: "moto", state: "unavailable", reason: "no python3" },
  ];
  const reg = [
    fake("real-node", missing),
    fake("own-real-node", missing, { requires: ["real-node"] }),
    fake("images", missing),
    fake("moto", missing),
  ];

  it("reads the names, separated by commas or spaces", () => {
    assert.deepEqual(
      [...requiredNames({ MLMODEL_TEST_REQUIRE: "real-node, images moto" })],
      ["real-node", "images", "moto"],
    );
    assert.deepEqual([...requiredNames({})], []);
  });

  it("turns the files of a required but unavailable prerequisite (and of what requires it) into failures", () => {
    const files = unavailableFiles(needs, outcomes);
    const split = splitUnavailable(files, needs, outcomes, new Set(["real-node"]), reg);
    assert.deepEqual(
      split.notRun.map((f) => f.file),
      ["test/e2e/realnode/serve.test.ts", "test/integration/realnode/lifecycle.test.ts"],
    );
    assert.match(split.notRun[0]!.reason, /not root \(required by MLMODEL_TEST_REQUIRE\)$/);
    assert.deepEqual(
      split.skipped.map((f) => f.file),
      ["test/integration/downloader/s3.test.ts"],
      "moto is not required: skipped",
    );
  });

  it("skips them all when nothing is required", () => {
    const files = unavailableFiles(needs, outcomes);
    const split = splitUnavailable(files, needs, outcomes, new Set(), reg);
    assert.deepEqual(split.notRun, []);
    assert.equal(split.skipped.length, 3);
  });

  it("CI requires real-node and images of a Linux x86-64 machine running as root, and nothing elsewhere", () => {
    const linuxRoot = { platform: "linux", arch: "x64", uid: 0 };
    assert.deepEqual(requiredOn(linuxRoot), ["real-node", "images"]);
    assert.deepEqual(requiredOn({ ...linuxRoot, uid: 1000 }), [], "not root");
    assert.deepEqual(requiredOn({ ...linuxRoot, arch: "arm64" }), [], "not x86-64");
    assert.deepEqual(requiredOn({ ...linuxRoot, platform: "darwin" }), [], "not Linux");
    for (const name of requiredOn(linuxRoot))
      assert.ok(
        registry.some((p) => p.name === name),
        `${name} is a prerequisite the runner knows`,
      );
  });

  it("CI's script prints this machine's requirements for MLMODEL_TEST_REQUIRE", () => {
    const printed = execFileSync(
      process.execPath,
      [join(repoRoot, "test", "harness", "prerequisites", "required-here.ts")],
      { encoding: "utf8" },
    );
    assert.deepEqual([...requiredNames({ MLMODEL_TEST_REQUIRE: printed })], requiredOn());
  });
});

describe("withRequirements", () => {
  const reg = [
    fake("a", missing),
    fake("b", missing, { requires: ["a"] }),
    fake("c", missing, { requires: ["b"] }),
  ];

  it("adds what the named prerequisites require, requirements first", () => {
    assert.deepEqual(
      withRequirements(reg, ["c"]).map((p) => p.name),
      ["a", "b", "c"],
    );
  });

  it("names an unknown prerequisite and the known ones, and refuses a cycle", () => {
    assert.throws(() => withRequirements(reg, ["mot"]), /unknown prerequisite "mot"; known: a, b, c/);
    const loop = [fake("x", missing, { requires: ["y"] }), fake("y", missing, { requires: ["x"] })];
    assert.throws(() => withRequirements(loop, ["x"]), /prerequisites require each other: x -> y -> x/);
  });
});

describe("test files' needs", () => {
  it("reads `// test-needs:` lines and adds the directory's needs", () => {
    const source = "// A test.\n// test-needs: moto, openssl\nimport x from 'y';\n// test-needs: helm\n";
    assert.deepEqual(declaredNeeds(source, "f.test.ts"), ["moto", "openssl", "helm"]);
    assert.deepEqual(needsOf("test/integration/downloader/s3.test.ts", "// test-needs: moto\n"), [
      "cluster",
      "moto",
    ]);
    assert.deepEqual(needsOf("test/unit/x.test.ts", "// no declaration here\n"), []);
  });

  it("refuses a malformed declaration and an unknown name, naming the file", () => {
    assert.throws(
      () => declaredNeeds("// test-needs: Moto\n", "a.test.ts"),
      /a\.test\.ts: "\/\/ test-needs: Moto" must list/,
    );
    assert.throws(
      () => planNeeds([{ file: "test/unit/a.test.ts", source: "// test-needs: mot\n" }], new Set(["moto"])),
      /test\/unit\/a\.test\.ts declares unknown prerequisite "mot"; known: moto/,
    );
  });

  it("every test file in the repo declares only known prerequisites", () => {
    const files = ["test", "examples"].flatMap((dir) =>
      readdirSync(join(repoRoot, dir), { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".test.ts"))
        .map((f) => join(repoRoot, dir, f)),
    );
    const plan = planNeeds(
      files.map((f) => ({ file: relative(repoRoot, f), source: readFileSync(f, "utf8") })),
      new Set(registry.map((p) => p.name)),
    );
    assert.deepEqual(plan.get("test/integration/downloader/s3.test.ts"), ["cluster", "moto"]);
    assert.deepEqual(plan.get("test/e2e/install/helm.test.ts"), ["cluster", "helm"]);
  });

  it("a harness helper fails for a test file that uses a prerequisite without declaring it", () => {
    const dir = scratchDir("needs");
    const declared = join(dir, "declared.test.ts");
    const undeclared = join(dir, "undeclared.test.ts");
    writeFileSync(declared, "// test-needs: moto\n");
    writeFileSync(undeclared, "// uses moto, says nothing\n");
    const underRunner = { [runnerMarker]: "1" };
    requireDeclared("moto", underRunner, declared);
    assert.throws(
      () => requireDeclared("moto", underRunner, undeclared),
      /undeclared\.test\.ts uses moto but does not declare it: add the line "\/\/ test-needs: moto"/,
    );
    requireDeclared("moto", {}, undeclared); // outside the runner (a bench): no check
  });
});

describe("the registry", () => {
  it("has unique names, and says for each how to install it by hand", () => {
    const names = registry.map((p) => p.name);
    assert.equal(new Set(names).size, names.length);
    for (const p of registry) assert.ok(p.byHand.trim().length > 0, `${p.name} has by-hand instructions`);
    assert.deepEqual(withRequirements(registry, names).length, registry.length, "every requirement is known");
  });
});
