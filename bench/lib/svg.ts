/**
 * Hand-rolled SVG charts for benchmark series: a bar chart and a line chart, small enough to
 * read in a diff and to open in any browser. No dependencies.
 */

export interface Bar {
  label: string;
  value: number;
}

export interface Series {
  name: string;
  points: { x: number; y: number }[];
}

const width = 640;
const height = 360;
const margin = { top: 40, right: 20, bottom: 70, left: 70 };
const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"];

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten, at least `max`. */
export function niceMax(max: number): number {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const step of [1, 2, 5, 10]) if (step * power >= max) return step * power;
  return 10 * power;
}

function frame(title: string, yLabel: string, xLabel: string, yMax: number, body: string): string {
  const plotH = height - margin.top - margin.bottom;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const y = margin.top + plotH * (1 - f);
    const v = yMax * f;
    return `<line x1="${margin.left}" x2="${width - margin.right}" y1="${y}" y2="${y}" stroke="#ddd"/><text x="${margin.left - 6}" y="${y + 4}" text-anchor="end">${formatNumber(v)}</text>`;
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
    ...ticks,
    `<text transform="translate(16 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(yLabel)}</text>`,
    `<text x="${margin.left + (width - margin.left - margin.right) / 2}" y="${height - 8}" text-anchor="middle">${escapeXml(xLabel)}</text>`,
    body,
    "</svg>",
    "",
  ].join("\n");
}

export function formatNumber(v: number): string {
  if (v === 0) return "0";
  if (Math.abs(v) >= 1000) return `${Math.round(v / 100) / 10}k`;
  if (Math.abs(v) >= 10) return String(Math.round(v));
  return String(Math.round(v * 100) / 100);
}

export function barChart(title: string, yLabel: string, bars: readonly Bar[]): string {
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const yMax = niceMax(Math.max(0, ...bars.map((b) => b.value)));
  const slot = plotW / Math.max(1, bars.length);
  const body = bars
    .map((b, i) => {
      const h = (b.value / yMax) * plotH;
      const x = margin.left + i * slot + slot * 0.15;
      const y = margin.top + plotH - h;
      const cx = x + slot * 0.35;
      return [
        `<rect x="${x}" y="${y}" width="${slot * 0.7}" height="${h}" fill="${palette[i % palette.length]}"/>`,
        `<text x="${cx}" y="${y - 4}" text-anchor="middle">${formatNumber(b.value)}</text>`,
        `<text x="${cx}" y="${margin.top + plotH + 14}" text-anchor="middle">${escapeXml(b.label)}</text>`,
      ].join("");
    })
    .join("\n");
  return frame(title, yLabel, "", yMax, body);
}

export function lineChart(title: string, xLabel: string, yLabel: string, series: readonly Series[]): string {
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const all = series.flatMap((s) => s.points);
  const xMax = niceMax(Math.max(0, ...all.map((p) => p.x)));
  const yMax = niceMax(Math.max(0, ...all.map((p) => p.y)));
  const sx = (x: number) => margin.left + (x / xMax) * plotW;
  const sy = (y: number) => margin.top + plotH - (y / yMax) * plotH;
  const xTicks = [0, 0.25, 0.5, 0.75, 1]
    .map(
      (f) =>
        `<text x="${sx(xMax * f)}" y="${margin.top + plotH + 14}" text-anchor="middle">${formatNumber(xMax * f)}</text>`,
    )
    .join("");
  const lines = series
    .map((s, i) => {
      const colour = palette[i % palette.length];
      const path = s.points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
      const dots =
        s.points.length <= 20
          ? s.points.map((p) => `<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="3" fill="${colour}"/>`).join("")
          : "";
      const legend = `<text x="${margin.left + 10}" y="${margin.top + 14 + i * 14}" fill="${colour}">${escapeXml(s.name)}</text>`;
      return `<polyline fill="none" stroke="${colour}" stroke-width="2" points="${path}"/>${dots}${legend}`;
    })
    .join("\n");
  return frame(title, yLabel, xLabel, yMax, xTicks + lines);
}
