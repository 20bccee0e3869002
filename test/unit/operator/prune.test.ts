import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { promisify } from "node:util";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { contentHash, planModel } from "../../../src/operator/plan.ts";
import { contentToKeep, desiredPruneJob, pruneScript } from "../../../src/operator/prune.ts";
import { model, tfServing } from "./fixtures.ts";

const run = promisify(execFile);
const owner = { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", name: "resnet", uid: "uid-1" };
const rev = (uri: string, revision: number): V1ControllerRevision => ({
  data: { spec: { model: { uri } } },
  revision,
});

describe("pruning model storage", () => {
  const dir = mkdtempSync(join(tmpdir(), "prune-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("the script removes content directories not kept, and nothing else", async () => {
    const base = join(dir, "models");
    const outside = join(dir, "outside");
    mkdirSync(outside);
    writeFileSync(join(outside, "precious"), "x");
    for (const d of ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"]) {
      mkdirSync(join(base, d, "1"), { recursive: true });
      writeFileSync(join(base, d, "1", "model.bin"), "m");
    }
    mkdirSync(join(base, ".partial-dddddddddd"));
    writeFileSync(join(base, "notes.txt"), "n");
    symlinkSync(outside, join(base, "eeeeeeeeee"));
    const { stdout } = await run(process.execPath, ["-e", pruneScript, base, "aaaaaaaaaa", "cccccccccc"]);
    assert.deepEqual(readdirSync(base).sort(), [
      ".partial-dddddddddd",
      "aaaaaaaaaa",
      "cccccccccc",
      "notes.txt",
    ]);
    assert.match(stdout, /removed bbbbbbbbbb/);
    assert.deepEqual(readdirSync(outside), ["precious"], "a link is removed, never followed");
  });

  it("the script accepts a volume with nothing downloaded yet", async () => {
    await run(process.execPath, ["-e", pruneScript, join(dir, "absent"), "aaaaaaaaaa"]);
  });

  const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };

  it("keeps the served content and every kept revision's, not pvc:// or image-only ones", () => {
    const served = { model: { uri: "s3://b/v3", format: "tensorflow" } };
    const keep = contentToKeep(
      [planModel(model(served), tf)],
      [rev("s3://b/v1", 1), rev("pvc://claim/m", 2), rev("s3://b/v3", 3)],
    );
    assert.deepEqual(keep, [contentHash({ model: { uri: "s3://b/v1" } }), contentHash(served)].sort());
  });

  it("a revision recorded with a redacted URI keeps the content of its exact URI", () => {
    const signed = "https://h/m.tgz?X-Amz-Signature=abc";
    const redacted: V1ControllerRevision = {
      data: {
        spec: { model: { uri: "https://h/m.tgz?X-Amz-Signature=REDACTED" } },
        source: { content: contentHash({ model: { uri: signed } }), uriSecret: "resnet-r1-uri" },
      },
      revision: 1,
    };
    // Served again (a rollback), the plan downloads the recorded content, not a hash of the redacted URI.
    const rollback = planModel(
      model({ model: { uri: "https://h/m.tgz?X-Amz-Signature=REDACTED", format: "tensorflow" } }),
      tf,
      { content: contentHash({ model: { uri: signed } }), uriSecret: "resnet-r1-uri" },
    );
    assert.deepEqual(contentToKeep([rollback], [redacted]), [contentHash({ model: { uri: signed } })]);
  });

  it("a Job only for downloaded models, named by its keep list, mounting the model claim", () => {
    const p = planModel(model({ model: { uri: "s3://b/m", format: "tensorflow" } }), tf);
    const job = desiredPruneJob(p, owner, { downloaderImage: "img:1" }, ["aaaaaaaaaa"]);
    assert.deepEqual(job?.spec?.template.spec?.containers[0]?.command?.slice(3), [
      "/mnt/models",
      "aaaaaaaaaa",
    ]);
    assert.equal(job?.spec?.template.spec?.volumes?.[0]?.persistentVolumeClaim?.claimName, "resnet-model");
    assert.notEqual(
      desiredPruneJob(p, owner, { downloaderImage: "img:1" }, ["bbbbbbbbbb"])?.metadata?.name,
      job?.metadata?.name,
    );
    const image = planModel(model({ image: "srv:1", model: { path: "/m" } }), { ref: "custom" });
    assert.equal(desiredPruneJob(image, owner, { downloaderImage: "img:1" }, []), undefined);
  });
});
