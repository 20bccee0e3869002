/**
 * The project's .npmrc shows npm's errors only (npm warns about every dependency's engines when
 * it runs on Node 20; see the comments there). This says what one hidden warning would have: a
 * dependency whose install script allowScripts does not cover, which npm silently skips.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { it } from "node:test";
import { repoRoot } from "../../harness/prerequisites/needs.ts";

it("every dependency's install script is covered by package.json's allowScripts", (t) => {
  const r = spawnSync("npm", ["install-scripts", "ls"], { cwd: repoRoot, encoding: "utf8" });
  if (/unknown command/i.test(`${r.stdout}${r.stderr}`)) {
    t.skip("this npm has no `install-scripts` (before npm 11.x): it runs every install script");
    return;
  }
  assert.match(r.stdout, /No packages with unreviewed install scripts\./, `${r.stdout}${r.stderr}`);
});
