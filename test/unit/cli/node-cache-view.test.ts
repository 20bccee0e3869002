/** How `mlmodel describe` shows the node cache: per node what is cached, its size, and the bytes from origin vs peers. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { renderDescribe } from "../../../src/cli/views/describe.ts";
import { plainStyle } from "../../../src/cli/views/style.ts";
import { now, readyModel } from "./fixtures.ts";

const cached: MLModel = {
  ...readyModel,
  status: {
    ...readyModel.status,
    storageMode: "NodeCache",
    cache: {
      key: "0123456789abcdef0123",
      url: "http://10.96.0.20:8375",
      nodes: [
        { node: "node-a", size: 1536 * 1024 * 1024, files: 3, source: "Origin", inUse: true },
        { node: "node-b", size: 1536 * 1024 * 1024, files: 3, source: "Peer", peer: "node-a", inUse: false },
      ],
      nodesCached: 2,
      bytesFromOrigin: 1536 * 1024 * 1024,
      bytesFromPeers: 1536 * 1024 * 1024,
    },
  },
};

const render = (model: MLModel) =>
  renderDescribe({ model, children: [], events: [], now, style: plainStyle() });

describe("describe: the node cache", () => {
  it("shows the mode, the key, and per node the size, where it came from and whether a pod serves it", () => {
    const text = render(cached);
    const storage = text.slice(text.indexOf("Storage:"), text.indexOf("Children:"));
    for (const line of [
      /Mode:\s+NodeCache/,
      /Key:\s+0123456789abcdef0123/,
      /Cached on:\s+2 node\(s\); 1\.5 GiB from the origin, 1\.5 GiB from peers/,
      /NODE\s+SIZE\s+FROM\s+IN USE/,
      /node-a\s+1\.5 GiB\s+origin\s+yes/,
      /node-b\s+1\.5 GiB\s+peer node-a\s+no/,
    ])
      assert.match(storage, line);
  });

  it("says Claim for a model on a claim, and nothing without a node cache", () => {
    const claim = render({ ...readyModel, status: { ...readyModel.status, storageMode: "Claim" } });
    assert.match(claim, /Storage:\n\s+Mode:\s+Claim\n/);
    assert.doesNotMatch(claim, /Cached on/);
    assert.doesNotMatch(render(readyModel), /Storage:/);
  });
});
