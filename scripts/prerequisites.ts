/**
 * Checks, and installs what is missing of, the test prerequisites (the same ones `npm test`
 * installs for the files it runs), showing progress:
 *
 *   npm run prerequisites                  all of them
 *   npm run prerequisites -- cluster moto  these (and what they require)
 *   npm run prerequisites -- --list        what each one is, and its state; installs nothing
 */
import { parseArgs } from "node:util";
import { prepareAndReport, withRequirements } from "../test/harness/prerequisites/engine.ts";
import { registry } from "../test/harness/prerequisites/index.ts";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { list: { type: "boolean" } } });
let wanted: ReturnType<typeof withRequirements>;
try {
  wanted = withRequirements(registry, positionals.length > 0 ? positionals : registry.map((p) => p.name));
} catch (err) {
  console.error((err as Error).message);
  process.exit(2);
}
if (values.list) {
  for (const p of wanted) {
    const c = await p.check();
    const state =
      c.state === "ready"
        ? "ready"
        : c.state === "missing"
          ? `missing (${c.why})`
          : `unavailable (${c.reason})`;
    console.log(`${p.name}: ${state}\n  ${p.summary}`);
  }
  process.exit(0);
}
const { failed } = await prepareAndReport(wanted, "[prerequisites] ");
process.exit(failed > 0 ? 1 : 0);
