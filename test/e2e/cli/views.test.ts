/**
 * `mlmodel status` and `mlmodel describe` on real MLModels: the operator (as its own
 * ServiceAccount) serves one sample to Ready and reports another as Failed, and the CLI runs
 * as a separate process reading them, piped (plain text), under a real pseudo-terminal
 * (`script`), forced with --color always, and as the kubectl plugin.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { delimiter, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import type { KubeClient } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  applyObjects,
  operatorTestBed,
  provideVolume,
  type RunningOperator,
  readSample,
  removeTestBed,
  waitForPhase,
} from "../operator/helpers.ts";

const root = join(import.meta.dirname, "..", "..", "..");
const main = join(root, "src", "cli", "main.ts");
// biome-ignore lint/suspicious/noControlCharactersInRegex: asserting on ANSI escapes.
const ansiEscape = /\x1b\[/;

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function mlmodel(args: string[], env: NodeJS.ProcessEnv = {}): Run {
  const r = spawnSync(process.execPath, [main, ...args], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "", ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Runs the CLI with its stdout on a real pseudo-terminal (util-linux `script`). */
function mlmodelOnTty(args: string[], env: NodeJS.ProcessEnv = {}): Run {
  const command = [process.execPath, main, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ");
  const r = spawnSync("script", ["-q", "-e", "-c", command, "/dev/null"], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "", TERM: "xterm", COLUMNS: "200", ...env },
  });
  return { status: r.status, stdout: r.stdout.replaceAll("\r\n", "\n"), stderr: r.stderr };
}

