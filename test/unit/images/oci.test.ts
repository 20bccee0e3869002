import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  blobPath,
  dockerManifest,
  imageConfig,
  imageIndex,
  imageManifest,
  type LayerBlob,
  sha256Digest,
  tagOf,
} from "../../../src/cluster/node/oci.ts";
import { inspectImage, inspectLayer, keyOf, pruneStale, staleAfterMs } from "../../../src/images/build.ts";
import { debianMirrorLines } from "../../../src/images/debian.ts";
import { reproducibleTarArgs } from "../../../src/images/tarball.ts";
import { scratchDir } from "../../harness/scratch.ts";

const layer: LayerBlob = { digest: `sha256:${"a".repeat(64)}`, diffId: `sha256:${"b".repeat(64)}`, size: 42 };
const settings = {
  user: "1000:1000",
  env: { PATH: "/usr/bin:/bin", NODE_ENV: "production" },
  entrypoint: ["mlmodel"],
  cmd: ["operator", "--help"],
  workingDir: "/app",
};

describe("OCI documents", () => {
  it("the config carries the settings, the layers' diff ids and the fixed epoch, not the clock", () => {
    const config = imageConfig(settings, [layer], 1735689600);
    const doc = JSON.parse(config.bytes.toString());
    assert.equal(doc.created, "2025-01-01T00:00:00.000Z");
    assert.deepEqual(doc.config.Env, ["PATH=/usr/bin:/bin", "NODE_ENV=production"]);
    assert.equal(doc.config.User, "1000:1000");
    assert.deepEqual(doc.config.Entrypoint, ["mlmodel"]);
    assert.deepEqual(doc.rootfs.diff_ids, [layer.diffId]);
    assert.equal(config.descriptor.digest, sha256Digest(config.bytes));
    // Same inputs, same bytes: the digest is reproducible.
    assert.deepEqual(imageConfig(settings, [layer], 1735689600).bytes, config.bytes);
  });

  it("the index names the image for containerd (full reference) and for OCI (the tag)", () => {
    const config = imageConfig(settings, [layer], 0);
    const manifest = imageManifest(config, [layer]);
    const index = JSON.parse(imageIndex(manifest, "docker.io/seldonio/mlserver:1.6.1").toString());
    assert.equal(index.manifests[0].digest, manifest.descriptor.digest);
    assert.deepEqual(index.manifests[0].annotations, {
      "io.containerd.image.name": "docker.io/seldonio/mlserver:1.6.1",
      "org.opencontainers.image.ref.name": "1.6.1",
    });
    const docker = JSON.parse(
      dockerManifest(config, [layer], "docker.io/seldonio/mlserver:1.6.1").toString(),
    );
    assert.deepEqual(docker[0].Layers, [`blobs/sha256/${"a".repeat(64)}`]);
    assert.equal(blobPath(layer.digest), `blobs/sha256/${"a".repeat(64)}`);
  });

  it("a reference needs a tag (a registry port is not one)", () => {
    assert.equal(tagOf("localhost:5000/x/y:v1"), "v1");
    assert.throws(() => tagOf("localhost:5000/x/y"), /must end in a :tag/);
    assert.throws(() => tagOf(`x/y:v1@sha256:${"0".repeat(64)}`), /no @digest/);
  });

  it("layers are tarred sorted, with numeric owners and clamped times", () => {
    const args = reproducibleTarArgs("/r", ["etc", "usr"], 7);
    for (const flag of ["--sort=name", "--numeric-owner", "--mtime=@7", "--clamp-mtime", "--format=posix"])
      assert.ok(args.includes(flag), flag);
    assert.deepEqual(args.slice(-3), ["--", "etc", "usr"]);
  });
});

describe("cache keys", () => {
  it("do not depend on the order of object keys, and change with any value", () => {
    assert.equal(keyOf({ a: 1, b: [1, 2] }), keyOf({ b: [1, 2], a: 1 }));
    assert.notEqual(keyOf({ a: 1, b: [1, 2] }), keyOf({ a: 1, b: [2, 1] }));
    assert.notEqual(keyOf({ a: 1 }), keyOf({ a: 2 }));
  });
});

