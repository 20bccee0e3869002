import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { apiDocIsCurrent, apiDocPath, renderApiDoc } from "../../../scripts/gen-api-docs.ts";
import { mlModelSpecSchema, mlModelStatusSchema } from "../../../src/api/mlmodel.ts";
import { isWarningReason } from "../../../src/operator/status.ts";

const root = join(import.meta.dirname, "..", "..", "..");

describe("docs", () => {
  it("docs/api.md is generated from the current CRD schemas (regenerate: node scripts/gen-api-docs.ts)", () => {
    assert.equal(readFileSync(apiDocPath, "utf8"), renderApiDoc());
    assert.equal(apiDocIsCurrent("/nonexistent/api.md"), false, "a missing file is stale");
  });

  it("docs/api.md documents every MLModel spec and status field", () => {
    const doc = renderApiDoc();
    for (const field of [
      ...Object.keys(mlModelSpecSchema.properties),
      ...Object.keys(mlModelStatusSchema.properties),
    ]) {
      assert.match(doc, new RegExp(`^\\| \`${field}\` \\|`, "m"), field);
    }
    assert.match(doc, /^### MLModel\.spec\.model$/m);
    assert.match(doc, /\| `replicas` \| integer \|.*0 to 1000/);
  });

  it("docs/troubleshooting.md has a section for every reason the operator warns about", () => {
    // Reasons are the CamelCase literals of the operator's status code that it reports as Warnings.
    const sources = readdirSync(join(root, "src", "operator")).filter((f) => f.endsWith(".ts"));
    const literals = new Set(
      sources.flatMap((f) =>
        [...readFileSync(join(root, "src", "operator", f), "utf8").matchAll(/"([A-Z][A-Za-z]+)"/g)].map(
          (m) => m[1]!,
        ),
      ),
    );
    const reasons = [...literals].filter(isWarningReason).sort();
    assert.ok(reasons.includes("DownloadFailed") && reasons.length >= 15, `found ${reasons.join(", ")}`);
    const doc = readFileSync(join(root, "docs", "troubleshooting.md"), "utf8");
    const headings = new Set([...doc.matchAll(/^### (\S+)/gm)].map((m) => m[1]!));
    assert.deepEqual(
      reasons.filter((r) => !headings.has(r)),
      [],
      "each needs a `### Reason` section in docs/troubleshooting.md",
    );
  });
});
