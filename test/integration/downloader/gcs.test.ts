// `mlmodel download` from gs:// against fake-gcs-server (a real GCS JSON API server) on
// loopback: anonymous, and with a service-account key whose JWT is verified by a local token
// endpoint. A recording proxy in front of the server shows the token reaching storage.
// test-needs: fake-gcs
import assert from "node:assert/strict";
import { createVerify, generateKeyPairSync } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  fakeGcsBinary,
  freePort,
  httpAnswers,
  randomBytes,
  runDownload,
  type Started,
  startProcess,
  tempDir,
} from "./servers.ts";

function listen(server: http.Server): Promise<string> {
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
    ),
  );
}

/** Forwards to the GCS server and records the Authorization header of each request. */
function recordingProxy(target: string, seen: string[]): http.Server {
  return http.createServer((req, res) => {
    seen.push(req.headers.authorization ?? "");
    const upstream = http.request(
      `${target}${req.url}`,
      { method: req.method, headers: { ...req.headers, host: new URL(target).host } },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    req.pipe(upstream);
  });
}

/** An OAuth token endpoint that checks the JWT assertion's RS256 signature and claims. */
function tokenServer(publicKey: string, assertions: Array<Record<string, unknown>>): http.Server {
  return http.createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => {
      body += d.toString();
    });
    req.on("end", () => {
      const form = new URLSearchParams(body);
      const [h, c, sig] = (form.get("assertion") ?? "").split(".");
      const valid = createVerify("RSA-SHA256")
        .update(`${h}.${c}`)
        .verify(publicKey, Buffer.from(sig ?? "", "base64url"));
      if (!valid || form.get("grant_type") !== "urn:ietf:params:oauth:grant-type:jwt-bearer") {
        res.writeHead(400).end('{"error":"invalid_grant"}');
        return;
      }
      assertions.push(JSON.parse(Buffer.from(c!, "base64url").toString()));
      res
        .writeHead(200, { "content-type": "application/json" })
        .end('{"access_token":"ya29.test-token","expires_in":3600}');
    });
  });
}

describe("gs:// downloads (fake-gcs-server)", () => {
  let gcs: Started;
  let work: string;
  const proxied: string[] = [];
  const assertions: Array<Record<string, unknown>> = [];
  const servers: http.Server[] = [];
  let proxyUrl = "";
  let tokenUrl = "";
  const objects: Record<string, Buffer> = {
    "bert/config.json": Buffer.from('{"hidden_size": 768}'),
    "bert/weights/model.safetensors": randomBytes(1_500_000, 7),
  };

  before(async () => {
    work = tempDir("gcs");
    const data = join(work, "data");
    for (const [name, body] of Object.entries(objects)) {
      const path = join(data, "tf-models", name);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, body);
    }
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    gcs = await startProcess(
      fakeGcsBinary(),
      [
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        String(port),
        "-backend",
        "memory",
        "-data",
        data,
        "-log-level",
        "error",
      ],
      url,
      (u) => httpAnswers(`${u}/storage/v1/b`),
    );
    const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const proxy = recordingProxy(url, proxied);
    const tokens = tokenServer(publicKey.export({ type: "spki", format: "pem" }).toString(), assertions);
    servers.push(proxy, tokens);
    proxyUrl = await listen(proxy);
    tokenUrl = `${await listen(tokens)}/token`;
    writeFileSync(
      join(work, "sa.json"),
      JSON.stringify({
        type: "service_account",
        client_email: "model-reader@project.iam.gserviceaccount.com",
        private_key_id: "k1",
        private_key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
        token_uri: tokenUrl,
      }),
    );
  });
  after(async () => {
    for (const s of servers) s.closeAllConnections();
    for (const s of servers) s.close();
    await gcs?.stop();
  });

  it("downloads a prefix anonymously", async () => {
    const dest = join(work, "anon");
    const res = await runDownload(["--uri", "gs://tf-models/bert", "--dest", dest], {
      STORAGE_EMULATOR_HOST: gcs.url,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "config.json")), objects["bert/config.json"]);
    assert.deepEqual(
      readFileSync(join(dest, "weights/model.safetensors")),
      objects["bert/weights/model.safetensors"],
    );
  });

  it("signs in with a service-account key and sends the token to storage", async () => {
    const dest = join(work, "sa");
    const res = await runDownload(
      ["--uri", "gs://tf-models/bert/weights/model.safetensors", "--dest", dest],
      {
        STORAGE_EMULATOR_HOST: proxyUrl,
        GOOGLE_APPLICATION_CREDENTIALS: join(work, "sa.json"),
      },
    );
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(
      readFileSync(join(dest, "model.safetensors")),
      objects["bert/weights/model.safetensors"],
    );
    assert.equal(assertions.length, 1, "one token for the whole download");
    assert.equal(assertions[0]!.iss, "model-reader@project.iam.gserviceaccount.com");
    assert.equal(assertions[0]!.aud, tokenUrl);
    assert.equal(assertions[0]!.scope, "https://www.googleapis.com/auth/devstorage.read_only");
    assert.ok(proxied.length >= 2);
    assert.ok(
      proxied.every((h) => h === "Bearer ya29.test-token"),
      `storage saw ${proxied.join(", ")}`,
    );
  });

  it("names a missing object as NotFound", async () => {
    const res = await runDownload(["--uri", "gs://tf-models/nothing/", "--dest", join(work, "none")], {
      STORAGE_EMULATOR_HOST: gcs.url,
    });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /gs:\/\/tf-models\/nothing\/: NotFound: /);
  });
});
