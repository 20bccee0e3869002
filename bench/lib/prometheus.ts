/**
 * Reads the Prometheus text format the operator serves on /metrics: just enough to sum a
 * counter by one label (requests by verb) and read single gauges (RSS, heap, CPU).
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const labelPair = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const raw of text.split("\n")) {
    if (!raw || raw.startsWith("#")) continue;
    const m = line.exec(raw);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? "").matchAll(labelPair))
      labels[k as string] = (v as string).replace(/\\(.)/g, "$1");
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

/** Sum of `name` grouped by the value of `label` (e.g. rest_client_requests_total by verb). */
export function sumBy(samples: readonly Sample[], name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (s.name !== name) continue;
    const key = s.labels[label] ?? "";
    out[key] = (out[key] ?? 0) + s.value;
  }
  return out;
}

/** Sum of every sample of `name` (0 when absent). */
export function total(samples: readonly Sample[], name: string): number {
  return samples.filter((s) => s.name === name).reduce((n, s) => n + s.value, 0);
}

/** Per-key difference `after - before` (keys of either side). */
export function diff(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of new Set([...Object.keys(after), ...Object.keys(before)])) {
    const d = (after[k] ?? 0) - (before[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}
