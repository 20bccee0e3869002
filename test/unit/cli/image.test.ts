import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { run } from "../../../src/cli/commands/image.ts";
import { CliError } from "../../../src/cli/errors.ts";

const usageError = (pattern: RegExp) => (err: unknown) => {
  assert.ok(err instanceof CliError, String(err));
  assert.equal(err.exitCode, 2);
  assert.match(err.message, pattern);
  return true;
};

describe("mlmodel image", () => {
  it("build needs an image name or --all", async () => {
    await assert.rejects(
      run(["build"]),
      usageError(/name an image to build \(mlmodel, mlserver\) or pass --all/),
    );
  });

  it("refuses an unknown image before building anything", async () => {
    await assert.rejects(
      run(["build", "triton"]),
      usageError(/no image named "triton"; the images are: mlmodel, mlserver/),
    );
  });

  it("refuses an unknown action and an unknown flag", async () => {
    await assert.rejects(run(["push"]), usageError(/unknown action "push"/));
    await assert.rejects(run(["build", "--tag", "x"]), usageError(/Unknown option '--tag'/));
  });
});
