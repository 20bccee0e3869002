import type { KubeObject, ObjectMeta } from "../runtime/index.ts";

/** A custom object with a typed spec and status, as the API server sends it. */
export interface KubeObjectOf<K extends string, Spec, Status = never> extends KubeObject {
  kind: K;
  metadata: ObjectMeta;
  spec: Spec;
  status?: Status;
}
