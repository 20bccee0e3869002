import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { run as backup } from "../../../src/cli/commands/backup.ts";
import { run as restore } from "../../../src/cli/commands/restore.ts";
import { CliError } from "../../../src/cli/errors.ts";
import { backupHeader } from "../../../src/operator/backup.ts";

const dir = mkdtempSync(join(tmpdir(), "mlmodel-backup-cli-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

const oneModel = `${backupHeader}
---
apiVersion: serving.mlmodel.dev/v1alpha1
kind: MLModel
metadata: {name: resnet, namespace: models}
spec: {model: {uri: "https://models.example.com/m.tgz"}}
`;

/** Usage and input errors come before any cluster is needed: none is configured here. */
describe("backup and restore refuse bad input before touching a cluster", () => {
  const cases: [string, () => Promise<unknown>, RegExp, number][] = [
    ["backup without -o", () => backup(["-n", "models"]), /--output FILE is required/, 2],
    [
      "backup with -n and -A",
      () => backup(["-n", "a", "-A", "-o", "f"]),
      /--namespace and --all-namespaces exclude each other/,
      2,
    ],
    ["backup with an argument", () => backup(["models", "-o", "f"]), /Unexpected argument 'models'/, 2],
    ["restore without FILE", () => restore([]), /restore takes exactly one FILE, got 0/, 2],
    [
      "restore with --concurrency 0",
      () => restore(["f", "--concurrency", "0"]),
      /--concurrency "0" must be a whole number from 1 to 64/,
      2,
    ],
    [
      "restore of a missing file",
      () => restore([join(dir, "nope.yaml")]),
      /cannot read .*nope.yaml: ENOENT/,
      1,
    ],
    [
      "restore of a file that is not a backup",
      () => restore([file("plain.yaml", "apiVersion: v1\nkind: ConfigMap\n")]),
      /plain.yaml is not an mlmodel backup: its first line is "apiVersion: v1"/,
      1,
    ],
    [
      "restore -n of a namespace the file does not hold",
      () => restore([file("one.yaml", oneModel), "-n", "other"]),
      /--namespace "other": .*one.yaml holds no object of that namespace \(it holds models\)/,
      2,
    ],
  ];
  for (const [name, call, message, exitCode] of cases) {
    it(name, async () => {
      await assert.rejects(call, (err: Error) => {
        assert.ok(err instanceof CliError, String(err));
        assert.match(err.message, message);
        assert.equal(err.exitCode, exitCode);
        return true;
      });
    });
  }
});
