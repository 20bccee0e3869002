// `mlmodel download` from Azure Blob against Azurite (the Azure Storage emulator from npm) on
// loopback: a connection string, a SAS token, and a SAS that does not grant reading.
// test-needs: azurite, openssl
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import https from "node:https";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  BlobServiceClient,
  ContainerSASPermissions,
  Pipeline,
  type RequestPolicyFactory,
  SASProtocol,
  StorageSharedKeyCredential,
} from "@azure/storage-blob";
import {
  azuriteMain,
  freePort,
  httpAnswers,
  makeCertificates,
  randomBytes,
  runDownload,
  type Started,
  seedPartial,
  startProcess,
  tempDir,
} from "./servers.ts";

// Azurite's documented development account (public, fixed in the emulator).
const account = "devstoreaccount1";
const accountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/** Azurite's blob service on 127.0.0.1:port, in memory; `tls` adds --cert/--key. */
function azuriteArgs(port: number, tls: string[] = []): string[] {
  return [
    azuriteMain(),
    "--blobHost",
    "127.0.0.1",
    "--blobPort",
    String(port),
    ...tls,
    "--silent",
    "--skipApiVersionCheck",
    "--inMemoryPersistence",
  ];
}

describe("azblob:// downloads (Azurite)", () => {
  let azurite: Started;
  let work: string;
  let endpoint: string;
  let connectionString: string;
  let readSas: string;
  let listOnlySas: string;
  const etag = "";
  const shard = "llama/shards/model-00001.safetensors";
  const blobs: Record<string, Buffer> = {
    "llama/tokenizer.json": Buffer.from('{"model": {"type": "BPE"}}'),
    "llama/shards/model-00001.safetensors": randomBytes(1_200_000, 11),
    "llama/shards/model-00002.safetensors": randomBytes(900_000, 12),
  };

  before(async () => {
    work = tempDir("azure");
    const port = await freePort();
    endpoint = `http://127.0.0.1:${port}/${account}`;
    azurite = await startProcess(
      process.execPath,
      azuriteArgs(port),
      `http://127.0.0.1:${port}`,
      httpAnswers,
    );
    connectionString = `DefaultEndpointsProtocol=http;AccountName=${account};AccountKey=${accountKey};BlobEndpoint=${endpoint};`;
    const container = BlobServiceClient.fromConnectionString(connectionString).getContainerClient("models");
    await container.create();
    for (const [name, body] of Object.entries(blobs))
      await container.getBlockBlobClient(name).uploadData(body);
    const expiresOn = new Date(Date.now() + 3600_000);
    readSas = (
      await container.generateSasUrl({
        permissions: ContainerSASPermissions.parse("rl"),
        expiresOn,
        protocol: SASProtocol.HttpsAndHttp,
      })
    ).split("?")[1]!;
    listOnlySas = (
      await container.generateSasUrl({
        permissions: ContainerSASPermissions.parse("l"),
        expiresOn,
        protocol: SASProtocol.HttpsAndHttp,
      })
    ).split("?")[1]!;
  });
  after(() => azurite?.stop());

  it("downloads a prefix with a connection string", async () => {
    const dest = join(work, "cs");
    const res = await runDownload(["--uri", `azblob://${account}/models/llama`, "--dest", dest], {
      AZURE_STORAGE_CONNECTION_STRING: connectionString,
    });
    assert.equal(res.code, 0, res.stderr);
    for (const [name, body] of Object.entries(blobs))
      assert.deepEqual(readFileSync(join(dest, name.slice("llama/".length))), body, name);
  });

  it("downloads one blob with a SAS token (leading ? accepted)", async () => {
    const dest = join(work, "sas");
    const res = await runDownload(
      ["--uri", `azblob://${account}/models/llama/shards/model-00002.safetensors`, "--dest", dest],
      {
        AZURE_STORAGE_SAS_TOKEN: `?${readSas}`,
        AZURE_STORAGE_BLOB_ENDPOINT: endpoint,
      },
    );
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(
      readFileSync(join(dest, "model-00002.safetensors")),
      blobs["llama/shards/model-00002.safetensors"],
    );
  });

  it("reports a SAS without read permission as AccessDenied, naming the Secret keys", async () => {
    const res = await runDownload(
      ["--uri", `azblob://${account}/models/llama/tokenizer.json`, "--dest", join(work, "denied")],
      {
        AZURE_STORAGE_SAS_TOKEN: listOnlySas,
        AZURE_STORAGE_BLOB_ENDPOINT: endpoint,
        MLMODEL_CREDENTIALS_SECRET: "azure-creds",
      },
    );
    assert.equal(res.code, 1);
    assert.match(
      res.stderr,
      /: AccessDenied: .*HTTP 403.*check AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_SAS_TOKEN in Secret azure-creds/,
    );
  });

  it("names a missing container as NotFound", async () => {
    const res = await runDownload(["--uri", `azblob://${account}/nothere/x`, "--dest", join(work, "nc")], {
      AZURE_STORAGE_CONNECTION_STRING: connectionString,
    });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /NotFound: container devstoreaccount1\/nothere does not exist/);
  });

  it("resumes a partial blob from its length while the ETag matches, restarts it when not", async () => {
    const uri = `azblob://${account}/models/${shard}`;
    const body = blobs[shard]!;
    const cs = { AZURE_STORAGE_CONNECTION_STRING: connectionString };
    const resumed = join(work, "resume");
    seedPartial(resumed, uri, "model-00001.safetensors", Buffer.alloc(1000, 0xee), etag);
    assert.equal((await runDownload(["--uri", uri, "--dest", resumed], cs)).code, 0);
    const got = readFileSync(join(resumed, "model-00001.safetensors"));
    assert.deepEqual(got.subarray(0, 1000), Buffer.alloc(1000, 0xee), "kept the part's bytes: a ranged read");
    assert.deepEqual(got.subarray(1000), body.subarray(1000));

    const restarted = join(work, "restart");
    seedPartial(restarted, uri, "model-00001.safetensors", Buffer.alloc(1000, 0xee), '"0x8DSTALE"');
    const res = await runDownload(["--uri", uri, "--dest", restarted], cs);
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(restarted, "model-00001.safetensors")), body);
  });
});

