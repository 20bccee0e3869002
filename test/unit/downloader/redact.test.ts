import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  redactedMarker,
  redactText,
  redactUri,
  uriHasSecrets,
  uriScrubber,
  userinfoPattern,
} from "../../../src/downloader/redact.ts";

// Values shaped like the real ones (made up): the signature parts are what must never show.
const amzCredential = "AKIAIOSFODNN7EXAMPLE%2F20250101%2Fus-east-1%2Fs3%2Faws4_request";
const amzSignature = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
const amzToken = "IQoJb3JpZ2luX2VjEJr%2F%2F%2F%2F%2FwEaCXVzLWVhc3QtMSJHMEUCIQD";
const googSignature = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809";
const sasSig = "tY0W6Ybp%2BmnkLtb%2Fg8l%2BsnxCbS3q3YvQ2U0eJxhs%3D";
const hfToken = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtbG1vZGVsIn0.c2lnbmF0dXJlLXBhcnQ";

// [what, uri, shown]
const table: [string, string, string][] = [
  ["plain https", "https://models.example.com/resnet/m.tgz", "https://models.example.com/resnet/m.tgz"],
  ["s3 prefix", "s3://bucket/models/resnet/", "s3://bucket/models/resnet/"],
  [
    "hf with a revision (an @ after the host is no userinfo)",
    "hf://org/repo@v1.0/onnx",
    "hf://org/repo@v1.0/onnx",
  ],
  ["pvc", "pvc://claim/models/resnet", "pvc://claim/models/resnet"],
  ["user and password", "https://user:pass@host.example/m.tgz", "https://REDACTED@host.example/m.tgz"],
  ["user only", "https://AKIAEXAMPLE@host/m", "https://REDACTED@host/m"],
  ["encoded @ in the password", "https://user%40corp:p%40ss@host/m", "https://REDACTED@host/m"],
  ["two @: userinfo ends at the last", "https://a@b@host/m", "https://REDACTED@host/m"],
  ["userinfo, no path", "https://u:p@host", "https://REDACTED@host"],
  ["hf token as userinfo", `hf://${hfToken}@org/repo`, "hf://REDACTED@org/repo"],
  ["hf token in a path", `https://host/${hfToken}/m.bin`, "https://host/REDACTED/m.bin"],
  ["JWT in a path", `https://host/dl/${jwt}/m.bin`, "https://host/dl/REDACTED/m.bin"],
  [
    "pre-signed S3 (SigV4, with a session token)",
    `https://bucket.s3.us-east-1.amazonaws.com/m.tgz?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=${amzCredential}&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token=${amzToken}&X-Amz-Signature=${amzSignature}`,
    "https://bucket.s3.us-east-1.amazonaws.com/m.tgz?X-Amz-Algorithm=REDACTED&X-Amz-Credential=REDACTED&X-Amz-Date=REDACTED&X-Amz-Expires=REDACTED&X-Amz-SignedHeaders=REDACTED&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED",
  ],
  [
    "GCS signed URL (V4)",
    `https://storage.googleapis.com/bucket/m.tgz?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p.iam.gserviceaccount.com%2F20250101%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20250101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature=${googSignature}`,
    "https://storage.googleapis.com/bucket/m.tgz?X-Goog-Algorithm=REDACTED&X-Goog-Credential=REDACTED&X-Goog-Date=REDACTED&X-Goog-Expires=REDACTED&X-Goog-SignedHeaders=REDACTED&X-Goog-Signature=REDACTED",
  ],
  [
    "Azure SAS",
    `https://acct.blob.core.windows.net/models/m.onnx?sv=2022-11-02&ss=b&srt=o&sp=r&se=2025-01-01T00:00:00Z&st=2024-12-31T00:00:00Z&spr=https&sig=${sasSig}`,
    "https://acct.blob.core.windows.net/models/m.onnx?sv=REDACTED&ss=REDACTED&srt=REDACTED&sp=REDACTED&se=REDACTED&st=REDACTED&spr=REDACTED&sig=REDACTED",
  ],
  ["token parameter", "https://host/m.bin?token=abc123", "https://host/m.bin?token=REDACTED"],
  [
    "access_token among others",
    "https://host/m?a=1&access_token=xyz",
    "https://host/m?a=REDACTED&access_token=REDACTED",
  ],
  [
    "uppercase keys",
    "https://host/m?X-AMZ-SIGNATURE=abc&SIG=def",
    "https://host/m?X-AMZ-SIGNATURE=REDACTED&SIG=REDACTED",
  ],
  ["repeated parameter", "https://host/m?sig=a&sig=b", "https://host/m?sig=REDACTED&sig=REDACTED"],
  ["encoded = and & inside a value", "https://host/m?sig=a%3Db%26c", "https://host/m?sig=REDACTED"],
  ["bare query part", "https://host/m?s3cr3tT0ken", "https://host/m?REDACTED"],
  ["empty parts and an empty value", "https://host/m?&a=&", "https://host/m?&a=REDACTED&"],
  ["empty query", "https://host/m?", "https://host/m?"],
  [
    "fragment token",
    "https://host/m#access_token=abc&x=1",
    "https://host/m#access_token=REDACTED&x=REDACTED",
  ],
  ["bare fragment", "https://host/m#abc", "https://host/m#REDACTED"],
  ["a ? inside the fragment is the fragment's", "https://host/m#a=1?b=2", "https://host/m#a=REDACTED"],
  ["query on an s3:// URI", "s3://bucket/key?versionId=abc", "s3://bucket/key?versionId=REDACTED"],
  ["hf with a token parameter", "hf://org/repo?token=hf_x", "hf://org/repo?token=REDACTED"],
  ["not a URI: userinfo without a scheme", "user:pass@host/m.tgz", "REDACTED@host/m.tgz"],
  ["not a URI: a query without a scheme", "bucket/key?sig=abc", "bucket/key?sig=REDACTED"],
  ["not a URI: words", "not a uri", "not a uri"],
  ["empty", "", ""],
  ["no host", "https:///m?sig=x", "https:///m?sig=REDACTED"],
];

