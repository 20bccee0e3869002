import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { bashScript, parseCommands, zshScript } from "../../../src/cli/commands/completion.ts";
import { type EventObject, renderDescribe, summarizeChild } from "../../../src/cli/views/describe.ts";
import { formatAge, formatBytes, progressBar } from "../../../src/cli/views/format.ts";
import { outputFormat } from "../../../src/cli/views/session.ts";
import { explainingCondition, problemText, renderStatusTable } from "../../../src/cli/views/status.ts";
import { plainStyle, richStyle, stripAnsi, styleFor } from "../../../src/cli/views/style.ts";
import { downloadingModel, failedModel, newModel, now, readyModel, staleModel } from "./fixtures.ts";

// biome-ignore lint/suspicious/noControlCharactersInRegex: asserting on ANSI escapes.
const ansiEscape = /\x1b\[/;

describe("style: colour only for a person at a terminal", () => {
  it("is rich on a TTY, plain when piped, off with NO_COLOR or TERM=dumb, forced by always", () => {
    assert.equal(styleFor("auto", { isTTY: true }, {}).rich, true);
    assert.equal(styleFor("auto", { isTTY: false }, {}).rich, false);
    assert.equal(styleFor("auto", {}, {}).rich, false);
    assert.equal(styleFor("auto", { isTTY: true }, { NO_COLOR: "1" }).rich, false);
    assert.equal(styleFor("auto", { isTTY: true }, { NO_COLOR: "" }).rich, true, "empty NO_COLOR is unset");
    assert.equal(styleFor("auto", { isTTY: true }, { TERM: "dumb" }).rich, false);
    assert.equal(styleFor("always", { isTTY: false }, { NO_COLOR: "1" }).rich, true);
    assert.equal(styleFor("never", { isTTY: true }, {}).rich, false);
    assert.equal(richStyle().red("x"), "\x1b[31mx\x1b[39m");
    assert.equal(plainStyle().red("x"), "x");
  });
});

describe("formatters", () => {
  it("ages like kubectl", () => {
    const ago = (s: number) => new Date(now.getTime() - s * 1000).toISOString();
    assert.equal(formatAge(ago(42), now), "42s");
    assert.equal(formatAge(ago(310), now), "5m10s");
    assert.equal(formatAge(ago(45 * 60), now), "45m");
    assert.equal(formatAge(ago(3 * 3600 + 600), now), "3h10m");
    assert.equal(formatAge(ago(30 * 3600), now), "30h");
    assert.equal(formatAge(ago(5 * 86400), now), "5d");
    assert.equal(formatAge(undefined, now), "<unknown>");
    assert.equal(formatAge(ago(-5), now), "0s", "clock skew never shows a negative age");
  });

  it("sizes in binary units", () => {
    assert.equal(formatBytes(512), "512 B");
    assert.equal(formatBytes(1536), "1.5 KiB");
    assert.equal(formatBytes(2147483648), "2.0 GiB");
    assert.equal(formatBytes(100 * 1024 * 1024), "100 MiB");
  });

  it("draws the bar in ASCII when plain and in blocks when rich", () => {
    assert.equal(progressBar(0.5, 10, plainStyle()), "[#####.....]");
    assert.equal(progressBar(2, 4, plainStyle()), "[####]", "clamped");
    assert.equal(stripAnsi(progressBar(0.25, 4, richStyle())), "█░░░");
  });
});

describe("status table", () => {
  const lines = (text: string) => text.split("\n");

  it("shows phase, ready/desired, download, URL, age and no problem for a Ready model", () => {
    const [header, row] = lines(renderStatusTable([readyModel], { now, style: plainStyle() }));
    assert.match(header!, /^NAME\s+PHASE\s+READY\s+DOWNLOAD\s+URL\s+AGE\s+PROBLEM$/);
    assert.match(
      row!,
      /^resnet\s+Ready\s+2\/2\s+\[##########\] 100%\s+http:\/\/resnet\.models\.svc:8501\s+5m$/,
    );
    assert.doesNotMatch(row!, ansiEscape);
  });

  it("shows the copies onto nodes and into pods once the origin download is over", () => {
    const copying = {
      ...readyModel,
      status: {
        ...readyModel.status,
        cache: {
          fill: {
            nodes: 2,
            copies: 3,
            bytesDone: 3 * 1024 * 1024,
            bytesTotal: 12 * 1024 * 1024,
            bytesPerSecond: 1,
          },
        },
      },
    };
    const [, row] = lines(renderStatusTable([copying], { now, style: plainStyle() }));
    assert.match(row!, /\] 25% of 12 MiB \(3 copies on 2 nodes\)/);
  });

  it("names the condition that explains a failure, whole when piped", () => {
    const text = renderStatusTable([failedModel], { now, style: plainStyle() });
    assert.match(
      text,
      /bert\s+Failed\s+0\/1\s+failed\s+-\s+5m\s+ModelDownloaded=False DownloadFailed: download of s3:\/\/bucket\/bert failed after 2 attempt\(s\)/,
    );
    assert.match(text, /cannot read s3:\/\/bucket\/bert$/m, "not cut when piped");
    assert.equal(explainingCondition(failedModel)?.type, "ModelDownloaded");
    assert.equal(explainingCondition(readyModel), undefined);
  });

  it("shows download progress, the autoscaler's desired count and a stale generation", () => {
    const text = renderStatusTable([downloadingModel, staleModel, newModel], { now, style: plainStyle() });
    assert.match(text, /llama\s+Downloading\s+0\/2\s+\[#####\.\.\.\.\.\] 50% of 2\.0 GiB/);
    assert.match(text, /stale\s+Ready\*/);
    assert.match(text, /fresh\s+Unknown\s+0\/1\s+-\s+-\s+5m\s+no status yet: is the operator running\?/);
    assert.deepEqual(
      lines(text)
        .slice(1)
        .map((l) => l.split(/\s+/)[0]),
      ["fresh", "llama", "stale"],
      "sorted by name",
    );
  });

  it("colours the phase and cuts the problem to the terminal's width when rich", () => {
    const text = renderStatusTable([readyModel, failedModel], { now, style: richStyle(120) });
    assert.ok(text.includes("\x1b[32mReady\x1b[39m"), "Ready is green");
    assert.ok(text.includes("\x1b[31mFailed\x1b[39m"), "Failed is red");
    for (const line of lines(stripAnsi(text))) assert.ok(line.length <= 120, `${line.length}: ${line}`);
    assert.match(stripAnsi(text), /…$/m);
  });

  it("adds a NAMESPACE column for --all-namespaces", () => {
    const text = renderStatusTable([readyModel], { now, style: plainStyle(), showNamespace: true });
    assert.match(text, /^NAMESPACE\s+NAME\s+PHASE/);
    assert.match(text, /^models\s+resnet\s+Ready/m);
  });

  it("prints nothing for no models (the command says so on stderr)", () => {
    assert.equal(renderStatusTable([], { now, style: plainStyle() }), "");
    assert.equal(problemText(readyModel), "");
  });
});

describe("describe view", () => {
  const children = [
    {
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { name: "bert-dl-99aa88bb77" },
      status: {
        failed: 2,
        conditions: [{ type: "Failed", status: "True", reason: "BackoffLimitExceeded" }],
      },
    },
    {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "bert-7d9f-abcde" },
      status: {
        phase: "Pending",
        containerStatuses: [{ name: "server", state: { waiting: { reason: "CrashLoopBackOff" } } }],
      },
    },
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "bert" },
      spec: { replicas: 1 },
      status: { readyReplicas: 0, updatedReplicas: 1 },
    },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "bert" },
      spec: { type: "ClusterIP", clusterIP: "10.96.0.12", ports: [{ name: "http", port: 8000 }] },
    },
  ].map(summarizeChild);
  const events: EventObject[] = [
    {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: "e2", creationTimestamp: "2026-11-21T11:59:00Z" },
      type: "Warning",
      reason: "DownloadFailed",
      note: "Failed: download failed",
      deprecatedCount: 3,
    },
    {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: "e1", creationTimestamp: "2026-11-21T11:56:00Z" },
      type: "Normal",
      reason: "Downloading",
      note: "Downloading: starting download Job",
    },
  ];

  it("summarises children as kubectl would and flags the troubled ones", () => {
    assert.deepEqual(
      children.map((c) => [c.kind, c.state, c.problem]),
      [
        ["Job", "Failed (BackoffLimitExceeded, 2 failed pods)", true],
        ["Pod", "CrashLoopBackOff", true],
        ["Deployment", "0/1 ready, 1 up to date", false],
        ["Service", "ClusterIP 10.96.0.12 ports http 8000", false],
      ],
    );
  });

  it("shows status, every condition with the explaining one marked, revisions, children and events", () => {
    const text = renderDescribe({ model: failedModel, children, events, now, style: plainStyle() });
    assert.match(text, /^Name:\s+bert$/m);
    assert.match(text, /^Phase:\s+Failed \(DownloadFailed\)$/m);
    assert.match(text, /^Model:\s+s3:\/\/bucket\/bert \(format onnx\)$/m);
    assert.match(
      text,
      /^Download:\s+\[\.{20}\] 0%, Job bert-dl-99aa88bb77 Failed, 2 attempt\(s\): AccessDenied$/m,
    );
    assert.match(text, /^ {2}ModelDownloaded\s+False\s+DownloadFailed\s+2m\s+← download of/m);
    assert.doesNotMatch(text, /StorageReady.*←/, "only the explaining condition is marked");
    assert.match(text, /Revisions:\n {2}<none>/);
    assert.match(text, /^ {2}Pod\s+bert-7d9f-abcde\s+CrashLoopBackOff$/m);
    const order = [...text.matchAll(/^ {2}(Normal|Warning)\s+(\w+)/gm)].map((m) => m[2]);
    assert.deepEqual(order, ["Downloading", "DownloadFailed"], "events oldest first");
    assert.match(text, /DownloadFailed\s+60s \(x3\)/);
    assert.doesNotMatch(text, ansiEscape);
  });

  it("lists revisions with the current and last ready one", () => {
    const text = renderDescribe({ model: readyModel, children: [], events: [], now, style: richStyle() });
    assert.match(
      stripAnsi(text),
      /5f4e3d2c1b\s+current, last ready\s+https:\/\/models\.example\.com\/resnet\.tar\.gz\s+1\s+tensorflow\/serving:2\.16\.1/,
    );
    assert.match(stripAnsi(text), /Children:\n {2}<none>/);
    assert.match(text, ansiEscape, "rich output is coloured");
  });
});

describe("flags and completion", () => {
  it("rejects an unknown output format naming the flag, the value and the choices", () => {
    assert.throws(() => outputFormat("xml", ["table", "json"]), /--output "xml" must be one of table, json/);
    assert.equal(outputFormat(undefined, ["text", "json"]), "text");
  });

  it("reads command names from the usage text", () => {
    const usage =
      "Usage: mlmodel <command>\n\nCommands:\n  cluster    run\n  status     show\n\nRun `mlmodel`";
    assert.deepEqual(parseCommands(usage), ["cluster", "status"]);
    assert.deepEqual(parseCommands("no commands"), []);
  });

  it("writes completion scripts the shells accept", () => {
    const bash = spawnSync("bash", ["-n"], { input: bashScript(["status", "describe"]), encoding: "utf8" });
    assert.equal(bash.status, 0, bash.stderr);
    assert.match(bashScript(["status"]), /complete -F _mlmodel kubectl-mlmodel/);
    assert.match(zshScript(["status"]), /^#compdef mlmodel kubectl-mlmodel/);
    assert.match(
      bashScript(["cluster"]),
      /cluster\) flags="up down status kubeconfig load-image .*--real-node --image --node-wait/,
    );
  });
});
