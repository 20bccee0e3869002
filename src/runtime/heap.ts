/** A binary min-heap by `at` (then insertion order); entries may be stale, the caller checks. */
export interface HeapEntry {
  at: number;
  seq: number;
  key: string;
}

export class MinHeap {
  readonly #items: HeapEntry[] = [];

  get size(): number {
    return this.#items.length;
  }

  peek(): HeapEntry | undefined {
    return this.#items[0];
  }

  push(entry: HeapEntry): void {
    const a = this.#items;
    a.push(entry);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(a[i]!, a[parent]!)) break;
      [a[i], a[parent]] = [a[parent]!, a[i]!];
      i = parent;
    }
  }

  pop(): HeapEntry | undefined {
    const a = this.#items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && less(a[l]!, a[m]!)) m = l;
        if (r < a.length && less(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m]!, a[i]!];
        i = m;
      }
    }
    return top;
  }

  clear(): void {
    this.#items.length = 0;
  }
}

function less(x: HeapEntry, y: HeapEntry): boolean {
  return x.at < y.at || (x.at === y.at && x.seq < y.seq);
}
