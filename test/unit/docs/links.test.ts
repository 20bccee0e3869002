/**
 * The documentation's relative links lead somewhere: every markdown link in README.md,
 * docs/*.md, bench/*.md and test/harness/README.md names a file of the repository (and a
 * heading of it, when it has an anchor), and the paths the newcomer's pages name in backticks
 * exist. A page moved or renamed breaks this test instead of a reader's click.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";

const root = resolve(import.meta.dirname, "..", "..", "..");

const markdownIn = (dir: string) =>
  readdirSync(join(root, dir))
    .filter((name) => name.endsWith(".md"))
    .map((name) => join(dir, name));

/** Every page whose markdown links are checked. */
const linkedPages = ["README.md", ...markdownIn("docs"), ...markdownIn("bench"), "test/harness/README.md"];

/**
 * The pages whose backticked repository paths are checked too. The history pages name files of
 * their day on purpose (bench/HISTORY.md), and `dist/bundle` is a build output.
 */
const pathCheckedPages = [
  "README.md",
  "bench/README.md",
  "docs/first-run.md",
  "docs/local-cluster.md",
  "docs/mlmodel.md",
  "docs/development.md",
];
const buildOutputs = ["dist/bundle"];

/** The text outside fenced code blocks and inline code, where a `](` is a link. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "");
}

/** Targets of `[text](target)` and `![alt](target)` that point into the repository. */
export function relativeLinks(text: string): string[] {
  const targets = [...prose(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!);
  return targets.filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

/** GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as dashes. */
export function headingAnchors(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const match of text.replace(/^```[\s\S]*?^```/gm, "").matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const slug = match[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const count = seen.get(slug) ?? 0;
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
    seen.set(slug, count + 1);
  }
  return anchors;
}

/** What is wrong with each link of `page` (a path relative to `base`), as readable lines. */
export function brokenLinks(page: string, text: string, base: string = root): string[] {
  const problems: string[] = [];
  for (const target of relativeLinks(text)) {
    const [path = "", anchor] = target.split("#");
    if (path === "") {
      if (anchor && !headingAnchors(text).has(anchor))
        problems.push(`${page}: no heading with anchor #${anchor}`);
      continue;
    }
    const file = resolve(base, dirname(page), decodeURIComponent(path));
    if (!existsSync(file)) {
      problems.push(`${page}: link (${target}) names ${relative(base, file)}, which does not exist`);
      continue;
    }
    if (anchor && file.endsWith(".md") && !headingAnchors(readFileSync(file, "utf8")).has(anchor)) {
      problems.push(
        `${page}: link (${target}): ${relative(base, file)} has no heading with anchor #${anchor}`,
      );
    }
  }
  return problems;
}

/** Backticked paths under the repository's top directories that do not exist. */
export function missingPaths(page: string, text: string, base: string = root): string[] {
  const pattern =
    /`((?:docs|bench|samples|src|deploy|dist|test|scripts|controlplane|examples|bin)\/[A-Za-z0-9_./-]+)`/g;
  return [...text.matchAll(pattern)]
    .map((m) => m[1]!.replace(/[/.]+$/, ""))
    .filter((path) => !buildOutputs.some((out) => path === out || path.startsWith(`${out}/`)))
    .filter((path) => !existsSync(join(base, path)))
    .map((path) => `${page}: \`${path}\` does not exist`);
}

describe("documentation links", () => {
  it("every relative markdown link names an existing file and heading", () => {
    const problems = linkedPages.flatMap((page) => brokenLinks(page, readFileSync(join(root, page), "utf8")));
    assert.deepEqual(problems, []);
  });

  it("every repository path the newcomer's pages name in backticks exists", () => {
    const problems = pathCheckedPages.flatMap((page) =>
      missingPaths(page, readFileSync(join(root, page), "utf8")),
    );
    assert.deepEqual(problems, []);
  });

  it("the README links to the pages that hold its longer accounts", () => {
    const links = new Set(relativeLinks(readFileSync(join(root, "README.md"), "utf8")));
    for (const page of [
      "docs/first-run.md",
      "docs/local-cluster.md",
      "docs/api.md",
      "docs/cli.md",
      "bench/README.md",
    ]) {
      assert.ok(links.has(page), `README.md links to ${page}`);
    }
  });

  it("finds a missing file, a missing heading and a missing backticked path", () => {
    const page = "docs/example.md";
    const text = [
      "# Example",
      "[ok](install.md), [here](#example), [web](https://example.com/x.md)",
      "[gone](nowhere.md), [no heading](install.md#no-such-heading), [self](#missing)",
      "```sh\n[in code](not-checked.md)\n```",
      "`src/cluster/cluster.ts` and `src/no/such/file.ts`",
    ].join("\n");
    const problems = brokenLinks(page, text).map((line) => line.replace(/ \(.*?\)/, ""));
    assert.equal(problems.length, 3, problems.join("\n"));
    assert.match(problems[0]!, /docs\/nowhere\.md, which does not exist/);
    assert.match(problems[1]!, /no heading with anchor #no-such-heading/);
    assert.match(problems[2]!, /#missing/);
    assert.deepEqual(missingPaths(page, text), ["docs/example.md: `src/no/such/file.ts` does not exist"]);
  });

  it("makes GitHub's anchors from headings", () => {
    const anchors = headingAnchors("# The API\n## `mlmodel status`\n## Install into a cluster\n## The API\n");
    assert.deepEqual([...anchors], ["the-api", "mlmodel-status", "install-into-a-cluster", "the-api-1"]);
  });
});
