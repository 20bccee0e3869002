// The flags naming the node's agent, and what `mlmodel download --cache` reports when the node cache answered: no origin bytes, and a
// message saying where the model is, in the fields the CRD's status.download already has.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { fromNodeCacheStatus } from "../../../src/downloader/cache-upload.ts";
import { downloaderStatusFields } from "../../../src/downloader/contract.ts";
import { Progress } from "../../../src/downloader/progress.ts";
import { agentFlagProblem } from "../../../src/nodecache/client.ts";
import { cacheKey } from "../../../src/nodecache/contract.ts";

describe("fromNodeCacheStatus", () => {
  it("says the bytes came from the node cache, 0 from the origin, with the downloader's fields only", () => {
    const progress = new Progress(() => Date.parse("2026-01-01T00:00:00Z"));
    progress.setFiles([{ path: "a", size: 5 }]);
    progress.setPhase("Complete");
    const manifest = {
      key: "k1",
      uri: "s3://b/m",
      files: [{ path: "a", size: 3 << 20, sha256: "0".repeat(64) }],
      size: 3 << 20,
    };
    const s = fromNodeCacheStatus(progress.snapshot(), manifest);
    assert.equal(s.phase, "Complete");
    assert.equal(s.bytesDone, 0);
    assert.equal(s.bytesTotal, undefined);
    assert.equal(s.progress, "node cache 3.0Mi");
    assert.equal(s.message, "copied from node cache: entry k1, 1 file(s), 3.0Mi, 0 bytes from the origin");
    for (const field of Object.keys(s))
      assert.ok((downloaderStatusFields as readonly string[]).includes(field), field);
  });
});

describe("agentFlagProblem", () => {
  it("names the flag, the value and what is right", () => {
    assert.equal(agentFlagProblem("--cache", "http://mlmodel-node-cache.ns:8375", "url"), undefined);
    assert.equal(agentFlagProblem("--key", cacheKey("s3://b/m", undefined), "key"), undefined);
    assert.match(
      agentFlagProblem("--cache", "https://agent:8375", "url") ?? "",
      /^--cache "https:\/\/agent:8375" is not an http:\/\/ URL of the node cache agent, e.g. http:\/\//,
    );
    assert.match(
      agentFlagProblem("--cache-key", "../etc", "key") ?? "",
      /^--cache-key "\.\.\/etc" is not a cache key \(lowercase letters, digits and "-"\)$/,
    );
  });
});