describe("redactUri", () => {
  for (const [what, uri, shown] of table) {
    it(`${what}`, () => {
      assert.equal(redactUri(uri), shown);
      assert.equal(redactUri(shown), shown, "redacting twice changes nothing");
      assert.equal(uriHasSecrets(uri), uri !== shown);
    });
  }

  it("no secret of the table survives", () => {
    for (const secret of [
      amzCredential,
      amzSignature,
      amzToken,
      googSignature,
      sasSig,
      hfToken,
      jwt,
      "pass",
    ]) {
      for (const [, uri] of table)
        assert.ok(!redactUri(uri).includes(secret), `${secret} in ${redactUri(uri)}`);
    }
  });

  it("uses one plain, URL-safe marker", () => {
    assert.equal(redactedMarker, "REDACTED");
    assert.equal(encodeURIComponent(redactedMarker), redactedMarker);
  });
});

describe("userinfoPattern", () => {
  it("finds a user name or password before the host, and nothing after it", () => {
    for (const uri of ["https://u:p@h/m", "hf://tok@org/repo", "user:pass@host/m", "s3://k@bucket/x"])
      assert.ok(userinfoPattern.test(uri), uri);
    for (const uri of [
      "hf://org/repo@main",
      "https://h/p@x",
      "https://h/m?a=b@c",
      "https://h#x@y",
      "s3://b/k",
    ])
      assert.ok(!userinfoPattern.test(uri), uri);
  });
});