describe("cache entries", () => {
  const entry = (files: Record<string, string>) => {
    const dir = join(scratchDir("image-cache"), "entry");
    mkdirSync(dir);
    for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content);
    return dir;
  };
  const blob = "layer bytes";
  const record = (digest: string) => JSON.stringify({ name: "x", key: "k", digest, diffId: "", size: 11 });

  it("a missing directory is missing; no record means an interrupted build", async () => {
    assert.deepEqual(await inspectLayer("/nonexistent/mlmodel-layer"), { state: "missing" });
    const state = await inspectLayer(entry({ "layer.tar.gz": blob }));
    assert.equal(state.state, "corrupted");
  });

  it("a blob that does not match its recorded digest is corrupted; a matching one is ok", async () => {
    const bad = await inspectLayer(
      entry({ "layer.tar.gz": blob, "layer.json": record(`sha256:${"0".repeat(64)}`) }),
    );
    assert.deepEqual(bad, { state: "corrupted", why: "layer.tar.gz does not match its recorded digest" });
    const good = await inspectLayer(
      entry({ "layer.tar.gz": blob, "layer.json": record(sha256Digest(blob)) }),
    );
    assert.equal(good.state, "ok");
  });

  it("an image entry checks its archive the same way", async () => {
    const archiveRecord = (sha: string) => JSON.stringify({ archiveSha256: sha });
    const bad = await inspectImage(
      entry({ "image.tar": "x", "image.json": archiveRecord(sha256Digest("y")) }),
    );
    assert.equal(bad.state, "corrupted");
    const gone = await inspectImage(entry({ "image.json": archiveRecord(sha256Digest("x")) }));
    assert.deepEqual(gone, { state: "corrupted", why: "image.tar is missing" });
    const good = await inspectImage(
      entry({ "image.tar": "x", "image.json": archiveRecord(sha256Digest("x")) }),
    );
    assert.equal(good.state, "ok");
  });
});

describe("Debian mirrors for mmdebstrap", () => {
  it("takes the machine's Debian entries from deb822 and one-line sources", () => {
    const deb822 = [
      "Types: deb",
      "URIs: http://mirror.example/debian",
      "Suites: bookworm bookworm-updates",
      "Components: main",
      "",
      "Types: deb",
      "URIs: http://mirror.example/debian-security",
      "Suites: bookworm-security",
      "Components: main contrib",
    ].join("\n");
    const oneLine = "deb https://packages.cloud.example/apt cloud-sdk-bookworm main\n";
    assert.deepEqual(debianMirrorLines([deb822, oneLine], "bookworm"), [
      "deb http://mirror.example/debian bookworm main",
      "deb http://mirror.example/debian bookworm-updates main",
      "deb http://mirror.example/debian-security bookworm-security main",
    ]);
  });

  it("fills in what the machine does not list from deb.debian.org", () => {
    assert.deepEqual(
      debianMirrorLines(["deb [arch=amd64] http://m.example/debian bookworm main\n"], "bookworm"),
      [
        "deb http://m.example/debian bookworm main",
        "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
      ],
    );
  });
});

describe("cache pruning", () => {
  it("removes older keys of the same name unused for a day, keeps the rest", async () => {
    const parent = scratchDir("image-prune");
    const make = (entry: string, ageMs: number) => {
      mkdirSync(join(parent, entry));
      const when = new Date(Date.now() - ageMs);
      utimesSync(join(parent, entry), when, when);
    };
    const old = staleAfterMs + 60_000;
    make("mlmodel-aaaaaaaaaaaaaaaa", 0); // the one in use
    make("mlmodel-bbbbbbbbbbbbbbbb", old); // stale: removed
    make("mlmodel-cccccccccccccccc", 60_000); // used an hour ago by another checkout: kept
    make("mlmodel-dddddddddddddddd", old); // stale but being built (locked): kept
    writeFileSync(join(parent, "mlmodel-dddddddddddddddd.lock"), "1");
    make("mlserver-eeeeeeeeeeeeeeee", old); // another image: kept
    make("mlmodel-app-ffffffffffffffff", old); // a name that only starts the same: kept
    const removed = await pruneStale(parent, "mlmodel", join(parent, "mlmodel-aaaaaaaaaaaaaaaa"));
    assert.deepEqual(removed, ["mlmodel-bbbbbbbbbbbbbbbb"]);
    assert.equal(existsSync(join(parent, "mlmodel-bbbbbbbbbbbbbbbb")), false);
    assert.equal(readdirSync(parent).length, 6);
  });
});
