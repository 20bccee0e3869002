import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CanaryStatus } from "../../../../src/api/mlmodel.ts";
import {
  canaryToken,
  commandAnnotations,
  commandsChangedPredicate,
  promoteAnnotation,
  readCommands,
  rollbackPromoteAnnotation,
} from "../../../../src/operator/canary/commands.ts";
import type { KubeObject } from "../../../../src/runtime/index.ts";

const { promote, resume } = commandAnnotations;
const startedAt = "2026-05-01T12:00:00.000Z";
const token = String(Date.parse(startedAt));
const running: CanaryStatus = { revision: "new", phase: "Paused", step: 1, startedAt };

describe("canary commands (annotations naming one canary)", () => {
  it("reads a promote and a resume meant for the running canary", () => {
    assert.deepEqual(readCommands(undefined, running, 3), {});
    assert.deepEqual(readCommands({ [promote]: `new@${token}`, [resume]: `new@${token}:1` }, running, 3), {
      promote: "new",
      resume: { revision: "new", step: 1 },
    });
  });

  // [what, annotations] that must be inert for `running` at generation 3
  const inert: [string, Record<string, string>][] = [
    ["a promote of another revision", { [promote]: `older@${token}` }],
    ["a promote of an earlier canary of the same revision", { [promote]: "new@1000" }],
    ["a promote naming the revision alone", { [promote]: "new" }],
    ["a rollback's promote of an older generation", { [promote]: "new@g2" }],
    ["a resume of an earlier canary", { [resume]: "new@1000:1" }],
    ["a resume without its canary", { [resume]: "new:1" }],
    ["a malformed resume", { [resume]: "nonsense" }],
    ["unrelated annotations", { "example.com/x": "new" }],
  ];
  for (const [what, annotations] of inert) {
    it(`ignores ${what}`, () => assert.deepEqual(readCommands(annotations, running, 3), {}));
  }

  it("reads a rollback's promote while the spec is at the generation it names, canary or not", () => {
    assert.deepEqual(readCommands({ [promote]: "old@g4" }, running, 4), { promote: "old" });
    assert.deepEqual(readCommands({ [promote]: "old@g4" }, undefined, 4), { promote: "old" });
    assert.deepEqual(readCommands({ [promote]: "old@g4" }, undefined, 5), {}, "a later edit: inert");
    assert.deepEqual(rollbackPromoteAnnotation("old", 4), { key: promote, value: "old@g4" });
  });

  it("names a canary by its start time, so a later canary of the same revision is another", () => {
    assert.equal(canaryToken(running), token);
    assert.notEqual(canaryToken({ ...running, startedAt: "2026-05-02T12:00:00Z" }), token);
    assert.equal(canaryToken({ revision: "new" }), undefined);
  });

  it("builds the annotation mlmodel promote writes, or says why not", () => {
    assert.deepEqual(promoteAnnotation(running), { key: promote, value: `new@${token}` });
    assert.deepEqual(promoteAnnotation(running, { step: true }), { key: resume, value: `new@${token}:1` });
    assert.match(
      (promoteAnnotation({ ...running, phase: "Progressing" }, { step: true }) as { error: string }).error,
      /is Progressing, not paused: --step ends a pause/,
    );
    assert.match(
      (promoteAnnotation(undefined) as { error: string }).error,
      /no canary is running; nothing to promote/,
    );
    assert.match(
      (promoteAnnotation({ revision: "new", phase: "Aborted", startedAt }) as { error: string }).error,
      /the last canary, of revision new, is Aborted/,
    );
  });

  it("wakes the operator for a command, not for other annotation or status changes", () => {
    const model = (annotations: Record<string, string>, generation = 1): KubeObject => ({
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name: "m", annotations, generation },
    });
    const changed = commandsChangedPredicate();
    const update = (old: KubeObject, object: KubeObject) =>
      changed({ type: "update", old, object, initial: false });
    assert.equal(update(model({}), model({ [promote]: `new@${token}` })), true);
    assert.equal(update(model({ [resume]: "a" }), model({ [resume]: "b" })), true);
    assert.equal(update(model({}), model({ "example.com/x": "y" })), false);
    assert.equal(update(model({}), model({}, 2)), false, "a spec change is the generation predicate's");
  });
});
