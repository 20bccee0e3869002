// `mlmodel cluster up` on bad input: each case ends with a clear message and nothing left running.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { binaryNames, ClusterError, down, ensureBinaries, status, up } from "../../../src/cluster/index.ts";
import { localCluster } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";

/** Pids of processes whose command line mentions `dir` (what a failed `up` must not leave). */
function processesUsing(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(dir)) pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

const tempDir = (name: string) => scratchDir(name);

describe("cluster up refuses bad situations cleanly", () => {
  const dirs: string[] = [];
  after(async () => {
    for (const dir of dirs) await down(dir).catch(() => {});
  });

  it("refuses a second up on a dir with a running cluster, and leaves that cluster healthy", async (t) => {
    const cluster = localCluster();
    if (!cluster) return t.skip("needs the local control plane of this test run");
    await assert.rejects(up({ dir: cluster.dir }), (err: Error) => {
      assert.ok(err instanceof ClusterError);
      assert.match(err.message, /already running/);
      assert.match(err.message, /mlmodel cluster down --dir/);
      return true;
    });
    const health = await status(cluster.dir);
    assert.ok(health?.components.every((c) => c.healthy));
  });

  it("refuses an API server port that is taken, starting nothing", async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen({ port: 0, host: "127.0.0.1" }, resolve));
    const port = (blocker.address() as { port: number }).port;
    const dir = tempDir("port");
    dirs.push(dir);
    try {
      await assert.rejects(
        up({ dir, apiserverPort: port }),
        new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use`),
      );
      assert.deepEqual(processesUsing(dir), []);
    } finally {
      blocker.close();
    }
  });

  it("names the component that fails to start and its log, and stops the others", async () => {
    const real = await ensureBinaries();
    const binDir = tempDir("bin");
    for (const name of binaryNames) {
      if (name === "kube-apiserver") {
        writeFileSync(join(binDir, name), "#!/bin/sh\necho 'E1121 simulated: cannot bind' >&2\nexit 3\n", {
          mode: 0o755,
        });
      } else {
        symlinkSync(real[name], join(binDir, name));
      }
    }
    const dir = tempDir("broken");
    dirs.push(dir);
    const previous = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
    process.env.MLMODEL_CONTROLPLANE_BIN_DIR = binDir;
    try {
      await assert.rejects(up({ dir }), (err: Error) => {
        assert.ok(err instanceof ClusterError);
        assert.match(err.message, /kube-apiserver exited during start-up/);
        assert.match(err.message, new RegExp(`${dir}/logs/kube-apiserver\\.log`));
        assert.match(err.message, /simulated: cannot bind/);
        return true;
      });
    } finally {
      if (previous === undefined) delete process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
      else process.env.MLMODEL_CONTROLPLANE_BIN_DIR = previous;
    }
    assert.deepEqual(processesUsing(dir), [], "etcd, started before the API server, was stopped again");
    // And the dir is usable again: a failed up leaves no state that blocks the next one.
    assert.equal(readdirSync(dir).includes("state.json"), false);
  });
});
