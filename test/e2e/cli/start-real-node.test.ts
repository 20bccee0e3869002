// test-needs: own-real-node, images, curl
/**
 * `sudo npm start -- --real-node --exit-when-ready` as a new user runs it, from nothing: the
 * local control plane comes up with a real node (in a state dir of the test's own), the images
 * are imported, a scikit-learn model is trained, served from this machine, downloaded by the
 * real Job and served by MLServer; the last line printed is a curl command, and running it
 * returns the prediction the command showed. The cluster is left running, as the command says.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  defaultClusterDir,
  down,
  readState,
  releaseRealNode,
  reserveRealNode,
} from "../../../src/cluster/index.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { nodeLockWaitMs } from "../../integration/realnode/harness.ts";
import { repoRoot } from "../operator/helpers.ts";

describe("mlmodel start --real-node", () => {
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_STATE_HOME: scratchDir("start-real-state") };
  delete env.KUBECONFIG;
  const dir = defaultClusterDir(env);
  before(async () => {
    // Another run's real node may hold the machine: wait for it (start itself would fail at once).
    await reserveRealNode(dir, { waitMs: nodeLockWaitMs, progress: (line) => console.log(`# ${line}`) });
  });
  after(async () => {
    await down(dir);
    await releaseRealNode(dir);
  });

  it("ends with a curl command that returns the prediction, and leaves the cluster running", async () => {
    const r = spawnSync(
      process.execPath,
      [join(repoRoot, "src", "cli", "main.ts"), "start", "--real-node", "--exit-when-ready"],
      { env, encoding: "utf8", timeout: 40 * 60_000 },
    );
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    const lines = r.stdout.trimEnd().split("\n");
    const curl = lines.at(-1)!;
    assert.match(
      curl,
      /^curl -s --resolve iris\.default\.svc:8080:10\.96\.\d+\.\d+ .* http:\/\/iris\.default\.svc:8080\/v2\/models\/iris\/infer$/,
    );
    const shown = /prediction through the Service: (\[[\d,]+\]) \(what scikit-learn predicted\)/.exec(
      r.stdout,
    );
    assert.ok(shown, r.stdout);
    assert.doesNotMatch(r.stdout, /simulated/);

    const asked = spawnSync("sh", ["-c", curl], { encoding: "utf8", timeout: 60_000 });
    assert.equal(asked.status, 0, asked.stderr);
    const answer = JSON.parse(asked.stdout) as { model_name: string; outputs: { data: number[] }[] };
    assert.equal(answer.model_name, "iris");
    assert.deepEqual(answer.outputs[0]!.data, JSON.parse(shown[1]!));
    assert.ok((await readState(dir))?.realNode, "the cluster keeps running after --exit-when-ready");
  });
});
