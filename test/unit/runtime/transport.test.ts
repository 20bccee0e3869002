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
      res.end(JSON.stringify({ ok: true }));
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
});
