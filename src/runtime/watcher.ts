/**
 * The watcher: list-then-watch as an explicit state machine (after kube-rs' watcher), exposed
 * as an async iterable of WatcherEvents that never ends on its own (only on abort).
 *
 *   Empty ──▶ Listing(continue?) ──(last page)──▶ Listed(rv) ──▶ Watching(rv) ─┐
 *     ▲            │ 410 (continue expired)           ▲   stream ended,       │
 *     └────────────┴──────────── 410 Gone ◀──────────┼── dropped, inactive ◀─┘
 *                                                     └── (resume from last rv)
 *
 * - The first list is paged (limit/continue) and streamed as init / initApply* / initDone,
 *   so a store can swap in the whole new state at once (and see what vanished).
 * - The watch starts at the list's resourceVersion with bookmarks, so the server keeps the
 *   resourceVersion fresh and a reconnect rarely hits 410.
 * - A dropped or silent connection resumes from the last seen resourceVersion: no relist.
 * - 410 Gone (history compacted) relists from scratch.
 * - Errors the server answered (5xx, 403, 404, 429 without Retry-After, ...) back off
 *   0.8 s .. 30 s with jitter; 429 waits the server's Retry-After instead. Connection-level
 *   failures (refused, reset, unreachable: no answer at all) back off 0.8 s .. 4 s on their own
 *   counter, and that wait ends early when another watcher sharing `reachability` hears from
 *   the server. A successful page or event resets both.
 */
import { JitterBackoff } from "./backoff.ts";
import type { KubeClient, ListResult, WatchOptions } from "./client.ts";
import { WatchInactivityError } from "./client.ts";
import { type Clock, realClock, sleep } from "./clock.ts";
import { ApiError, isUnreachable } from "./errors.ts";
import type { ResourceKind } from "./kinds.ts";
import type { Reachability } from "./reachability.ts";
import type { KubeObject, WatchEvent } from "./types.ts";

export type WatcherEvent<T extends KubeObject = KubeObject> =
  | { type: "init" }
  | { type: "initApply"; object: T }
  | { type: "initDone"; resourceVersion: string }
  | { type: "apply"; object: T }
  | { type: "delete"; object: T };

/** The two calls a watcher makes; KubeClient-backed in production, scripted in unit tests. */
export interface WatchSource<T extends KubeObject = KubeObject> {
  list(opts: { limit: number; continue?: string; signal: AbortSignal }): Promise<ListResult<T>>;
  watch(opts: WatchOptions, signal: AbortSignal): AsyncIterable<WatchEvent<T>>;
}

export interface Scope {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
}

/**
 * Lists and watches `kind` in `scope` through `client`. Objects come without
 * metadata.managedFields (cut from the text before parsing) unless `keepManagedFields`.
 */
export function clientSource<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  scope: Scope = {},
  { keepManagedFields = false }: { keepManagedFields?: boolean } = {},
): WatchSource<T> {
  const cut = { withoutManagedFields: !keepManagedFields };
  return {
    list: (opts) => client.list<T>(kind, { ...scope, ...opts, ...cut }),
    watch: (opts, signal) => client.watch<T>(kind, { ...scope, ...opts, ...cut }, signal),
  };
}

export type WatcherState =
  | { kind: "empty" }
  | { kind: "listing"; continue?: string }
  | { kind: "listed"; resourceVersion: string }
  | { kind: "watching"; resourceVersion: string };

export interface WatcherOptions {
  signal: AbortSignal;
  /** Page size of the initial list (default 500, client-go's). */
  pageSize?: number;
  clock?: Clock;
  /** Backoff after errors the server answered (default 0.8 s doubling to 30 s, ±25 %). */
  backoff?: JitterBackoff;
  /**
   * Backoff after connection-level failures, when the server did not answer at all
   * (default 0.8 s doubling to `defaultUnreachableMaxMs`, 4 s, ±25 %).
   */
  unreachableBackoff?: JitterBackoff;
  /**
   * Shared with the other watchers of the same API server: told of every answer, and wakes
   * this watcher from a wait after a connection-level failure when another one got an answer.
   */
  reachability?: Reachability;
  /** Server-side watch timeout; the server ends the watch cleanly after it (default 290 s). */
  watchTimeoutSeconds?: number;
  /** Reconnect when the watch is silent this long (default 150 s; bookmarks arrive ~1/min). */
  inactivityTimeoutMs?: number;
  /** Told about every error and the state it happened in (for logs and metrics). */
  onError?: (err: unknown, state: WatcherState, retryInMs: number) => void;
  /** Told about every watch event received, bookmarks included, with its type (for metrics). */
  onEvent?: (type: string) => void;
  /** Told about every state change (for tests and debug logs). */
  onState?: (state: WatcherState) => void;
  /**
   * Told whenever the API server answered: a list page, a watch opened (sources that support
   * `onOpen`), a watch event or bookmark. With onError it feeds WatchHealth (readiness).
   */
  onProgress?: () => void;
}

/** Cap of the backoff after connection-level failures (the server is simply not there). */
export const defaultUnreachableMaxMs = 4000;