describe("redactText", () => {
  it("redacts URIs in a sentence and keeps the punctuation around them", () => {
    assert.equal(
      redactText(
        `download of https://h/m.tgz?X-Amz-Signature=${amzSignature}. failed (see https://u:p@h/x).`,
      ),
      "download of https://h/m.tgz?X-Amz-Signature=REDACTED. failed (see https://REDACTED@h/x).",
    );
  });

  it("redacts credential parameters outside a URI, whatever their case", () => {
    assert.equal(
      redactText(`GET /bucket/m?x-amz-signature=${amzSignature}: HTTP 403 (Token=abc)`),
      "GET /bucket/m?x-amz-signature=REDACTED: HTTP 403 (Token=REDACTED)",
    );
    assert.equal(redactText(`sig=${sasSig}&sv=2022`), "sig=REDACTED&sv=2022");
  });

  it("redacts token shapes anywhere", () => {
    assert.equal(redactText(`HF_TOKEN ${hfToken} refused`), "HF_TOKEN REDACTED refused");
    assert.equal(redactText(`bearer ${jwt}`), "bearer REDACTED");
  });

  it("leaves text without credentials alone", () => {
    const text = "Job resnet-dl-0123456789 is downloading s3://bucket/models/resnet/ (12Mi/s) key=value";
    assert.equal(redactText(text), text);
  });

  it("keeps a JSON log line valid JSON", () => {
    const line = JSON.stringify({
      msg: `fetching https://h/m?sig=${sasSig}"quoted"\\ and more`,
      err: `token=abc\n at x`,
    });
    const out = redactText(line);
    assert.doesNotThrow(() => JSON.parse(out), out);
    assert.ok(!out.includes(sasSig) && !out.includes("token=abc"), out);
  });
});

describe("uriScrubber", () => {
  const exact = `https://bucket.s3.amazonaws.com/m.tgz?X-Amz-Credential=${amzCredential}&X-Amz-Signature=${amzSignature}&sp=r`;
  const scrub = uriScrubber(exact);

  it("shows the URI redacted, in the forms it may be echoed", () => {
    assert.equal(scrub(`from ${exact}`), `from ${redactUri(exact)}`);
    assert.equal(scrub(`from ${new URL(exact).href}`), `from ${redactUri(exact)}`);
  });

  it("hides the URI's secret values wherever they appear, as written or decoded", () => {
    const decoded = decodeURIComponent(amzCredential);
    const out = scrub(`the server said: credential ${decoded} and signature ${amzSignature} do not match`);
    assert.equal(out, "the server said: credential REDACTED and signature REDACTED do not match");
  });

  it("leaves short values alone outside the URI (sp=r must not eat every r)", () => {
    assert.equal(scrub("transfer error"), "transfer error");
  });

  it("cleans a URI that is not a URL", () => {
    assert.equal(
      uriScrubber("user:secretpass@host/m")("no scheme: user:secretpass@host/m"),
      "no scheme: REDACTED@host/m",
    );
  });
});

// Canary values: each must show nowhere in what is displayed, whichever function displays it.
const canaries = {
  github: "ghp_CanaryGithubToken0123456789abcdefghij",
  openai: "sk-proj-Canary0penAiKey0123456789abcdef",
  awsKey: "AKIACANARY0123456789",
  dropbox: "c4n4rydr0pb0xk3y",
  matrix: "canaryMatrixValue42",
  encoded: "canaryEncodedQuery42",
  asName: jwt,
  bearer: "canaryBearerOpaque0123456789",
  googSig: "c4n4ry0a1b2c3d4e5f60718293a4b5c6d7e8f9",
};

