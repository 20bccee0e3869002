/**
 * src/cluster's modules import each other without a cycle, dynamic imports included (a cycle
 * hidden behind `await import()` is still one a reader has to untangle).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";
import { repoRoot } from "../../harness/prerequisites/needs.ts";

const src = join(repoRoot, "src");
const specifier = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["'](\.{1,2}\/[^"']+)["']/gm;

/** Each source file under src/ and the files under src/ it imports (relative imports only). */
function importGraph(root: string): Map<string, string[]> {
  const files = readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts"))
    .map((f) => join(root, f));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = [...readFileSync(file, "utf8").matchAll(specifier)].map((m) =>
      resolve(dirname(file), m[1]!),
    );
    graph.set(
      relative(root, file),
      targets.filter((t) => t.startsWith(root)).map((t) => relative(root, t)),
    );
  }
  return graph;
}

/** Every cycle found by a depth-first walk, each as the chain of files that closes it. */
function cycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const found: string[][] = [];
  const done = new Set<string>();
  const walk = (file: string, path: string[]) => {
    const at = path.indexOf(file);
    if (at >= 0) {
      found.push([...path.slice(at), file]);
      return;
    }
    if (done.has(file)) return;
    for (const next of graph.get(file) ?? []) walk(next, [...path, file]);
    done.add(file);
  };
  for (const file of graph.keys()) walk(file, []);
  return found;
}

describe("imports", () => {
  it("finds a cycle, a dynamic import's too, and none in a tree", () => {
    assert.deepEqual(
      cycles(
        new Map([
          ["a", ["b"]],
          ["b", ["c"]],
          ["c", []],
        ]),
      ),
      [],
    );
    assert.deepEqual(
      cycles(
        new Map([
          ["a", ["b"]],
          ["b", ["a"]],
        ]),
      ),
      [["a", "b", "a"]],
    );
  });

  it("form no cycle through src/cluster", () => {
    const graph = importGraph(src);
    assert.ok((graph.get(join("cluster", "cluster.ts")) ?? []).includes(join("cluster", "gateway-api.ts")));
    const throughCluster = cycles(graph).filter((c) => c.some((f) => f.startsWith(`cluster${"/"}`)));
    assert.deepEqual(
      throughCluster.map((c) => c.join(" -> ")),
      [],
    );
  });
});
