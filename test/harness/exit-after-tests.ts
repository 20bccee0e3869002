/**
 * Preloaded (`--import`) into every test file's process by scripts/test.ts, in place of node's
 * `--test-force-exit`.
 *
 * Why not `--test-force-exit`: it calls process.exit() as soon as a file's tests end, and the
 * last test events the file's process had written to the runner could be lost with it. Seen on
 * Node 24.21: the same 66 unit files counted 681 tests, 681, then 661; a run's totals were only a
 * lower bound. Without it every run counted 681.
 *
 * What it was there for still holds: a file that leaks a timer, a socket or a child process
 * after its last test (seen after a failed before hook) must not keep the run, and CI, waiting
 * forever. So once a file's tests have all ended (its first root after hook: this one), an
 * unref'd timer gives the process `leakGraceMs` to exit on its own, which it does when nothing
 * leaked (the timer does not keep it alive), and ends it otherwise, saying which file leaked.
 * By then its results have long been written. The exit keeps the exit code the file earned;
 * the runner counts failures from the test events anyway.
 *
 * Sharp edge: the grace starts before the file's own root `after` hooks (this one is registered
 * first, and a hook added while hooks run does not run last), so it must outlast the slowest
 * cleanup (a cluster or a real node stopped): 120 s. A leaking file costs the run that much.
 */
import { after } from "node:test";

/** How long a file's process may outlive its last test before it is ended (tests of this file set it). */
export const leakGraceMs = Number(process.env.MLMODEL_TEST_LEAK_GRACE_MS ?? 120_000);

// NODE_TEST_CONTEXT is set by `node --test` in the processes that run test files only; the
// runner's own process (which loads this too) must not get a root test of its own.
if (process.env.NODE_TEST_CONTEXT) {
  after(() => {
    setTimeout(() => {
      process.stderr.write(
        `# ${process.argv[1]}: still running ${leakGraceMs / 1000} s after its last test ` +
          "(a timer, socket or child process left open); ended\n",
      );
      process.exit();
    }, leakGraceMs).unref();
  });
}
