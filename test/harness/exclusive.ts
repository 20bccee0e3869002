/**
 * A lock between the test processes of one run (npm test runs several files at once): a
 * directory created with mkdir, which either makes it or fails because it exists, holding the
 * holder's pid and name. A lock whose holder process is gone (killed mid-test) is taken over.
 */
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";

interface Owner {
  pid: number;
  holder: string;
  since: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function ownerOf(lockDir: string): Promise<Owner | undefined> {
  try {
    return JSON.parse(await readFile(join(lockDir, "owner.json"), "utf8")) as Owner;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface LockOptions {
  /** Give up after this long, naming the holder (default 20 minutes). */
  timeoutMs?: number;
  /** How often to look again (default 1 s). */
  intervalMs?: number;
  /** Told once when the lock is held by another, so a log says why the test waits. */
  onWait?: (owner: Owner) => void;
}

/**
 * Takes the lock at `lockDir` for `holder`, waiting while another live process holds it.
 * Returns the release, which removes the lock only while this process still owns it.
 */
export async function holdLock(
  lockDir: string,
  holder: string,
  options: LockOptions = {},
): Promise<() => Promise<void>> {
  const deadline = Date.now() + (options.timeoutMs ?? 20 * 60_000);
  let told = false;
  for (;;) {
    try {
      await mkdir(lockDir);
      const owner: Owner = { pid: process.pid, holder, since: new Date().toISOString() };
      await writeFile(join(lockDir, "owner.json"), JSON.stringify(owner));
      return async () => {
        if ((await ownerOf(lockDir))?.pid === process.pid)
          await rm(lockDir, { recursive: true, force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const owner = await ownerOf(lockDir);
    // No owner yet: its taker is between mkdir and writeFile; look again.
    if (owner && !alive(owner.pid)) {
      await rm(lockDir, { recursive: true, force: true });
      continue;
    }
    if (owner && !told) {
      options.onWait?.(owner);
      told = true;
    }
    if (Date.now() > deadline)
      throw new Error(
        `${holder} waited too long for ${lockDir}: held by ${owner ? `${owner.holder} (pid ${owner.pid}) since ${owner.since}` : "a process that never said who it is"}`,
      );
    await sleep(options.intervalMs ?? 1000);
  }
}
