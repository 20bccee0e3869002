/**
 * A map that forgets. What the operator remembers between reconciles (the statuses it wrote,
 * the rollouts it holds back, the Secrets it created, the creates whose echo it awaits, the
 * plans it made) must not outlive its use: a model that nothing wakes again is never
 * reconciled again to drop its entry. So each entry expires `ttlMs` after it was last set,
 * and with `maxEntries` the least recently set entry goes when the map is full.
 *
 * Entries stay in the order they were last set (a set re-inserts its key last), so expiry
 * looks at the oldest entries only and stops at the first one still young.
 */
export interface TtlMapOptions {
  /** How long an entry lives after it was last set; forever without. */
  ttlMs?: number;
  /** How many entries at the most; the least recently set goes first. */
  maxEntries?: number;
  /**
   * Expire entries on a timer too, by the wall clock, while nothing is set: a burst of
   * models, then quiet, would otherwise keep the burst's entries until the next set. Only
   * for maps whose times are the wall clock's (a test's clock is not).
   */
  expireWhileIdle?: boolean;
}

export class TtlMap<K, V> {
  readonly #entries = new Map<K, { value: V; at: number }>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #expireWhileIdle: boolean;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: TtlMapOptions = {}) {
    this.#ttlMs = options.ttlMs ?? Number.POSITIVE_INFINITY;
    this.#maxEntries = options.maxEntries ?? Number.POSITIVE_INFINITY;
    this.#expireWhileIdle = options.expireWhileIdle === true && Number.isFinite(this.#ttlMs);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The entry's value, expired or not: expiry bounds memory, it does not make a value wrong. */
  get(key: K): V | undefined {
    return this.#entries.get(key)?.value;
  }

  has(key: K): boolean {
    return this.#entries.has(key);
  }

  delete(key: K): boolean {
    return this.#entries.delete(key);
  }

  keys(): IterableIterator<K> {
    return this.#entries.keys();
  }

  /** Sets `key` as of `now` (ms), last in order, and forgets what expired by then or overflows. */
  set(key: K, value: V, now: number = Date.now()): void {
    this.#entries.delete(key);
    this.#entries.set(key, { value, at: now });
    this.expire(now);
    while (this.#entries.size > this.#maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
    if (this.#expireWhileIdle && this.#timer === undefined) this.#expireLater(this.#ttlMs);
  }

  /** Forgets the entries set `ttlMs` or longer before `now`, oldest first. */
  expire(now: number): void {
    for (const [key, entry] of this.#entries) {
      if (now - entry.at < this.#ttlMs) break;
      this.#entries.delete(key);
    }
  }

  #expireLater(ms: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      const now = Date.now();
      this.expire(now);
      const oldest = this.#entries.values().next().value;
      if (oldest) this.#expireLater(Math.max(0, oldest.at + this.#ttlMs - now));
    }, ms);
    this.#timer.unref?.();
  }
}
