// The AgentClient's ensure against a loopback HTTP server that answers as an agent would: an
// entry no agent holds is asked for again while waiting for it (said once), and only then.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { AgentClient } from "../../../src/nodecache/client.ts";
import { cacheKey, type EntryManifest, nodeCacheApi } from "../../../src/nodecache/contract.ts";

const key = cacheKey("https://origin.example/client-test", undefined);
const manifest: EntryManifest = { key, uri: "https://origin.example/client-test", files: [], size: 0 };

describe("AgentClient.ensure of an entry no agent holds", () => {
  let server: http.Server;
  let url: string;
  let asked = 0;
  /** How many asks are answered 404 before the entry is there (Infinity: never). */
  let absentFor = 0;

  before(async () => {
    server = http.createServer((req, res) => {
      if (req.method !== "POST" || req.url !== nodeCacheApi.ensure(key)) {
        res.writeHead(400).end();
        return;
      }
      asked++;
      const found = asked > absentFor;
      res.writeHead(found ? 200 : 404, { "content-type": "application/json" });
      res.end(JSON.stringify(found ? manifest : { error: `no agent holds entry ${key}` }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  const client = (log: string[], deadlineMs: number) =>
    new AgentClient(url, {
      deadline: Date.now() + deadlineMs,
      idleTimeoutMs: 5000,
      parallel: 1,
      log: (l) => log.push(l),
    });

  it("without waiting, answers undefined at the first 404", async () => {
    asked = 0;
    absentFor = Number.POSITIVE_INFINITY;
    const log: string[] = [];
    assert.equal(await client(log, 60_000).ensure(key), undefined);
    assert.equal(asked, 1);
    assert.deepEqual(log, []);
  });

  it("waiting, asks again until the entry is there and says once what it waits for", async () => {
    asked = 0;
    absentFor = 4;
    const log: string[] = [];
    const got = await client(log, 60_000).ensure(key, { waitForEntry: { intervalMs: 5 } });
    assert.deepEqual(got, manifest);
    assert.equal(asked, 5, "four absent answers, then the entry");
    assert.deepEqual(log, [
      `waiting for cache entry ${key}: no node cache agent holds it yet (the model's download Job stores it); asking again every 5 ms until the timeout`,
    ]);
  });

  it("waiting, answers undefined at the deadline, having asked more than once", async () => {
    asked = 0;
    absentFor = Number.POSITIVE_INFINITY;
    const log: string[] = [];
    assert.equal(await client(log, 1000).ensure(key, { waitForEntry: { intervalMs: 10 } }), undefined);
    assert.ok(asked > 1, `asked ${asked} time(s)`);
    assert.equal(log.length, 1, log.join("\n"));
  });
});
