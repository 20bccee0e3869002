/** Small statistics for benchmark figures: nearest-rank percentiles and rounding for display. */

/** The p-th percentile (0..100) by nearest rank; undefined for no samples. */
export function percentile(samples: readonly number[], p: number): number | undefined {
  if (samples.length === 0) return undefined;
  if (p < 0 || p > 100) throw new RangeError(`percentile ${p} is not within 0..100`);
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1];
}

/** The median; of an even count, the mean of the two middle values (two pairs: their mean). */
export function median(samples: readonly number[]): number | undefined {
  if (samples.length === 0) return undefined;
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface Percentiles {
  p50?: number;
  p90?: number;
  p99?: number;
  max?: number;
}

export function percentiles(samples: readonly number[]): Percentiles {
  return {
    p50: round(percentile(samples, 50)),
    p90: round(percentile(samples, 90)),
    p99: round(percentile(samples, 99)),
    max: round(percentile(samples, 100)),
  };
}

/** Rounds to `digits` decimals for printing (undefined stays undefined). */
export function round(value: number | undefined, digits = 2): number | undefined {
  if (value === undefined || !Number.isFinite(value)) return undefined;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Runs `task` over `items` with at most `limit` in flight; resolves when all have finished. */
export async function inParallel<T>(
  items: readonly T[],
  limit: number,
  task: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await task(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
}