describe("azblob:// over HTTPS with a private CA (Azurite --cert/--key)", () => {
  let azurite: Started;
  let work: string;
  let caFile: string;
  let connectionString: string;
  const body = randomBytes(700_000, 21);

  before(async () => {
    work = tempDir("azure-tls");
    const pki = makeCertificates();
    caFile = pki.caFile;
    const port = await freePort();
    const endpoint = `https://127.0.0.1:${port}/${account}`;
    azurite = await startProcess(
      process.execPath,
      azuriteArgs(port, ["--cert", join(pki.dir, "server.crt"), "--key", join(pki.dir, "server.key")]),
      `https://127.0.0.1:${port}`,
      // Ready once it answers TLS with the test CA's certificate (any HTTP status).
      (url) =>
        new Promise((resolve) => {
          const req = https.get(url, { ca: pki.ca, timeout: 1000 }, (res) => {
            res.resume();
            resolve(true);
          });
          req.on("error", () => resolve(false));
        }),
    );
    connectionString = `DefaultEndpointsProtocol=https;AccountName=${account};AccountKey=${accountKey};BlobEndpoint=${endpoint};`;
    // The test seeds through an agent that trusts the test CA (the SDK has no CA option).
    const agent = new https.Agent({ ca: pki.ca });
    const trust: RequestPolicyFactory = {
      create: (next) => ({
        sendRequest: (request) => {
          request.agent = agent;
          return next.sendRequest(request);
        },
      }),
    };
    const seed = new BlobServiceClient(
      endpoint,
      new Pipeline([new StorageSharedKeyCredential(account, accountKey), trust]),
    ).getContainerClient("models");
    await seed.create();
    await seed.getBlockBlobClient("secure/model.onnx").uploadData(body);
  });
  after(() => azurite?.stop());

  it("trusts MLMODEL_CA_BUNDLE for an https endpoint (connection string)", async () => {
    const dest = join(work, "trusted");
    const res = await runDownload(["--uri", `azblob://${account}/models/secure/model.onnx`, "--dest", dest], {
      AZURE_STORAGE_CONNECTION_STRING: connectionString,
      MLMODEL_CA_BUNDLE: caFile,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "model.onnx")), body);
  });

  it("refuses the endpoint without the bundle, as a TLSError naming ca.crt", async () => {
    const res = await runDownload(
      [
        "--uri",
        `azblob://${account}/models/secure/model.onnx`,
        "--dest",
        join(work, "untrusted"),
        "--retries",
        "1",
      ],
      { AZURE_STORAGE_CONNECTION_STRING: connectionString },
    );
    assert.equal(res.code, 1);
    assert.match(res.stderr, /TLSError: .*ca\.crt/);
  });
});
