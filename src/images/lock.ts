/**
 * A lock file beside a cache entry, so that two processes (two test runs, say) never build the
 * same entry at once: the second waits, then finds the entry built. A lock whose holder died
 * is taken over. (src/cluster/binaries.ts has the same lock privately; it could import this.)
 */
import { open, readFile, rm } from "node:fs/promises";
import { isAlive } from "../cluster/binaries.ts";

export async function withEntryLock<T>(entryDir: string, fn: () => Promise<T>): Promise<T> {
  const lockPath = `${entryDir}.lock`;
  for (;;) {
    try {
      const handle = await open(lockPath, "wx");
      await handle.writeFile(String(process.pid));
      await handle.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = Number(await readFile(lockPath, "utf8").catch(() => "0"));
      if (!holder || !isAlive(holder)) await rm(lockPath, { force: true });
      else await new Promise((r) => setTimeout(r, 2000));
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lockPath, { force: true });
  }
}
