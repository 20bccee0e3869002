import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  commandAnnotations,
  promoteAnnotation,
  readCommands,
  staleCommands,
} from "../../../../src/operator/canary/commands.ts";

const { promote, resume } = commandAnnotations;

describe("canary commands (annotations naming the revision)", () => {
  it("reads promote and resume, ignoring a malformed resume", () => {
    assert.deepEqual(readCommands(undefined), {});
    assert.deepEqual(readCommands({ [promote]: "abc123", [resume]: "abc123:1" }), {
      promote: "abc123",
      resume: { revision: "abc123", step: 1 },
    });
    assert.deepEqual(readCommands({ [resume]: "abc123/one" }), {});
  });

  // [what, annotations, spec revision, stable revision, current step, stale keys]
  const cases: [string, Record<string, string>, string, string | undefined, number | undefined, string[]][] =
    [
      ["a promote of the spec's revision is kept", { [promote]: "new" }, "new", "old", 0, []],
      ["a promote of another revision is stale", { [promote]: "older" }, "new", "old", 0, [promote]],
      ["a promote of the stable revision is done", { [promote]: "new" }, "new", "new", undefined, [promote]],
      ["a resume of the current step is kept", { [resume]: "new:1" }, "new", "old", 1, []],
      ["a resume of a step ahead is kept", { [resume]: "new:2" }, "new", "old", 1, []],
      ["a resume of a past step is stale", { [resume]: "new:0" }, "new", "old", 1, [resume]],
      ["a resume of another revision is stale", { [resume]: "other:1" }, "new", "old", 1, [resume]],
      ["a malformed resume is stale", { [resume]: "nonsense" }, "new", "old", 1, [resume]],
      ["unrelated annotations are never touched", { "example.com/x": "new" }, "new", "old", 0, []],
    ];
  for (const [what, annotations, spec, stable, step, stale] of cases) {
    it(what, () => assert.deepEqual(staleCommands(annotations, spec, stable, step), stale));
  }

  it("builds the annotation mlmodel promote writes, or says why not", () => {
    const paused = { revision: "new", phase: "Paused" as const, step: 1 };
    assert.deepEqual(promoteAnnotation(paused), { key: promote, value: "new" });
    assert.deepEqual(promoteAnnotation(paused, { step: true }), { key: resume, value: "new:1" });
    assert.match(
      (promoteAnnotation({ ...paused, phase: "Progressing" }, { step: true }) as { error: string }).error,
      /is Progressing, not paused: --step ends a pause/,
    );
    assert.match(
      (promoteAnnotation(undefined) as { error: string }).error,
      /no canary is running; nothing to promote/,
    );
    assert.match(
      (promoteAnnotation({ revision: "new", phase: "Aborted" }) as { error: string }).error,
      /the last canary, of revision new, is Aborted/,
    );
  });
});
