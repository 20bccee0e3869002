import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { describe, it } from "node:test";
import type * as PromClient from "prom-client";
import { buildEnv, buildInfoMetric, registerBuildInfo } from "../../../src/operator/build-info.ts";

const Registry = createRequire(import.meta.url)("prom-client/lib/registry.js") as typeof PromClient.Registry;

async function exposition(env: NodeJS.ProcessEnv): Promise<string[]> {
  const registry = new Registry();
  registerBuildInfo(registry, env);
  return (await registry.metrics()).split("\n").filter((line) => line.startsWith(buildInfoMetric));
}

describe("the operator's build info", () => {
  it("names the image's build in its label", async () => {
    assert.deepEqual(await exposition({ [buildEnv]: "b" }), [`${buildInfoMetric}{build="b"} 1`]);
  });

  it("has an empty build label when the image sets none", async () => {
    assert.deepEqual(await exposition({}), [`${buildInfoMetric}{build=""} 1`]);
  });
});
