// The downloader's pure parts: URI forms, name safety, digests, backoff, progress, flags.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { parseSize } from "../../../src/cli/commands/download.ts";
import { type DownloadStatus, partialDirFor } from "../../../src/downloader/contract.ts";
import { Credentials } from "../../../src/downloader/credentials.ts";
import { normalizeSha256, treeDigest } from "../../../src/downloader/digest.ts";
import { mapBounded } from "../../../src/downloader/download.ts";
import {
  DownloadError,
  errorForStatus,
  failureLine,
  toDownloadError,
} from "../../../src/downloader/errors.ts";
import { safeRelativePath } from "../../../src/downloader/paths.ts";
import { Progress, progressLine, progressText, shortBytes } from "../../../src/downloader/progress.ts";
import { backoffDelay } from "../../../src/downloader/retry.ts";
import { GcsSource } from "../../../src/downloader/sources/gcs.ts";
import { nextLink } from "../../../src/downloader/sources/hf.ts";
import { parseHeaderLines } from "../../../src/downloader/sources/http.ts";
import { parseContentRange, relativePath } from "../../../src/downloader/sources/source.ts";
import { statusApplyBody, statusPatchPath } from "../../../src/downloader/status-reporter.ts";
import { parseModelUri } from "../../../src/downloader/uri.ts";

function rejects(fn: () => unknown, reason: string, message: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof DownloadError);
    assert.equal(err.reason, reason);
    assert.match(err.message, message);
    return true;
  });
}

describe("model URIs", () => {
  it("parses every scheme", () => {
    assert.deepEqual(parseModelUri("s3://models/resnet/1/"), {
      scheme: "s3",
      bucket: "models",
      key: "resnet/1/",
    });
    assert.deepEqual(parseModelUri("gs://bkt/o"), { scheme: "gs", bucket: "bkt", key: "o" });
    assert.deepEqual(parseModelUri("azblob://acct/models/llama"), {
      scheme: "azure",
      account: "acct",
      container: "models",
      prefix: "llama",
    });
    assert.deepEqual(parseModelUri("https://acct.blob.core.windows.net/models/llama/x.bin"), {
      scheme: "azure",
      account: "acct",
      container: "models",
      prefix: "llama/x.bin",
    });
    assert.deepEqual(parseModelUri("hf://org/repo"), {
      scheme: "hf",
      repo: "org/repo",
      revision: "main",
      path: "",
    });
    assert.deepEqual(parseModelUri("hf://org/repo@v1.0/onnx/x"), {
      scheme: "hf",
      repo: "org/repo",
      revision: "v1.0",
      path: "onnx/x",
    });
    assert.deepEqual(parseModelUri("pvc://claim/models/resnet"), {
      scheme: "pvc",
      claim: "claim",
      path: "models/resnet",
    });
    const http = parseModelUri("https://example.com/m.bin");
    assert.equal(http.scheme, "http");
  });

  it("rejects bad URIs naming the value and the right forms", () => {
    rejects(
      () => parseModelUri("models/resnet"),
      "InvalidArgument",
      /--uri "models\/resnet": it has no scheme/,
    );
    rejects(() => parseModelUri("ftp://x"), "InvalidArgument", /scheme "ftp" is not supported/);
    rejects(
      () => parseModelUri("s3://Bad_Bucket!/x"),
      "InvalidArgument",
      /bucket "Bad_Bucket!" is not a valid bucket name/,
    );
    rejects(
      () => parseModelUri("hf://onlyorg"),
      "InvalidArgument",
      /expected an organisation and a repository/,
    );
    rejects(() => parseModelUri("hf://org/repo@"), "InvalidArgument", /revision after "@" is empty/);
    rejects(() => parseModelUri("pvc://claim/../etc"), "InvalidArgument", /may not contain "\.\."/);
    rejects(
      () => parseModelUri("azblob://acct/Bad_Container/x"),
      "InvalidArgument",
      /container "Bad_Container"/,
    );
    try {
      parseModelUri("ftp://x");
    } catch (err) {
      assert.match((err as DownloadError).hint, /s3:\/\/bucket\/key-or-prefix/);
    }
  });
});

