import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ephemeralPortRange, sendFromNextPort, sourcePortCycle } from "../../harness/source-ports.ts";

describe("source ports of a one-host load generator", () => {
  it("reads the ephemeral range, and falls back to Linux's default when it cannot", () => {
    const dir = mkdtempSync(join(tmpdir(), "ports-"));
    const file = join(dir, "range");
    writeFileSync(file, "40000\t40100\n");
    assert.deepEqual(ephemeralPortRange(file), { first: 40000, last: 40100 });
    writeFileSync(file, "garbage\n");
    assert.deepEqual(ephemeralPortRange(file), { first: 32768, last: 60999 });
    assert.deepEqual(ephemeralPortRange(join(dir, "absent")), { first: 32768, last: 60999 });
  });

  it("uses every port of the range once per lap, in turn, wrapping at the end", () => {
    const next = sourcePortCycle({ first: 100, last: 104 }, 103);
    const lap = Array.from({ length: 5 }, next);
    assert.deepEqual(lap, [103, 104, 100, 101, 102]);
    assert.deepEqual(Array.from({ length: 5 }, next), lap, "the second lap repeats the first");
  });

  it("starts somewhere in the range by default", () => {
    const range = { first: 50000, last: 50009 };
    for (let i = 0; i < 20; i++) {
      const port = sourcePortCycle(range)();
      assert.ok(port >= range.first && port <= range.last, `${port} in ${range.first}-${range.last}`);
    }
  });

  it("skips a port another socket holds, and names the port of a request that fails", async () => {
    const server = createServer((s) => s.end());
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const target = (server.address() as { port: number }).port;
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, "127.0.0.1", r));
    const held = (holder.address() as { port: number }).port;
    // A port the kernel has just handed out and taken back: free, unlike the one after `held`,
    // which any other socket on a busy machine (this test's server, say) may hold.
    const spare = createServer();
    await new Promise<void>((r) => spare.listen(0, "127.0.0.1", r));
    const free = (spare.address() as { port: number }).port;
    await new Promise((r) => spare.close(r));
    try {
      const order = [held, free];
      const dial = (localPort: number) =>
        new Promise<number>((resolve, reject) => {
          const socket = connect({ host: "127.0.0.1", port: target, localAddress: "127.0.0.1", localPort });
          socket.on("connect", () => {
            resolve(socket.localPort!);
            socket.destroy();
          });
          socket.on("error", reject);
        });
      assert.equal(await sendFromNextPort(() => order.shift()!, dial), free, "the held port is skipped");
      await assert.rejects(
        sendFromNextPort(
          () => 4242,
          () => Promise.reject(Object.assign(new Error("connect EHOSTUNREACH"), { code: "EHOSTUNREACH" })),
        ),
        { message: "connect EHOSTUNREACH (source port 4242)", code: "EHOSTUNREACH" },
      );
      let tries = 0;
      await assert.rejects(
        sendFromNextPort(
          () => 4242,
          () => {
            tries++;
            return Promise.reject(Object.assign(new Error("bind EADDRINUSE"), { code: "EADDRINUSE" }));
          },
          3,
        ),
        /EADDRINUSE \(source port 4242\)/,
      );
      assert.equal(tries, 3, "gives up after the attempts it was given");
    } finally {
      server.close();
      holder.close();
    }
  });
});
