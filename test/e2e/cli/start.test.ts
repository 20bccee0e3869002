/**
 * `mlmodel start --exit-when-ready` (`npm start`) as a new user runs it, on a local control
 * plane of its own (XDG_STATE_HOME moves the default cluster dir): the sample becomes Ready on
 * kwok nodes, and the command says plainly that pods there are simulated.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { defaultClusterDir, down } from "../../../src/cluster/index.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { repoRoot } from "../operator/helpers.ts";

describe("mlmodel start on kwok nodes", () => {
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_STATE_HOME: scratchDir("start-state") };
  // No configured cluster: start brings up the local one, as on a fresh machine.
  delete env.KUBECONFIG;
  after(async () => {
    await down(defaultClusterDir(env));
  });

  it("serves the sample as Ready and says that nothing was downloaded and nothing serves its URL", () => {
    const r = spawnSync(
      process.execPath,
      [join(repoRoot, "src", "cli", "main.ts"), "start", "--exit-when-ready"],
      {
        env,
        encoding: "utf8",
        timeout: 600_000,
      },
    );
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /resnet is Ready at http:\/\/resnet\.default\.svc:8501/);
    assert.match(
      r.stdout,
      /Its pods run on kwok nodes, where pods are simulated: no file was downloaded and nothing serves http:\/\/resnet\.default\.svc:8501\.\nFor real pods \(Linux, root\): npm start -- --real-node/,
    );
  });
});
