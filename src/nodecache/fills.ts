// The copies of entries under way on one node, as its agent reports them in its state: a peer
// copy into the node's cache, and a serving pod's `cache-copy` reading an entry out of it. The
// operator sums them over nodes into a model's status.cache.fill (src/operator/node-cache.ts).
import type { NodeCacheFill } from "./contract.ts";

interface Fill {
  key: string;
  kind: NodeCacheFill["kind"];
  peer?: string;
  bytesDone: number;
  bytesTotal: number;
  startedAt: number;
  /** When a byte last arrived: a copy silent for too long is gone (its pod died). */
  touchedAt: number;
}

export class FillTracker {
  readonly #fills = new Map<string, Fill>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** A copy starts (or goes on: a copy id seen again keeps its record). */
  start(id: string, fill: { key: string; kind: NodeCacheFill["kind"]; peer?: string; bytesTotal: number }) {
    if (this.#fills.has(id)) return;
    const now = this.#now();
    this.#fills.set(id, { ...fill, bytesDone: 0, startedAt: now, touchedAt: now });
  }

  has(id: string): boolean {
    return this.#fills.has(id);
  }

  /** Bytes of the copy arrived; a copy that reached its total is over. */
  add(id: string, bytes: number): void {
    const fill = this.#fills.get(id);
    if (!fill) return;
    fill.bytesDone += bytes;
    fill.touchedAt = this.#now();
    if (fill.bytesDone >= fill.bytesTotal) this.#fills.delete(id);
  }

  end(id: string): void {
    this.#fills.delete(id);
  }

  /** Drops copies that received nothing for `maxIdleMs`; whether any was dropped. */
  dropIdle(maxIdleMs: number): boolean {
    const now = this.#now();
    let dropped = false;
    for (const [id, fill] of this.#fills)
      if (now - fill.touchedAt >= maxIdleMs) dropped = this.#fills.delete(id) || dropped;
    return dropped;
  }

  /** The copies under way, each with its average rate since it started, in a stable order. */
  report(): NodeCacheFill[] {
    const now = this.#now();
    return [...this.#fills.values()]
      .sort((a, b) => a.key.localeCompare(b.key) || a.kind.localeCompare(b.kind) || a.startedAt - b.startedAt)
      .map((f) => ({
        key: f.key,
        kind: f.kind,
        ...(f.peer ? { peer: f.peer } : {}),
        bytesDone: f.bytesDone,
        bytesTotal: f.bytesTotal,
        bytesPerSecond: now > f.startedAt ? Math.round((f.bytesDone * 1000) / (now - f.startedAt)) : 0,
        startedAt: new Date(f.startedAt).toISOString(),
      }));
  }
}
