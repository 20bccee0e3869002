import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { run } from "../../../src/cli/commands/start.ts";
import { CliError } from "../../../src/cli/errors.ts";

describe("mlmodel start --operator-in-cluster", () => {
  it("needs --real-node, and says so before touching any cluster", async () => {
    await assert.rejects(
      run(["--operator-in-cluster"]),
      (err: unknown) =>
        err instanceof CliError &&
        err.exitCode === 2 &&
        /--operator-in-cluster .* add --real-node/.test(err.message),
    );
  });

  it("is in the help", async () => {
    const lines: string[] = [];
    const log = console.log;
    console.log = (line: string) => lines.push(line);
    try {
      assert.equal(await run(["--help"]), 0);
    } finally {
      console.log = log;
    }
    assert.match(lines.join("\n"), /--operator-in-cluster\n\s+with --real-node: run the operator as a pod/);
  });
});
