// The operator's log as `mlmodel start` and `mlmodel operator --log-format text` print it: short
// human lines, no stack trace for an error the runtime expects, the stack kept for any other.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatHuman, humanLogger, isExpectedError } from "../../../src/cli/log.ts";
import { ApiError, TerminalError, WatchInactivityError } from "../../../src/runtime/index.ts";

function capture(level = "debug") {
  const lines: string[] = [];
  const log = humanLogger(level, { write: (text: string) => lines.push(text) });
  return { log, lines };
}

const expired = () =>
  new ApiError(410, "watch /api/v1/pods: 410 Expired too old resource version: 123 (456)", {
    reason: "Expired",
    verb: "watch",
    path: "/api/v1/pods",
  });

describe("human log lines", () => {
  it("are `HH:MM:SS LEVEL message model=ns/name key=value`, without pid, hostname or reconcileId", () => {
    const { log, lines } = capture("info");
    // As the runtime's controller binds its reconcile logger.
    const reconcile = log.child({
      controller: "mlmodel",
      kind: "MLModel",
      namespace: "default",
      name: "iris",
      reconcileId: "r1",
    });
    reconcile.info({ kind: "Deployment", name: "iris-predictor" }, "creating child");
    reconcile.info("reconciled");
    assert.equal(lines.length, 2);
    const [child, done] = lines as [string, string];
    assert.match(child, /^\d\d:\d\d:\d\d INFO {2}creating child model=default\/iris /);
    assert.match(child, / kind=Deployment( |\n)/, "a record's own kind is shown");
    assert.match(child, / name=iris-predictor( |\n)/, "a record's own name is shown");
    assert.match(
      done,
      /^\d\d:\d\d:\d\d INFO {2}reconciled model=default\/iris\n$/,
      "the bound kind is not repeated",
    );
    for (const noise of ["pid", "hostname", "reconcileId", "r1", "controller", "MLModel", "@bound"]) {
      assert.ok(!child.includes(noise) && !done.includes(noise), `${noise} left out: ${child}${done}`);
    }
  });

  it("show an expected error by its message alone, with no stack trace, at any level", () => {
    const { log, lines } = capture();
    log.debug({ err: expired(), cache: "Pod" }, "watch expired (410: too old resource version); relisting");
    log.warn({ err: new ApiError(409, "conflict") }, "write conflicted");
    log.error({ err: new TerminalError("spec.model.uri is empty") }, "terminal error");
    assert.equal(lines.length, 3);
    assert.match(lines[0]!, /^\S+ DEBUG watch expired .* err="watch \/api\/v1\/pods: 410 Expired/);
    for (const line of lines) {
      assert.equal(line.split("\n").length, 2, `one line: ${line}`);
      assert.ok(!/\bat\s/.test(line), `no stack frame: ${line}`);
    }
  });

  it("keep an unexpected error's stack at error level, indented under the line", () => {
    const { log, lines } = capture();
    const bug = new TypeError("Cannot read properties of undefined (reading 'spec')");
    log.error({ err: bug }, "reconcile failed");
    const [head, ...stack] = lines[0]!.trimEnd().split("\n");
    assert.match(head!, /ERROR reconcile failed err="Cannot read properties/);
    assert.ok(stack.length >= 2, `stack printed: ${lines[0]}`);
    assert.match(stack[0]!, /^ {4}TypeError: Cannot read properties/);
    assert.match(stack[1]!, /^ {4}at /);
  });

  it("classify as expected what the runtime handles: API answers, silent watches, unreachable servers", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6443"), { code: "ECONNREFUSED" });
    for (const err of [expired(), new WatchInactivityError(1000), refused, new TerminalError("bad spec")]) {
      assert.equal(isExpectedError(err), true, String(err));
    }
    for (const err of [new TypeError("x"), new Error("y"), "a string"]) {
      assert.equal(isExpectedError(err), false, String(err));
    }
  });

  it("redact a model URI's credentials", () => {
    const { log, lines } = capture("info");
    log.info({ uri: "https://bucket.example/m.onnx?sig=secret123" }, "downloading");
    assert.ok(!lines[0]!.includes("secret123"), lines[0]);
  });

  it("format a record that is not a controller's without a model field", () => {
    const line = formatHuman(
      JSON.stringify({ level: 40, time: Date.now(), msg: "caches synced", caches: ["Pod"] }),
    );
    assert.match(line, /^\d\d:\d\d:\d\d WARN {2}caches synced caches=\["Pod"\]$/);
  });
});