describe("names from outside", () => {
  it("normalises relative names", () => {
    assert.equal(safeRelativePath("./a//b/c.txt", "object"), "a/b/c.txt");
  });
  it("refuses escapes", () => {
    rejects(() => safeRelativePath("../x", "archive entry"), "UnsafeArchive", /climbs out/);
    rejects(() => safeRelativePath("a/../../x", "object"), "InvalidArgument", /climbs out/);
    rejects(() => safeRelativePath("/etc/passwd", "object"), "InvalidArgument", /absolute path/);
    rejects(() => safeRelativePath("C:/x", "object"), "InvalidArgument", /absolute path/);
    rejects(() => safeRelativePath("a\\..\\x", "object"), "InvalidArgument", /backslash/);
    rejects(() => safeRelativePath("./", "object"), "InvalidArgument", /is empty/);
  });
  it("maps keys under a prefix", () => {
    assert.equal(relativePath("resnet/1/a.pb", "resnet/"), "1/a.pb");
    assert.equal(relativePath("resnet/1/a.pb", "resnet"), "1/a.pb");
    assert.equal(relativePath("resnet/1/a.pb", "resnet/1/a.pb"), "a.pb");
  });
});

describe("digests", () => {
  it("hashes the sorted sha256sum manifest", () => {
    const files = [
      { path: "b.txt", sha256: "b".repeat(64) },
      { path: "a/x", sha256: "a".repeat(64) },
    ];
    const manifest = `${"a".repeat(64)}  a/x\n${"b".repeat(64)}  b.txt\n`;
    assert.equal(treeDigest(files), createHash("sha256").update(manifest).digest("hex"));
  });
  it("validates --sha256", () => {
    assert.equal(normalizeSha256(` SHA256:${"A".repeat(64)} `), "a".repeat(64));
    rejects(() => normalizeSha256("abc"), "InvalidArgument", /--sha256 "abc" is not a sha256 digest/);
  });
});

describe("errors and retries", () => {
  it("treats only 408, 429 and 5xx as transient", () => {
    assert.equal(errorForStatus(503, "GET x", "").transient, true);
    assert.equal(errorForStatus(429, "GET x", "").transient, true);
    assert.equal(errorForStatus(403, "GET x", "").transient, false);
    assert.equal(errorForStatus(403, "GET x", "").reason, "AccessDenied");
    assert.equal(errorForStatus(404, "GET x", "").reason, "NotFound");
    assert.equal(errorForStatus(400, "GET x", "").transient, false);
  });
  it("treats resets as transient and certificate errors as TLSError", () => {
    assert.equal(toDownloadError(Object.assign(new Error("reset"), { code: "ECONNRESET" })).transient, true);
    const tls = toDownloadError(
      Object.assign(new Error("x"), { cause: { code: "SELF_SIGNED_CERT_IN_CHAIN" } }),
    );
    assert.equal(tls.reason, "TLSError");
    assert.equal(tls.transient, false);
  });
  it("formats one termination line", () => {
    const line = failureLine(
      "s3://m/r",
      new DownloadError("AccessDenied", "GET x: HTTP 403\nmore", { hint: "check the keys in Secret c" }),
    );
    assert.equal(line, "s3://m/r: AccessDenied: GET x: HTTP 403 more; check the keys in Secret c");
  });
  it("backs off exponentially with full jitter, capped", () => {
    const policy = { attempts: 10, baseDelayMs: 500, maxDelayMs: 30_000 };
    assert.equal(
      backoffDelay(policy, 1, () => 0.999999),
      499,
    );
    assert.equal(
      backoffDelay(policy, 3, () => 0.999999),
      1999,
    );
    assert.equal(
      backoffDelay(policy, 20, () => 0.999999),
      29_999,
    );
    assert.equal(
      backoffDelay(policy, 3, () => 0),
      0,
    );
  });
});