export async function* watcher<T extends KubeObject>(
  source: WatchSource<T>,
  opts: WatcherOptions,
): AsyncGenerator<WatcherEvent<T>> {
  const clock = opts.clock ?? realClock;
  const backoff = opts.backoff ?? new JitterBackoff();
  const unreachable = opts.unreachableBackoff ?? new JitterBackoff({ maxMs: defaultUnreachableMaxMs });
  const reachability = opts.reachability;
  const resetBackoff = () => {
    backoff.reset();
    unreachable.reset();
  };
  // Any answer: readiness (onProgress) and the shared "reachable again" signal.
  const answered = () => {
    reachability?.answered();
    opts.onProgress?.();
  };
  const pageSize = opts.pageSize ?? 500;
  const { signal } = opts;
  let state = { kind: "empty" } as WatcherState;
  const enter = (next: WatcherState) => {
    state = next;
    opts.onState?.(state);
  };

  while (!signal.aborted) {
    // A snapshot for narrowing: `enter` reassigns `state` inside the cases.
    const current: WatcherState = state;
    try {
      switch (current.kind) {
        case "empty":
          yield { type: "init" };
          enter({ kind: "listing" });
          break;
        case "listing": {
          const page = await source.list(
            current.continue
              ? { limit: pageSize, continue: current.continue, signal }
              : { limit: pageSize, signal },
          );
          resetBackoff();
          answered();
          for (const object of page.items) yield { type: "initApply", object };
          if (page.continue) {
            enter({ kind: "listing", continue: page.continue });
          } else {
            yield { type: "initDone", resourceVersion: page.resourceVersion };
            enter({ kind: "listed", resourceVersion: page.resourceVersion });
          }
          break;
        }
        case "listed":
          enter({ kind: "watching", resourceVersion: current.resourceVersion });
          break;
        case "watching": {
          let rv: string = current.resourceVersion;
          let received = 0;
          const stream = source.watch(
            {
              resourceVersion: rv,
              allowWatchBookmarks: true,
              timeoutSeconds: opts.watchTimeoutSeconds ?? 290,
              inactivityTimeoutMs: opts.inactivityTimeoutMs ?? 150_000,
              ...(opts.onProgress || reachability ? { onOpen: answered } : {}),
            },
            signal,
          );
          try {
            for await (const event of stream) {
              resetBackoff();
              answered();
              received++;
              opts.onEvent?.(event.type);
              rv = event.object.metadata?.resourceVersion ?? rv;
              if (event.type === "ADDED" || event.type === "MODIFIED")
                yield { type: "apply", object: event.object };
              else if (event.type === "DELETED") yield { type: "delete", object: event.object };
              // BOOKMARK: only the resourceVersion matters, taken above.
            }
          } finally {
            // Whatever ended the stream, the next watch resumes from the last version seen.
            state = { kind: "watching", resourceVersion: rv };
          }
          // The server closed the watch (timeoutSeconds): resume at once. A watch closed before
          // sending anything (a proxy cutting connections?) waits first, so we never spin.
          enter({ kind: "listed", resourceVersion: rv });
          if (received === 0) await sleep(clock, backoff.next(), signal);
          break;
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      const next = nextStateAfterError(state, err);
      const noAnswer = isUnreachable(err);
      // An error status is an answer too: the server is reachable, wake the others.
      if (err instanceof ApiError) reachability?.answered();
      const wait = retryDelay(err, backoff, unreachable);
      opts.onError?.(err, state, wait);
      enter(next);
      if (wait > 0) {
        try {
          if (noAnswer && reachability) await reachability.wait(clock, wait, signal);
          else await sleep(clock, wait, signal);
        } catch {
          return; // aborted while waiting
        }
      }
    }
  }
}

/**
 * How a watch error is worth logging. A 410 (the resourceVersion is older than the server's
 * history: a routine expiry, followed by a relist) is debug; a watch gone silent (reconnected
 * from where it was, nothing lost) and a 429 with Retry-After (the server says when to come
 * back, e.g. "storage is (re)initializing" for a CRD just installed) are info; anything else
 * (the server refused, failed or could not be reached) is a warning. Errors that go on are
 * reported by the caches' health (/readyz) whatever their level.
 */
export function watchErrorLog(err: unknown): { level: "debug" | "info" | "warn"; message: string } {
  if (err instanceof ApiError && err.code === 410)
    return { level: "debug", message: "watch expired (410: too old resource version); relisting" };
  if (err instanceof WatchInactivityError)
    return { level: "info", message: "watch went silent; reconnecting" };
  if (err instanceof ApiError && err.code === 429 && err.retryAfterSeconds !== undefined)
    return { level: "info", message: "watch throttled (429); retrying when the server said" };
  return { level: "warn", message: "watch error; retrying" };
}

/** Where to go after an error: 410 relists, everything else resumes where it was. */
export function nextStateAfterError(state: WatcherState, err: unknown): WatcherState {
  if (err instanceof ApiError && err.code === 410) return { kind: "empty" };
  if (state.kind === "watching") return { kind: "listed", resourceVersion: state.resourceVersion };
  return state;
}

/**
 * How long to wait before the next attempt after `err`:
 * - 429 with Retry-After: exactly that (a restarted API server says 1 s for "storage is
 *   (re)initializing"); a Retry-After of 0 waits `backoff.minMs` so we never spin;
 * - 410 Gone or a silent connection: at once (relist / reconnect);
 * - no answer at all (refused, reset, unreachable: `isUnreachable`): the `unreachable`
 *   backoff, which grows only to a few seconds (default `backoff` itself when not given);
 * - anything else the server answered (5xx, 403, 404, 429 without Retry-After): `backoff`.
 */
export function retryDelay(
  err: unknown,
  backoff: JitterBackoff,
  unreachable: JitterBackoff = backoff,
): number {
  if (err instanceof ApiError && err.code === 429 && err.retryAfterSeconds !== undefined) {
    return err.retryAfterSeconds > 0 ? err.retryAfterSeconds * 1000 : backoff.minMs;
  }
  if (err instanceof ApiError && err.code === 410) return 0;
  if (err instanceof WatchInactivityError) return 0;
  if (isUnreachable(err)) return unreachable.next();
  return backoff.next();
}