// [what, exact, shown]: each exact form holds exactly one canary.
const missed: [string, string, string][] = [
  ["a GitHub token in a path", `https://host/${canaries.github}/m.bin`, "https://host/REDACTED/m.bin"],
  ["an sk- API key in a path", `https://host/keys/${canaries.openai}/m`, "https://host/keys/REDACTED/m"],
  ["an AWS access key in a path", `https://host/${canaries.awsKey}/m.bin`, "https://host/REDACTED/m.bin"],
  [
    "a Dropbox shared-link key",
    `https://www.dropbox.com/s/${canaries.dropbox}/model.tgz?dl=1`,
    "https://www.dropbox.com/s/REDACTED/model.tgz?dl=REDACTED",
  ],
  [
    "a Dropbox shared-folder key",
    `https://www.dropbox.com/scl/fi/${canaries.dropbox}/model.tgz`,
    "https://www.dropbox.com/scl/fi/REDACTED/model.tgz",
  ],
  [
    "a ;token= matrix parameter",
    `https://host/models;token=${canaries.matrix}/m.bin`,
    "https://host/models;token=REDACTED/m.bin",
  ],
  [
    "a percent-encoded query in the path",
    `https://host/fetch/m.bin%3Ftoken%3D${canaries.encoded}%26v%3D1`,
    "https://host/fetch/m.bin%3Ftoken%3DREDACTED%26v%3DREDACTED",
  ],
  [
    "a JWT as a parameter name",
    `https://host/m.bin?${canaries.asName}=1`,
    "https://host/m.bin?REDACTED=REDACTED",
  ],
];

describe("redaction of secrets outside the query's values", () => {
  for (const [what, exact, shown] of missed) {
    it(`${what}: redactUri, redactText and uriScrubber hide it`, () => {
      assert.equal(redactUri(exact), shown);
      assert.equal(redactUri(shown), shown, "redacting twice changes nothing");
      assert.ok(uriHasSecrets(exact), "a URI that holds it does not travel in Job args");
      const sentence = `GET ${exact} failed; retrying ${exact}.`;
      // A server may echo the secret alone, outside any URI: the scrubber of the exact URI knows it.
      const bare = Object.values(canaries).filter((c) => exact.includes(c));
      assert.equal(bare.length, 1);
      const echoed = `the server said: ${bare[0]} is not valid`;
      for (const out of [
        redactUri(exact),
        redactText(sentence),
        uriScrubber(exact)(sentence),
        uriScrubber(exact)(echoed),
      ])
        for (const canary of Object.values(canaries)) assert.ok(!out.includes(canary), `${canary} in ${out}`);
    });
  }

  it("hides Authorization and X-Goog-Signature written as headers in text", () => {
    const texts = [
      `request headers: Authorization: Bearer ${canaries.bearer}\nX-Goog-Signature: ${canaries.googSig}`,
      `{"authorization":"Bearer ${canaries.bearer}","x-goog-signature":"${canaries.googSig}"}`,
      `headers { authorization: 'Bearer ${canaries.bearer}', 'X-Goog-Signature': '${canaries.googSig}' }`,
    ];
    for (const text of texts) {
      const out = redactText(text);
      assert.ok(!out.includes(canaries.bearer) && !out.includes(canaries.googSig), out);
      assert.equal(redactText(out), out, "redacting twice changes nothing");
    }
    assert.equal(
      redactText(`Authorization: Bearer ${canaries.bearer}; check HF_TOKEN`),
      "Authorization: Bearer REDACTED; check HF_TOKEN",
    );
    assert.doesNotThrow(() => JSON.parse(redactText(texts[1]!)), "JSON stays JSON");
  });

  it("hides a percent-encoded credential parameter outside a URI", () => {
    const out = redactText(`GET /fetch/m.bin%3Ftoken%3D${canaries.encoded} answered 403`);
    assert.equal(out, "GET /fetch/m.bin%3Ftoken%3DREDACTED answered 403");
  });

  it("keeps ordinary paths, parameter names and words", () => {
    for (const uri of [
      "https://host/sk-learn/models/m.pkl",
      "https://host/models/resnet-50/v2/m.onnx?response-content-type=x",
      "https://github.com/org/repo/releases/download/v1.0/model.tgz",
      "https://host/s/short/m.bin",
    ])
      assert.equal(redactUri(uri).split("?")[0], uri.split("?")[0], uri);
    assert.equal(
      redactUri("https://h/m?X-Amz-SignedHeaders=host&utm_source=a"),
      "https://h/m?X-Amz-SignedHeaders=REDACTED&utm_source=REDACTED",
    );
    const text = "Unexpected token '<' in JSON; the authorization server said: try later";
    assert.equal(redactText(text), text);
  });
});
