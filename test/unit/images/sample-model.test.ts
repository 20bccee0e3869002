/** The sample model's training pod and its output (src/images/sample-model.ts); the pod itself runs in test/e2e/realnode. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import https from "node:https";
import { describe, it } from "node:test";
import { sklearnSampleScript } from "../../../src/images/index.ts";
import {
  curlCommand,
  parseTrainingOutput,
  startModelFileServer,
  trainingPod,
  v2Request,
} from "../../../src/images/sample-model.ts";

describe("the sample model's training pod", () => {
  it("meets the restricted Pod Security level and carries the training script", () => {
    const pod = trainingPod("t", { namespace: "ns", version: 2, broken: true, paddingBytes: 1000 });
    const spec = pod.spec!;
    assert.deepEqual(spec.securityContext, {
      runAsNonRoot: true,
      runAsUser: 1000,
      runAsGroup: 1000,
      seccompProfile: { type: "RuntimeDefault" },
    });
    const c = spec.containers[0]!;
    assert.deepEqual(c.securityContext, { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } });
    assert.equal(c.image, "docker.io/seldonio/mlserver:1.6.1", "the image that will load the model");
    assert.equal(c.env?.[0]?.value, readFileSync(sklearnSampleScript, "utf8"));
    const script = c.command!.at(-1)!;
    assert.match(script, /--version 2 --broken/);
    assert.match(script, /head -c 1000 \/dev\/urandom > \/tmp\/m\/padding\.bin/);
    assert.match(script, /model\.joblib model-settings\.json padding\.bin/);
    assert.equal(spec.automountServiceAccountToken, false);
  });

  it("reads the expected predictions and the archive from the log, whatever else it holds", () => {
    const archive = Buffer.from("fake tgz");
    const log = [
      "some python warning",
      'MLMODEL-SAMPLE-EXPECTED {"inputs": [[1, 2]], "predictions": [2]}',
      `MLMODEL-SAMPLE-ARCHIVE ${archive.toString("base64")}`,
      "",
    ].join("\n");
    assert.deepEqual(parseTrainingOutput(log), { archive, inputs: [[1, 2]], predictions: [2] });
    assert.throws(() => parseTrainingOutput("Traceback: boom"), /printed no model:\nTraceback: boom/);
  });
});

describe("the model file server", () => {
  it("serves over HTTPS with a certificate for its address from a CA of its own, throttled", async () => {
    const server = await startModelFileServer({ host: "127.0.0.1", bytesPerSecond: 20_000 });
    try {
      const body = Buffer.alloc(6_000, 7);
      const url = server.add("m.tgz", body);
      const get = (target: string, ca?: string) =>
        new Promise<{ status: number; bytes: number; chunks: number }>((resolve, reject) => {
          https
            .get(target, { ca }, (res) => {
              let bytes = 0;
              let chunks = 0;
              res.on("data", (c: Buffer) => {
                bytes += c.length;
                chunks++;
              });
              res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes, chunks }));
            })
            .on("error", reject);
        });
      await assert.rejects(get(url), /self-signed|unable to verify|certificate/i, "untrusted without its CA");
      const got = await get(url, server.ca);
      assert.equal(got.status, 200);
      assert.equal(got.bytes, body.length);
      // 20 kB/s is sent as ten 2 kB slices a second: 6 kB arrive in three pieces, not at once.
      assert.equal(got.chunks, 3);
      assert.equal((await get(`${server.url}/other`, server.ca)).status, 404);
      assert.deepEqual(Object.fromEntries(server.requests), { "/m.tgz": 1, "/other": 1 });
    } finally {
      await server.stop();
    }
  });
});

describe("reaching a model from this machine without cluster DNS", () => {
  it("builds a V2 request and a curl command that resolves the status URL's host to the ClusterIP", () => {
    assert.deepEqual(
      JSON.parse(
        v2Request([
          [1, 2],
          [3, 4],
        ]),
      ),
      {
        inputs: [{ name: "input-0", shape: [2, 2], datatype: "FP64", data: [1, 2, 3, 4] }],
      },
    );
    const url = "http://iris.default.svc:8080";
    assert.equal(
      curlCommand(url, { base: "http://10.96.12.34:8080", host: "iris.default.svc:8080" }, "iris", [
        [5.1, 3.5],
      ]),
      `curl -s --resolve iris.default.svc:8080:10.96.12.34 -H 'content-type: application/json' -d '${v2Request([[5.1, 3.5]])}' http://iris.default.svc:8080/v2/models/iris/infer`,
    );
  });
});
