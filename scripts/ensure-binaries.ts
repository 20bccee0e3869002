/** Builds (or verifies the cache of) the local control plane's binaries, showing progress. */
import { ensureBinaries } from "../src/cluster/index.ts";

const started = Date.now();
const paths = await ensureBinaries((line) => console.log(`[binaries] ${line}`));
console.log(
  `[binaries] ready in ${((Date.now() - started) / 1000).toFixed(1)}s: ${Object.keys(paths).join(", ")}`,
);