describe("progress", () => {
  it("knows the total only when every size is known, and the rate over a window", () => {
    let now = 1_000_000;
    const p = new Progress(() => now);
    p.setFiles([{ path: "a", size: 100 }, { path: "b" }]);
    assert.equal(p.bytesTotal(), undefined);
    p.setFileSize("b", 300);
    assert.equal(p.bytesTotal(), 400);
    p.setFileBytes("a", 100);
    p.received(100);
    now += 2000;
    p.setFileBytes("b", 150);
    p.received(150);
    const s = p.snapshot();
    assert.equal(s.bytesDone, 250);
    assert.equal(s.bytesPerSecond, 125);
    assert.equal(progressLine(s), "Downloading: 250 B / 400 B (62%) 125 B/s, 0/2 files");
    assert.equal(s.progress, "62% 250B/400B 125B/s 0/2 files", "the kubectl get mlm column");
    p.setFileBytes("b", 0); // a restart from zero goes back
    assert.equal(p.bytesDone, 100);
    now += 60_000;
    assert.equal(p.snapshot().bytesPerSecond, 0, "an idle download reports no speed");
  });
});

describe("progress text (status.download.progress, kubectl get mlm)", () => {
  const base = {
    bytesPerSecond: 0,
    filesDone: 0,
    startedAt: "s",
    updatedAt: "u",
    progress: "",
  };
  const cases: [Partial<DownloadStatus> & Pick<DownloadStatus, "phase" | "bytesDone">, string][] = [
    [
      {
        phase: "Downloading",
        bytesDone: 412 * 2 ** 20,
        bytesTotal: 1.2 * 2 ** 30,
        bytesPerSecond: 56 * 2 ** 20,
      },
      "33% 412Mi/1.2Gi 56Mi/s",
    ],
    [{ phase: "Downloading", bytesDone: 5 * 2 ** 20 + 1, bytesPerSecond: 1000 }, "5.0Mi 1000B/s"],
    [
      {
        phase: "Downloading",
        bytesDone: 10 * 2 ** 30,
        bytesTotal: 20 * 2 ** 30,
        filesDone: 3,
        filesTotal: 10,
      },
      "50% 10Gi/20Gi 0B/s 3/10 files",
    ],
    [{ phase: "Verifying", bytesDone: 1.2 * 2 ** 30, bytesTotal: 1.2 * 2 ** 30 }, "verifying 1.2Gi"],
    [{ phase: "Extracting", bytesDone: 999 * 2 ** 10 }, "extracting 999Ki"],
    [{ phase: "Complete", bytesDone: 3 * 2 ** 20, bytesTotal: 3 * 2 ** 20 }, "100% 3.0Mi"],
    [{ phase: "Failed", bytesDone: 2 ** 20, bytesTotal: 4 * 2 ** 20 }, "failed at 25% 1.0Mi/4.0Mi"],
    [{ phase: "Failed", bytesDone: 0 }, "failed at 0B"],
  ];
  for (const [status, text] of cases) {
    it(`${status.phase} ${status.bytesDone}${status.bytesTotal ? `/${status.bytesTotal}` : ""} -> "${text}"`, () => {
      assert.equal(progressText({ ...base, ...status }), text);
    });
  }
  it("rounds to a short size without a trailing 10.0", () => {
    assert.equal(shortBytes(0), "0B");
    assert.equal(shortBytes(1023), "1023B");
    assert.equal(shortBytes(1024), "1.0Ki");
    assert.equal(shortBytes(9.97 * 2 ** 20), "10Mi");
    assert.equal(shortBytes(1023.9 * 2 ** 20), "1024Mi");
  });
});

