/**
 * Whether an observed share of answers agrees with the share a traffic split promises.
 *
 * Behind a Service, kube-proxy (iptables mode) picks a ready endpoint uniformly at random for
 * each new connection, so with one request per connection the number of answers from the pods
 * of one revision out of n is binomial(n, p), p being that revision's share of the ready
 * endpoints. The normal approximation's interval p +/- z sqrt(p(1-p)/n), z = 3.291 for 99.9 %,
 * holds the observed share in 999 of 1,000 runs when the split is what it claims to be; a
 * split that is really another (say 40 % asked, 50 % served) falls outside it once n is in the
 * thousands. 99.9 %, not 99 %: a test file makes two checks, and at 99 % about 2 honest runs
 * in 100 would fail CI by chance.
 */

/** z of a two-sided 99.9 % interval of the normal distribution. */
export const z999 = 3.291;

export interface ShareCheck {
  /** The share the split promises (0..1). */
  expected: number;
  /** The share observed: hits / n. */
  observed: number;
  hits: number;
  n: number;
  /** Half-width of the interval: z sqrt(p(1-p)/n). */
  halfWidth: number;
  within: boolean;
}

/** Checks `hits` answers of `n` against a promised share `expected` (0..1) at the given z. */
export function checkShare(hits: number, n: number, expected: number, z = z999): ShareCheck {
  if (!Number.isInteger(n) || n <= 0) throw new RangeError(`n must be a positive integer, got ${n}`);
  if (!Number.isInteger(hits) || hits < 0 || hits > n)
    throw new RangeError(`hits must be an integer from 0 to n (${n}), got ${hits}`);
  if (!(expected > 0 && expected < 1))
    throw new RangeError(
      `expected must lie strictly between 0 and 1 (a split that sends everything or nothing has no spread), got ${expected}`,
    );
  const halfWidth = z * Math.sqrt((expected * (1 - expected)) / n);
  const observed = hits / n;
  return { expected, observed, hits, n, halfWidth, within: Math.abs(observed - expected) <= halfWidth };
}

/** "v2 answered 372 of 1500 (24.8 %), split 25 % +/- 3.7 %": for assertion messages and logs. */
export function describeShare(label: string, check: ShareCheck): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  return `${label} answered ${check.hits} of ${check.n} (${pct(check.observed)}), split ${pct(check.expected)} +/- ${pct(check.halfWidth)} (99.9 %)`;
}
