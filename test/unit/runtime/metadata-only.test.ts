import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  builtinKinds,
  Informer,
  KubeClient,
  type KubeObject,
  metadataListAccept,
  metadataOnlySource,
  metadataWatchAccept,
} from "../../../src/runtime/index.ts";

/** A Secret as the API server would send it whole; a metadata-only source must not pass `data` on. */
const secret = (name: string, rv: string) => ({
  apiVersion: "meta.k8s.io/v1",
  kind: "PartialObjectMetadata",
  metadata: { name, namespace: "ns", resourceVersion: rv, managedFields: [{ manager: "m" }] },
  data: { password: "c2VjcmV0" },
});

describe("metadata-only list and watch", () => {
  const accepts: { url: string; accept: string | undefined }[] = [];
  let server: http.Server;
  let client: KubeClient;

  before(async () => {
    server = http.createServer((req, res) => {
      accepts.push({ url: req.url ?? "", accept: req.headers.accept });
      res.setHeader("content-type", "application/json");
      if (req.url?.includes("watch=true")) {
        res.write(`${JSON.stringify({ type: "ADDED", object: secret("b", "11") })}\n`);
        res.write(
          `${JSON.stringify({ type: "BOOKMARK", object: { kind: "PartialObjectMetadata", metadata: { resourceVersion: "12" } } })}\n`,
        );
        res.end();
        return;
      }
      res.end(
        JSON.stringify({
          apiVersion: "meta.k8s.io/v1",
          kind: "PartialObjectMetadataList",
          metadata: { resourceVersion: "10" },
          items: [secret("a", "9")],
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    client = new KubeClient({ server: `http://127.0.0.1:${port}`, headers: async () => ({}) });
  });

  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("asks for PartialObjectMetadata, and gives the objects back their kind and nothing but metadata", async () => {
    const source = metadataOnlySource(client, builtinKinds.Secret, { namespace: "ns" });
    const ac = new AbortController();
    const page = await source.list({ limit: 500, signal: ac.signal });
    assert.equal(page.resourceVersion, "10");
    assert.deepEqual(page.items, [
      { apiVersion: "v1", kind: "Secret", metadata: { name: "a", namespace: "ns", resourceVersion: "9" } },
    ]);
    const events = [];
    for await (const e of source.watch({ resourceVersion: "10", allowWatchBookmarks: true }, ac.signal))
      events.push(e);
    assert.deepEqual(
      events.map((e) => [e.type, e.object.kind, e.object.metadata.resourceVersion, "data" in e.object]),
      [
        ["ADDED", "Secret", "11", false],
        ["BOOKMARK", "PartialObjectMetadata", "12", false],
      ],
    );
    assert.deepEqual(accepts.slice(-2), [
      { url: "/api/v1/namespaces/ns/secrets?limit=500", accept: metadataListAccept },
      {
        url: "/api/v1/namespaces/ns/secrets?watch=true&resourceVersion=10&allowWatchBookmarks=true",
        accept: metadataWatchAccept,
      },
    ]);
  });

  it("other requests still ask for whole objects", async () => {
    await client.list(builtinKinds.Secret, { namespace: "ns" });
    assert.equal(accepts.at(-1)?.accept, "application/json");
  });

  it("an informer over it stores metadata only", async () => {
    const ac = new AbortController();
    const informer = new Informer<KubeObject>(
      metadataOnlySource(client, builtinKinds.Secret, { namespace: "ns" }),
      builtinKinds.Secret,
      { watcher: { watchTimeoutSeconds: 1 } },
    );
    const running = informer.run(ac.signal);
    assert.equal(await informer.waitForSync(ac.signal), true);
    const stored = informer.store.get({ namespace: "ns", name: "a" });
    ac.abort();
    await running.catch(() => {});
    assert.deepEqual(stored, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "a", namespace: "ns", resourceVersion: "9" },
    });
  });
});