describe("small parsers", () => {
  it("parses sizes and names a bad one", () => {
    assert.equal(parseSize("--max-size", "20Gi"), 20 * 1024 ** 3);
    assert.equal(parseSize("--max-size", "500M"), 500e6);
    assert.equal(parseSize("--max-size", "1024"), 1024);
    assert.throws(
      () => parseSize("--max-size", "big"),
      /--max-size "big" is not a size; expected e\.g\. 500Mi/,
    );
  });
  it("parses header lines and names a bad line", () => {
    assert.deepEqual(parseHeaderLines("X-Api-Key: abc\n\nX-Other:  d e \n"), {
      "x-api-key": "abc",
      "x-other": "d e",
    });
    rejects(
      () => parseHeaderLines("ok: 1\nnot a header"),
      "InvalidArgument",
      /MLMODEL_HTTP_HEADERS line 2 is not a header: it has no "Name:" before its value/,
    );
  });
  it("never echoes a bad header line: it may hold the secret", () => {
    const canary = "canaryHeaderSecret0123456789";
    for (const text of [`X-Api-Key ${canary}`, `X Api Key: ${canary}`, `${canary}`, `: ${canary}`]) {
      assert.throws(
        () => parseHeaderLines(`ok: 1\n${text}`),
        (err: unknown) => {
          assert.ok(err instanceof DownloadError);
          const shown = `${err.message}; ${err.hint}`;
          assert.match(shown, /MLMODEL_HTTP_HEADERS line 2/);
          assert.ok(!shown.includes(canary), shown);
          return true;
        },
      );
    }
  });
  it("never echoes a service-account key file that is not JSON: it may be the key itself", () => {
    const dir = mkdtempSync(join(tmpdir(), "mlmodel-sa-"));
    try {
      const canary = "canaryServiceAccountSecret0123";
      const path = join(dir, "key.json");
      writeFileSync(path, canary);
      const creds = new Credentials({ GOOGLE_APPLICATION_CREDENTIALS: path, MLMODEL_CREDENTIALS_DIR: dir });
      const limits = { requestTimeoutMs: 1000, maxListPages: 10 };
      assert.throws(
        () => new GcsSource({ bucket: "b", key: "k" }, creds, limits),
        (err: unknown) => {
          assert.ok(err instanceof DownloadError);
          assert.equal(err.reason, "InvalidArgument");
          assert.match(err.message, /service-account key .*key\.json is not JSON/);
          assert.ok(!`${err.message}; ${err.hint}`.includes(canary), err.message);
          return true;
        },
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it("parses Content-Range and Link", () => {
    assert.deepEqual(parseContentRange("bytes 100-199/1000"), { start: 100, total: 1000 });
    assert.deepEqual(parseContentRange("bytes 5-9/*"), { start: 5 });
    assert.equal(parseContentRange("nonsense"), undefined);
    assert.equal(nextLink('<https://hub/api?cursor=2>; rel="next"'), "https://hub/api?cursor=2");
    assert.equal(nextLink(undefined), undefined);
  });
  it("puts the partial directory beside DEST", () => {
    assert.equal(partialDirFor("/mnt/models/resnet/"), "/mnt/models/.resnet.mlmodel-partial");
  });
  it("applies only status.download, on the status subresource, as mlmodel-downloader", () => {
    const t = { name: "resnet", namespace: "ml" };
    assert.equal(
      statusPatchPath(t),
      "/apis/serving.mlmodel.dev/v1alpha1/namespaces/ml/mlmodels/resnet/status?fieldManager=mlmodel-downloader&force=true",
    );
    const body = JSON.parse(
      statusApplyBody(t, {
        phase: "Complete",
        bytesDone: 1,
        bytesPerSecond: 0,
        filesDone: 1,
        startedAt: "s",
        updatedAt: "u",
        progress: "100% 1B",
      }),
    );
    assert.deepEqual(Object.keys(body.status), ["download"]);
    assert.equal(body.kind, "MLModel");
  });
});

describe("bounded parallelism", () => {
  it("stops new starts and aborts the ones in flight at the first failure, then throws it", async () => {
    const started: number[] = [];
    let sawAbort = false;
    const work = (n: number, signal: AbortSignal) => {
      started.push(n);
      if (n === 1) return Promise.reject(new Error("item 1 failed"));
      return new Promise<number>((_, reject) => {
        signal.addEventListener("abort", () => {
          sawAbort = true;
          reject(new Error("aborted"));
        });
      });
    };
    await assert.rejects(mapBounded([2, 1, 3, 4], 2, new AbortController().signal, work), /item 1 failed/);
    assert.deepEqual(started, [2, 1]);
    assert.equal(sawAbort, true);
  });

  it("keeps at most `limit` running and returns results in order", async () => {
    let running = 0;
    let most = 0;
    const results = await mapBounded([1, 2, 3, 4, 5, 6], 3, new AbortController().signal, async (n) => {
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setImmediate(r));
      running--;
      return n * 10;
    });
    assert.deepEqual(results, [10, 20, 30, 40, 50, 60]);
    assert.equal(most, 3);
  });
});
