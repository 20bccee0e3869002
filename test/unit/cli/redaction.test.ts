// What the CLI prints (views, the operator's log lines, the downloader's usage errors) shows a
// model URI with credentials in it redacted.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import pino from "pino";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { usageLine } from "../../../src/cli/commands/download.ts";
import { withExactUri } from "../../../src/cli/commands/rollback.ts";
import { redacting } from "../../../src/cli/log.ts";
import { renderDescribe } from "../../../src/cli/views/describe.ts";
import { forDisplay, redacted } from "../../../src/cli/views/session.ts";
import { renderStatusTable } from "../../../src/cli/views/status.ts";
import { plainStyle } from "../../../src/cli/views/style.ts";
import { ApiError, type KubeClient } from "../../../src/runtime/index.ts";
import { now, readyModel } from "./fixtures.ts";

const canary = "canary5f3e2a1b9c8d7e6f";
const signed = `https://acct.blob.core.windows.net/models/m.onnx?sv=2022-11-02&sp=r&sig=${canary}`;

function leakyModel(): MLModel {
  const m = structuredClone(readyModel);
  m.spec.model.uri = signed;
  m.metadata.annotations = {
    "kubectl.kubernetes.io/last-applied-configuration": JSON.stringify({ spec: { model: { uri: signed } } }),
  };
  // As an operator before redaction wrote it.
  m.status = {
    ...m.status,
    message: `Job x is downloading ${signed}`,
    revision: { current: "a", history: [{ revision: "a", modelURI: signed }] },
  };
  return m;
}

describe("views redact model URIs", () => {
  it("describe, status and -o yaml/json of a model show no credential", () => {
    const model = redacted(leakyModel());
    const text = renderDescribe({ model, children: [], events: [], now, style: plainStyle() });
    assert.match(text, /sig=REDACTED/);
    const table = renderStatusTable([model], { now, style: plainStyle() });
    const json = JSON.stringify(forDisplay(leakyModel()));
    for (const out of [text, table, json]) assert.ok(!out.includes(canary), out);
  });

  it("redacted() leaves objects without credentials as they were", () => {
    assert.deepEqual(redacted(readyModel), readyModel);
  });
});

describe("the operator's log lines", () => {
  it("leave with URIs redacted, as valid JSON", () => {
    const lines: string[] = [];
    const log = pino({ level: "info" }, redacting({ write: (l: string) => lines.push(l) }));
    log.info({ uri: signed, err: new Error(`GET ${signed}: HTTP 403`) }, `reconciling ${signed}`);
    assert.equal(lines.length, 1);
    assert.ok(!lines[0]!.includes(canary), lines[0]);
    const record = JSON.parse(lines[0]!) as { msg: string; uri: string };
    assert.match(record.msg, /sig=REDACTED/);
  });
});

describe("mlmodel download's usage error", () => {
  it("shows the URI of --uri or of --uri-from-env redacted", () => {
    const err = new Error("Unknown option '--bogus'");
    assert.ok(!usageLine(["--uri", signed, "--bogus"], err).includes(canary));
    const line = usageLine(["--uri-from-env", "MLMODEL_URI", "--bogus"], err, { MLMODEL_URI: signed });
    assert.match(
      line,
      /^https:\/\/acct\.blob\.core\.windows\.net\/models\/m\.onnx\?sv=REDACTED&sp=REDACTED&sig=REDACTED: InvalidArgument/,
    );
  });
});

describe("mlmodel rollback of a revision recorded with a redacted URI", () => {
  const target: V1ControllerRevision = {
    data: {
      spec: { model: { uri: "https://h/m?sig=REDACTED" } },
      source: { content: "0123456789", uriSecret: "resnet-abc-uri" },
    },
    revision: 3,
  };
  const spec = { model: { uri: "https://h/m?sig=REDACTED" } };
  const clientAnswering = (get: () => Promise<unknown>) => ({ get }) as unknown as KubeClient;

  it("writes back the exact URI, read from the revision's Secret", async () => {
    const data = { uri: Buffer.from(signed).toString("base64") };
    const exact = await withExactUri(
      clientAnswering(async () => ({ data })),
      "ml",
      target,
      spec,
    );
    assert.equal(exact.model.uri, signed);
  });

  it("says so when the user may not read that Secret, or when it is gone", async () => {
    const forbidden = clientAnswering(async () => {
      throw new ApiError(403, "forbidden");
    });
    await assert.rejects(
      withExactUri(forbidden, "ml", target, spec),
      /kept in Secret resnet-abc-uri, which you may not read; apply the spec again with the full URI/,
    );
    await assert.rejects(
      withExactUri(
        clientAnswering(async () => undefined),
        "ml",
        target,
        spec,
      ),
      /kept in Secret resnet-abc-uri, which is gone/,
    );
  });

  it("leaves a revision with a plain URI as recorded", async () => {
    const plain: V1ControllerRevision = { data: { spec: { model: { uri: "s3://b/m" } } }, revision: 1 };
    const same = { model: { uri: "s3://b/m" } };
    assert.equal(
      await withExactUri(
        clientAnswering(async () => assert.fail("no read")),
        "ml",
        plain,
        same,
      ),
      same,
    );
  });
});
