/**
 * The serving pod's preStop drain script, run by the machine's /bin/sh against a stand-in for
 * /proc/net/snmp. A stand-in `sleep` on PATH advances the poll clock instantly and, while the
 * simulated traffic lasts, counts one more accepted connection per poll, so the test counts
 * polls (seconds in a pod) instead of waiting for them.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { drainScript } from "../../../src/operator/desired.ts";

const dir = mkdtempSync(join(tmpdir(), "drain-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const snmp = join(dir, "snmp");
const polls = join(dir, "polls");

/** /proc/net/snmp's Tcp lines with `opens` accepted connections. */
function snmpText(opens: number): string {
  return [
    "Ip: Forwarding DefaultTTL",
    "Ip: 1 64",
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab",
    `Tcp: 1 200 120000 -1 7 ${opens} 0 0 1`,
    "",
  ].join("\n");
}

/** Records each `sleep N`; while fewer than $BUSY polls have passed, one more connection arrives. */
const fakeSleep = `#!/bin/sh
echo "$1" >> "${polls}"
n=$(wc -l < "${polls}")
if [ "$n" -le "$BUSY" ]; then printf 'Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens\\nTcp: 1 200 120000 -1 7 %d\\n' "$((100 + n))" > "${snmp}"; fi
`;
writeFileSync(join(dir, "sleep"), fakeSleep);
chmodSync(join(dir, "sleep"), 0o755);

/** Runs the drain with `busyPolls` polls of arriving connections; returns the sleeps it made. */
function drain(busyPolls: number, snmpContent: string | undefined, quiet = 3, max = 20): string[] {
  rmSync(polls, { force: true });
  writeFileSync(polls, "");
  if (snmpContent === undefined) rmSync(snmp, { force: true });
  else writeFileSync(snmp, snmpContent);
  const script = drainScript(quiet, max, 5).replaceAll("/proc/net/snmp", snmp);
  const run = spawnSync("/bin/sh", ["-c", script], {
    env: { PATH: `${dir}:${process.env.PATH}`, BUSY: String(busyPolls) },
    encoding: "utf8",
  });
  assert.equal(run.status, 0, `the drain script failed: ${run.stderr}`);
  return readFileSync(polls, "utf8").split("\n").filter(Boolean);
}

describe("the preStop drain script", () => {
  it("returns after the quiet period when no connection arrives", () => {
    assert.deepEqual(drain(0, snmpText(100)), ["1", "1", "1"]);
  });

  it("waits while connections keep arriving, then for a quiet period after the last", () => {
    const sleeps = drain(6, snmpText(100));
    assert.equal(sleeps.length, 6 + 3, "six busy polls, then three quiet ones");
  });

  it("stops at its bound when connections never stop", () => {
    assert.equal(drain(1000, snmpText(100), 3, 20).length, 20);
  });

  it("falls back to a fixed drain when the count cannot be read", () => {
    assert.deepEqual(drain(0, undefined), ["5"]);
    assert.deepEqual(drain(0, "Tcp: nothing here\n"), ["5"]);
  });
});
