// test-needs: real-node, images
/**
 * A runtime that cannot load its model, on a real node: status names it ModelLoadFailed, in the
 * runtime's own words (its previous log's relevant lines, or its termination message), not as a
 * generic crash loop; where a ready revision exists, the failed one is rolled back. MLServer
 * with a model file it cannot unpickle, with a model file that is missing, with a wrong
 * model-settings implementation; and a custom image that exits with an error message.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { recipeFor } from "../../../src/images/index.ts";
import type { SampleModel } from "../../../src/images/sample-model.ts";
import { runtimeWordsMaxChars } from "../../../src/operator/pods.ts";
import {
  applyCaSecret,
  applyModel,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
  waitForModel,
} from "./fixture.ts";

const condition = (m: MLModel, type: string) => m.status?.conditions?.find((c) => c.type === type);

/**
 * The sample's archive with its model-settings.json changed by `edit`, published at `/<file>`:
 * the same model.joblib, settings MLServer reads at start.
 */
function publishEdited(
  bed: RealNodeBed,
  sample: SampleModel,
  file: string,
  edit: (settings: Record<string, unknown>) => void,
): { uri: string; sha256: string } {
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-load-"));
  try {
    writeFileSync(join(dir, "in.tgz"), sample.archive);
    execFileSync("tar", ["-xzf", "in.tgz", "model.joblib", "model-settings.json"], { cwd: dir });
    const settings = JSON.parse(readFileSync(join(dir, "model-settings.json"), "utf8"));
    edit(settings);
    writeFileSync(join(dir, "model-settings.json"), JSON.stringify(settings));
    execFileSync("tar", ["-czf", "out.tgz", "model.joblib", "model-settings.json"], { cwd: dir });
    const archive = readFileSync(join(dir, "out.tgz"));
    return {
      uri: bed.files.add(file, archive),
      sha256: createHash("sha256").update(archive).digest("hex"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Waits for Failed/ModelLoadFailed and checks what every load failure says. */
async function loadFailed(bed: RealNodeBed, name: string): Promise<string> {
  const failed = await waitForModel(
    bed,
    name,
    "Failed/ModelLoadFailed",
    (m) => m.status?.reason === "ModelLoadFailed",
  );
  assert.equal(failed.status?.phase, "Failed");
  const serving = condition(failed, "ServingReady");
  assert.equal(serving?.reason, "ModelLoadFailed");
  const message = serving?.message ?? "";
  assert.equal(failed.status?.message, message);
  assert.match(
    message,
    /^the runtime cannot load the model: container server of pod \S+ stops before it serves/,
  );
  assert.match(message, /; the whole log: `kubectl logs \S+ -c server --previous`$/);
  const quoted = /, saying: (.*); the whole log/.exec(message)?.[1] ?? "";
  assert.ok(quoted.length > 0, `the runtime's own words are quoted: ${message}`);
  assert.ok(quoted.length <= runtimeWordsMaxChars, `bounded: ${quoted.length} characters`);
  assert.doesNotMatch(quoted, /(?:^|\| )File "|Traceback \(most recent/, "no traceback frames");
  // Its crash loop would only take the node's CPU from the models still loading.
  await bed.admin.delete(mlModelKind, { namespace: bed.ns.name, name });
  return message;
}

describe("a model the runtime cannot load on a real node: ModelLoadFailed in its own words", () => {
  let bed: RealNodeBed;
  let sample: SampleModel & { uri: string };
  let broken: SampleModel & { uri: string };

  before(async () => {
    bed = await realNodeBed("rn-loadfail");
    [sample, broken] = await Promise.all([
      // Named as the model that serves it: MLServer's readiness is asked for the MLModel's name.
      publishSample(bed, "rollback.tgz", { name: "rollback" }),
      publishSample(bed, "iris-broken.tgz", { broken: true }),
    ]);
    await applyCaSecret(bed);
  });
  after(() => removeRealNodeBed(bed));

  // First and alone: a model that must become Ready, before the crash loops below share the node.
  it("a new revision that cannot be loaded is rolled back to the ready one, and says why", async () => {
    await applyModel(bed, sklearnModel("rollback", sample));
    const ready = await waitForModel(bed, "rollback", "Ready", (m) => m.status?.phase === "Ready");
    await bed.admin.patch(
      mlModelKind,
      { namespace: bed.ns.name, name: "rollback" },
      { spec: { model: { uri: broken.uri, sha256: broken.sha256 } } },
      "merge",
    );
    const rolledBack = await waitForModel(
      bed,
      "rollback",
      "Ready, rolled back",
      (m) => m.status?.phase === "Ready" && condition(m, "RolledBack")?.status === "True",
    );
    assert.equal(condition(rolledBack, "RolledBack")?.reason, "ModelLoadFailed");
    assert.equal(rolledBack.status?.revision?.failed?.reason, "ModelLoadFailed");
    assert.match(rolledBack.status?.revision?.failed?.message ?? "", /the runtime cannot load the model/);
    assert.equal(rolledBack.status?.revision?.current, ready.status?.revision?.current);
  });

  describe("each failure, side by side", { concurrency: true }, () => {
    it("a model file MLServer cannot unpickle: MLServer exits 0, and its log says why", async () => {
      await applyModel(bed, sklearnModel("unpickle", broken));
      const message = await loadFailed(bed, "unpickle");
      assert.match(message, /last exit code 0\)/, "MLServer ends with code 0 on a failed load");
      assert.match(message, /load/i, message);
      console.log(`# unpickle: ${message}`);
    });

    it("a model file that is missing: the path MLServer looked for is named", async () => {
      const missing = publishEdited(bed, sample, "iris-missing.tgz", (s) => {
        (s.parameters as Record<string, unknown>).uri = "./model-v2.joblib";
      });
      await applyModel(bed, sklearnModel("missing", missing));
      const message = await loadFailed(bed, "missing");
      assert.match(message, /model-v2\.joblib/, message);
      console.log(`# missing: ${message}`);
    });

    it("a wrong model-settings implementation: the name MLServer could not import is named", async () => {
      const wrong = publishEdited(bed, sample, "iris-impl.tgz", (s) => {
        s.implementation = "mlserver_sklearn.SKLearnModle";
      });
      await applyModel(bed, sklearnModel("impl", wrong));
      const message = await loadFailed(bed, "impl");
      assert.match(message, /SKLearnModle/, message);
      console.log(`# impl: ${message}`);
    });

    it("a custom image that exits with an error message, in its log and in its termination message", async () => {
      const custom = (name: string, script: string): MLModel => ({
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name },
        spec: {
          image: recipeFor("mlserver").ref,
          command: ["python3", "-c", script],
          model: { path: "/models/m" },
        },
      });
      // A secret in the words is redacted before status quotes it.
      const signed = "https://weights.example.com/m.bin?X-Amz-Signature=0123456789abcdef";
      await Promise.all([
        applyModel(
          bed,
          custom(
            "custom-log",
            `import sys; print("starting", flush=True); sys.exit("cannot open ${signed}: unsupported format version 7")`,
          ),
        ),
        applyModel(
          bed,
          custom(
            "custom-term",
            `import sys; open("/dev/termination-log", "w").write("weights checksum mismatch"); sys.exit(3)`,
          ),
        ),
      ]);
      const [fromLog, fromTermination] = await Promise.all([
        loadFailed(bed, "custom-log"),
        loadFailed(bed, "custom-term"),
      ]);
      assert.match(fromLog, /last exit code 1\)/);
      assert.match(fromLog, /unsupported format version 7/);
      assert.match(fromLog, /X-Amz-Signature=REDACTED/);
      assert.doesNotMatch(fromLog, /0123456789abcdef/);
      assert.match(fromTermination, /last exit code 3\), saying: weights checksum mismatch;/);
    });
  });
});
