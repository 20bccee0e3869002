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
 * - Errors back off 0.8 s .. 30 s with jitter; 429 waits the server's Retry-After instead.
 *   A successful page or event resets the backoff.
 */
import { JitterBackoff } from "./backoff.ts";
import type { KubeClient, ListResult, WatchOptions } from "./client.ts";
import { WatchInactivityError } from "./client.ts";
import { type Clock, realClock, sleep } from "./clock.ts";
import { ApiError } from "./errors.ts";
import type { ResourceKind } from "./kinds.ts";
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

export function clientSource<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  scope: Scope = {},
): WatchSource<T> {
  return {
    list: (opts) => client.list<T>(kind, { ...scope, ...opts }),
    watch: (opts, signal) => client.watch<T>(kind, { ...scope, ...opts }, signal),
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
  backoff?: JitterBackoff;
  /** Server-side watch timeout; the server ends the watch cleanly after it (default 290 s). */
  watchTimeoutSeconds?: number;
  /** Reconnect when the watch is silent this long (default 150 s; bookmarks arrive ~1/min). */
  inactivityTimeoutMs?: number;
  /** Told about every error and the state it happened in (for logs and metrics). */
  onError?: (err: unknown, state: WatcherState, retryInMs: number) => void;
  /** Told about every state change (for tests and debug logs). */
  onState?: (state: WatcherState) => void;
  /**
   * Told whenever the API server answered: a list page, a watch opened (sources that support
   * `onOpen`), a watch event or bookmark. With onError it feeds WatchHealth (readiness).
   */
  onProgress?: () => void;
}

export async function* watcher<T extends KubeObject>(
  source: WatchSource<T>,
  opts: WatcherOptions,
): AsyncGenerator<WatcherEvent<T>> {
  const clock = opts.clock ?? realClock;
  const backoff = opts.backoff ?? new JitterBackoff();
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
          backoff.reset();
          opts.onProgress?.();
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
              ...(opts.onProgress ? { onOpen: opts.onProgress } : {}),
            },
            signal,
          );
          try {
            for await (const event of stream) {
              backoff.reset();
              opts.onProgress?.();
              received++;
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
      const wait = retryDelay(err, backoff);
      opts.onError?.(err, state, wait);
      enter(next);
      if (wait > 0) {
        try {
          await sleep(clock, wait, signal);
        } catch {
          return; // aborted while waiting
        }
      }
    }
  }
}

/** Where to go after an error: 410 relists, everything else resumes where it was. */
export function nextStateAfterError(state: WatcherState, err: unknown): WatcherState {
  if (err instanceof ApiError && err.code === 410) return { kind: "empty" };
  if (state.kind === "watching") return { kind: "listed", resourceVersion: state.resourceVersion };
  return state;
}

/** 429 waits Retry-After; a silent connection or 410 reconnects at once; the rest backs off. */
export function retryDelay(err: unknown, backoff: JitterBackoff): number {
  if (err instanceof ApiError && err.code === 429 && err.retryAfterSeconds !== undefined) {
    return err.retryAfterSeconds * 1000;
  }
  if (err instanceof ApiError && err.code === 410) return 0;
  if (err instanceof WatchInactivityError) return 0;
  return backoff.next();
}
