/** Column-aligned tables, as kubectl prints them: upper-case headers, three spaces apart. */
import { type Style, visibleLength } from "./style.ts";

export type Row = readonly string[];

export function renderTable(headers: Row, rows: readonly Row[], style: Style, gap = 3): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => visibleLength(r[i] ?? ""))));
  const line = (cells: Row, header: boolean) =>
    cells
      .map((cell, i) => {
        const last = i === cells.length - 1;
        const padded = last ? cell : cell + " ".repeat(widths[i]! - visibleLength(cell) + gap);
        return header ? style.bold(padded) : padded;
      })
      .join("")
      .trimEnd();
  return [line(headers, true), ...rows.map((r) => line(r, false))].join("\n");
}
