/**
 * Metadata-only list and watch: the API server answers with PartialObjectMetadata (name,
 * namespace, labels, annotations, owners, resourceVersion...) and never sends the objects'
 * contents, as client-go's metadata informers do. For a cache that needs to know only that
 * objects exist, e.g. Secrets, whose values then never reach the process at all (a transform
 * would drop them only after they were received and parsed).
 *
 * RBAC cannot tell such a request from a full one: it needs the same list and watch rights.
 */
import type { KubeClient } from "./client.ts";
import { apiVersionOf, type ResourceKind } from "./kinds.ts";
import type { KubeObject, WatchEvent } from "./types.ts";
import type { Scope, WatchSource } from "./watcher.ts";

const metaV1 = "g=meta.k8s.io;v=v1";
/** What a list asks for: a PartialObjectMetadataList, and nothing else. */
export const metadataListAccept = `application/json;as=PartialObjectMetadataList;${metaV1}`;
/** What a watch asks for: each event's object as PartialObjectMetadata. */
export const metadataWatchAccept = `application/json;as=PartialObjectMetadata;${metaV1}`;

/**
 * The API server sends PartialObjectMetadata (apiVersion meta.k8s.io/v1): it is given back the
 * apiVersion and kind of what it describes, so a store of them holds objects of that kind.
 * Anything but metadata is dropped, should a server answer with whole objects.
 */
export function asMetadataOf<T extends KubeObject>(kind: ResourceKind, obj: KubeObject): T {
  return { apiVersion: apiVersionOf(kind), kind: kind.kind, metadata: obj.metadata } as T;
}

/** Lists and watches `kind` in `scope`, metadata only. */
export function metadataOnlySource<T extends KubeObject>(
  client: Pick<KubeClient, "list" | "watch">,
  kind: ResourceKind,
  scope: Scope = {},
  { keepManagedFields = false }: { keepManagedFields?: boolean } = {},
): WatchSource<T> {
  const cut = { withoutManagedFields: !keepManagedFields };
  return {
    async list(opts) {
      const page = await client.list(kind, { ...scope, ...opts, ...cut, accept: metadataListAccept });
      return { ...page, items: page.items.map((item) => asMetadataOf<T>(kind, item)) };
    },
    async *watch(opts, signal) {
      const events = client.watch(kind, { ...scope, ...opts, ...cut, accept: metadataWatchAccept }, signal);
      for await (const event of events) {
        // A bookmark carries only a resourceVersion; it stays as it came.
        yield event.type === "BOOKMARK"
          ? (event as WatchEvent<T>)
          : { type: event.type, object: asMetadataOf<T>(kind, event.object) };
      }
    },
  };
}
