import assert from "node:assert/strict";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import type { TLSSocket } from "node:tls";
import { servingCertificate } from "../../../src/cluster/pki.ts";
import { NodeTransport } from "../../../src/runtime/transport.ts";

/** What the server saw of each request: the path and query, the Host header, the SNI name. */
interface Seen {
  url: string;
  host: string | undefined;
  sni: string | false | null;
}

describe("NodeTransport", () => {
  const seen: Seen[] = [];
  const sockets = new Set<unknown>();
  let server: https.Server;
  let port = 0;
  let ca = "";

  before(async () => {
    const cert = await servingCertificate({
      caName: "transport-test",
      ips: ["127.0.0.1"],
      dnsNames: ["localhost"],
    });
    ca = cert.ca;
    server = https.createServer({ cert: cert.certPem, key: cert.keyPem }, (req, res) => {
      seen.push({ url: req.url ?? "", host: req.headers.host, sni: (req.socket as TLSSocket).servername });
      sockets.add(req.socket);
      if (req.url === "/large") {
        // Several chunks: the client reads them all before the connection is free again.
        for (let i = 0; i < 64; i++) res.write("x".repeat(4096));
        res.end();
      } else if (req.url === "/cut") {
        res.writeHead(200, { "Content-Length": "100000" });
        res.write("x".repeat(1000), () => setImmediate(() => req.socket.destroy()));
      } else if (req.url === "/hang") {
        res.writeHead(200, { "Content-Length": "100000" });
        res.write("x".repeat(1000)); // and no more: only the client's abort ends it
      } else res.end(JSON.stringify({ ok: true }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  after(() => server.close());

  async function get(serverUrl: string, url: string, servername?: string): Promise<Seen> {
    const transport = new NodeTransport(serverUrl);
    try {
      const res = await transport.send(
        { method: "GET", url, headers: {} },
        { ca, ...(servername ? { servername } : {}) },
      );
      assert.equal(res.status, 200);
      assert.deepEqual(JSON.parse(await res.text()), { ok: true });
      return seen.at(-1)!;
    } finally {
      transport.close();
    }
  }

  it("sends the path (a server's path prefix included) and query, and no SNI name to an IP address", async () => {
    const base = `https://127.0.0.1:${port}/prefix`;
    assert.deepEqual(await get(base, `${base}/api/v1/pods?watch=true&limit=1`), {
      url: "/prefix/api/v1/pods?watch=true&limit=1",
      host: `127.0.0.1:${port}`,
      sni: false,
    });
  });

  it("sends the host name as SNI name, or the kubeconfig's tls-server-name", async () => {
    const byName = `https://localhost:${port}`;
    assert.deepEqual(await get(byName, `${byName}/version`), {
      url: "/version",
      host: `localhost:${port}`,
      sni: "localhost",
    });
    const byIp = `https://127.0.0.1:${port}`;
    assert.equal((await get(byIp, `${byIp}/version`, "localhost")).sni, "localhost");
  });

  it("sends a URL of another origin as it is", async () => {
    const other = `https://localhost:${port}/elsewhere?x=1`;
    assert.deepEqual(await get(`https://localhost:${port + 1}`, other), {
      url: "/elsewhere?x=1",
      host: `localhost:${port}`,
      sni: "localhost",
    });
  });

  it("reads or discards a body to its end, the connection reused; a body cut short or aborted rejects", async () => {
    const base = `https://127.0.0.1:${port}`;
    const transport = new NodeTransport(base);
    const tls = { ca }; // one object: one pool
    try {
      sockets.clear();
      for (let i = 0; i < 3; i++) {
        const res = await transport.send({ method: "GET", url: `${base}/large`, headers: {} }, tls);
        assert.equal(res.status, 200);
        assert.equal(await res.discard(), undefined);
      }
      assert.equal(sockets.size, 1, "each discarded answer freed its connection for the next request");
      const cut = await transport.send({ method: "GET", url: `${base}/cut`, headers: {} }, tls);
      await assert.rejects(cut.discard());
      const whole = await transport.send({ method: "GET", url: `${base}/large`, headers: {} }, tls);
      assert.equal((await whole.text()).length, 64 * 4096);
      const cutText = await transport.send({ method: "GET", url: `${base}/cut`, headers: {} }, tls);
      await assert.rejects(cutText.text());
      const abort = new AbortController();
      const aborted = await transport.send(
        { method: "GET", url: `${base}/hang`, headers: {}, signal: abort.signal },
        tls,
      );
      const reading = aborted.text();
      abort.abort();
      await assert.rejects(reading, { name: "AbortError" });
    } finally {
      transport.close();
    }
  });
});