describe("mlmodel status and describe on real resources", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  let pv: string;

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-cli"));
    pv = await provideVolume(admin, ns.name, "resnet-model");
    await applyObjects(admin, ns.name, [
      ...readSample("mlmodel-download-then-serve.yaml"),
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name: "pull" },
        spec: { image: "registry.example.com/simulate-image-pull-error:1", model: { path: "/models/m" } },
      },
    ]);
    await waitForPhase(admin, ns.name, "resnet", "Ready");
    await waitForPhase(admin, ns.name, "pull", "Failed", "ImagePullBackOff");
  });

  after(() => removeTestBed({ ns, admin, operator }, [pv]));

  it("status piped: plain table, ready/desired, full download bar, URL and the explaining condition", () => {
    const r = mlmodel(["status", "-n", ns.name]);
    assert.equal(r.status, 0, r.stderr);
    assert.doesNotMatch(r.stdout, ansiEscape, "no escape codes when piped");
    const [header, ...rows] = r.stdout.trimEnd().split("\n");
    assert.match(header!, /^NAME\s+PHASE\s+READY\s+DOWNLOAD\s+URL\s+AGE\s+PROBLEM$/);
    assert.equal(rows.length, 2);
    assert.match(
      rows[1]!,
      new RegExp(
        `^resnet\\s+Ready\\s+2/2\\s+\\[#{10}\\] 100%\\s+http://resnet\\.${ns.name}\\.svc:8501\\s+\\d+s\\s*$`,
      ),
    );
    assert.match(
      rows[0]!,
      new RegExp(
        `^pull\\s+Failed\\s+0/1\\s+-\\s+http://pull\\.${ns.name}\\.svc:8080\\s+\\d+s\\s+ServingReady=False ImagePullBackOff: pod pull-\\S+: cannot pull image "registry\\.example\\.com/simulate-image-pull-error:1"`,
      ),
    );
  });

  it("status on a terminal: coloured, and plain again with NO_COLOR", () => {
    const tty = mlmodelOnTty(["status", "-n", ns.name]);
    assert.equal(tty.status, 0, tty.stdout);
    assert.ok(tty.stdout.includes("\x1b[32mReady\x1b[39m"), `Ready is green on a TTY:\n${tty.stdout}`);
    assert.ok(tty.stdout.includes("\x1b[31mFailed\x1b[39m"));
    assert.match(tty.stdout, /█{10}/, "block progress bar on a terminal");
    const noColor = mlmodelOnTty(["status", "-n", ns.name], { NO_COLOR: "1" });
    assert.doesNotMatch(noColor.stdout, ansiEscape);
    assert.match(noColor.stdout, /resnet\s+Ready\s+2\/2/);
    const forced = mlmodel(["status", "-n", ns.name, "--color", "always"]);
    assert.ok(forced.stdout.includes("\x1b[32mReady\x1b[39m"), "--color always colours a pipe");
  });

  it("describe on a terminal is coloured; piped or with --color never it is not", () => {
    const tty = mlmodelOnTty(["describe", "pull", "-n", ns.name]);
    assert.equal(tty.status, 0, tty.stdout);
    assert.ok(tty.stdout.includes("\x1b[31mFailed\x1b[39m"), tty.stdout);
    assert.ok(tty.stdout.includes("\x1b[1mConditions:\x1b[22m"), "headings in bold");
    assert.doesNotMatch(
      mlmodelOnTty(["describe", "pull", "-n", ns.name, "--color", "never"]).stdout,
      ansiEscape,
    );
  });

  it("status --watch on a terminal redraws the table in place on each change", async () => {
    const command = [process.execPath, main, "status", "-n", ns.name, "--watch"]
      .map((a) => `'${a}'`)
      .join(" ");
    const child = spawn("script", ["-q", "-e", "-c", command, "/dev/null"], {
      cwd: root,
      env: { ...process.env, NO_COLOR: "", TERM: "xterm", COLUMNS: "200" },
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise((resolve) => child.on("exit", resolve));
    const redraws = () => out.split("\x1b[H\x1b[2J").length - 1;
    await waitFor("the first drawing", async () => redraws() >= 1 && out.includes("\x1b[32mReady\x1b[39m"));
    const before = redraws();
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: "resnet" },
      { metadata: { labels: { redraw: "1" } } },
      "merge",
    );
    await waitFor("a redraw after the change", async () => redraws() > before);
    const last = out.slice(out.lastIndexOf("\x1b[H\x1b[2J"));
    assert.match(last, /resnet/);
    assert.match(last, /pull/, "a redraw shows the whole table, not just the changed row");
    child.kill("SIGTERM");
    await exited;
  });

  it("status -o json|yaml|name and one NAME", () => {
    const json = JSON.parse(mlmodel(["status", "-n", ns.name, "-o", "json"]).stdout) as {
      kind: string;
      items: { metadata: { name: string; managedFields?: unknown }; status: { phase: string } }[];
    };
    assert.equal(json.kind, "List");
    assert.deepEqual(json.items.map((i) => `${i.metadata.name}=${i.status.phase}`).sort(), [
      "pull=Failed",
      "resnet=Ready",
    ]);
    assert.equal(json.items[0]!.metadata.managedFields, undefined);
    const yaml = mlmodel(["status", "resnet", "-n", ns.name, "-o", "yaml"]).stdout;
    assert.match(yaml, /^kind: MLModel$/m);
    assert.match(yaml, /^ {2}phase: Ready$/m);
    assert.deepEqual(
      mlmodel(["status", "-n", ns.name, "-o", "name"]).stdout.split("\n").filter(Boolean).sort(),
      ["pull", "resnet"],
    );
    const one = mlmodel(["status", "resnet", "-n", ns.name]);
    assert.equal(one.stdout.trimEnd().split("\n").length, 2);
    const all = mlmodel(["status", "-A"]);
    assert.match(all.stdout, new RegExp(`^${ns.name}\\s+resnet\\s+Ready`, "m"));
  });

  it("describe a Ready model: conditions, revision, children and events", () => {
    const r = mlmodel(["describe", "resnet", "-n", ns.name]);
    assert.equal(r.status, 0, r.stderr);
    const text = r.stdout;
    assert.doesNotMatch(text, ansiEscape);
    assert.match(text, /^Phase:\s+Ready \(Serving\)$/m);
    assert.match(text, /^Runtime:\s+ClusterServingRuntime\/tensorflow-serving$/m);
    assert.match(text, /^Download:\s+\[#{20}\] 100%, Job resnet-dl-\w+ Succeeded, 1 attempt\(s\)$/m);
    for (const type of [
      "Ready",
      "RuntimeResolved",
      "DependenciesReady",
      "StorageReady",
      "ModelDownloaded",
      "ServingReady",
    ]) {
      assert.match(text, new RegExp(`^ {2}${type}\\s+True\\s`, "m"), type);
    }
    assert.match(
      text,
      /^Revisions:\n {2}REVISION.*\n {2}\w{10}\s+current, last ready\s+https:\/\/models\.example\.com/m,
    );
    assert.match(text, /^ {2}PersistentVolumeClaim\s+resnet-model\s+Bound 2Gi$/m);
    assert.match(text, /^ {2}Job\s+resnet-dl-\w+\s+Complete \(1 succeeded\)$/m);
    assert.match(text, /^ {2}Deployment\s+resnet\s+2\/2 ready, 2 up to date$/m);
    assert.match(text, /^ {2}Service\s+resnet\s+ClusterIP /m);
    assert.equal([...text.matchAll(/^ {2}Pod\s+resnet-\S+\s+Running, ready$/gm)].length, 2);
    // A healthy rollout records no Event (status says each step); a problem on the way (the
    // download pod waiting for its volume) would show as a Warning, then the Normal end of it.
    if (!/^ {2}Warning\s/m.test(text)) assert.match(text, /^Events:\n {2}<none>$/m);
  });

  it("describe a failed model marks the explaining condition and shows the Warning and the pod", () => {
    const r = mlmodel(["describe", "pull", "-n", ns.name]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^Phase:\s+Failed \(ImagePullBackOff\)$/m);
    assert.match(r.stdout, /^ {2}ServingReady\s+False\s+ImagePullBackOff\s+\S+\s+← pod pull-/m);
    assert.match(r.stdout, /^ {2}Pod\s+pull-\S+\s+(ErrImagePull|ImagePullBackOff)$/m);
    assert.match(r.stdout, /^ {2}Warning\s+ImagePullBackOff\s/m);
    const json = JSON.parse(mlmodel(["describe", "pull", "-n", ns.name, "-o", "json"]).stdout) as {
      items: { kind: string }[];
    };
    assert.ok(json.items.some((i) => i.kind === "Deployment") && json.items.some((i) => i.kind === "Event"));
  });

  it("status --watch piped prints a line per change and stops cleanly on SIGINT", async () => {
    const child = spawn(process.execPath, [main, "status", "-n", ns.name, "--watch"], {
      cwd: root,
      env: { ...process.env, NO_COLOR: "" },
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    await waitFor("the first listing", async () => /^resnet\s+Ready/m.test(out));
    await applyObjects(admin, ns.name, [
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name: "late" },
        spec: { runtime: "no-such-runtime", model: { uri: "s3://b/m" } },
      },
    ]);
    await waitFor("a line for the new model's failure", async () =>
      /^late\s+Failed\s+0\/1\s.*RuntimeResolved=False RuntimeNotFound: spec.runtime "no-such-runtime"/m.test(
        out,
      ),
    );
    await admin.delete(mlModelKind, { namespace: ns.name, name: "late" });
    await waitFor("a line for the deletion", async () => /^late\s+Deleted\s/m.test(out));
    assert.doesNotMatch(out, ansiEscape);
    assert.equal((out.match(/^NAME\s+PHASE/gm) ?? []).length, 1, "one header");
    child.kill("SIGINT");
    assert.equal(await exited, 0);
  });

  it("errors name what is wrong and what would be right", () => {
    const missing = mlmodel(["status", "nope", "-n", ns.name]);
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, new RegExp(`MLModel "nope" not found in namespace "${ns.name}"`));
    const badOutput = mlmodel(["status", "-n", ns.name, "-o", "xml"]);
    assert.equal(badOutput.status, 2);
    assert.match(badOutput.stderr, /--output "xml" must be one of table, json, yaml, name/);
    const badColor = mlmodel(["describe", "resnet", "--color", "sometimes"]);
    assert.match(badColor.stderr, /--color "sometimes" must be one of auto, always, never/);
    const badName = mlmodel(["describe", "Bad_Name"]);
    assert.match(badName.stderr, /NAME "Bad_Name" is not a valid MLModel name/);
    const badGrace = mlmodel(["operator", "--readiness-grace-period=-5"]);
    assert.equal(badGrace.status, 2);
    assert.match(badGrace.stderr, /--readiness-grace-period "-5" must be a number of seconds from 0 to 3600/);
    const badConcurrency = mlmodel(["operator", "--concurrency", "0"]);
    assert.equal(badConcurrency.status, 2);
    assert.match(badConcurrency.stderr, /--concurrency "0" must be a whole number from 1 to 64/);
    const help = mlmodel(["status", "--help"]);
    assert.equal(help.status, 0);
    assert.match(help.stdout, /Examples:\n {2}mlmodel status /);
  });

  it("runs as a kubectl plugin: kubectl mlmodel status", async () => {
    const { kubectl } = await ensureBinaries();
    const r = spawnSync(kubectl, ["mlmodel", "status", "-n", ns.name], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "", PATH: `${join(root, "bin")}${delimiter}${process.env.PATH}` },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^resnet\s+Ready\s+2\/2/m);
    const list = spawnSync(kubectl, ["plugin", "list"], {
      encoding: "utf8",
      env: { ...process.env, PATH: `${join(root, "bin")}${delimiter}${process.env.PATH}` },
    });
    assert.match(list.stdout, /kubectl-mlmodel/);
  });
});
