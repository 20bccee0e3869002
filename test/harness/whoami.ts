/**
 * Who the API server authenticated a client as (a SelfSubjectReview): the credential tests ask
 * it, so each proves its credential was used, not merely that a request went through.
 */
import { type Connection, KubeClient, type KubeObject, type ResourceKind } from "../../src/runtime/index.ts";

const selfSubjectReview: ResourceKind = {
  group: "authentication.k8s.io",
  version: "v1",
  kind: "SelfSubjectReview",
  plural: "selfsubjectreviews",
  namespaced: false,
};

/** The user name the API server saw for this client (or connection). */
export async function whoAmI(client: KubeClient | Connection): Promise<string> {
  const c = client instanceof KubeClient ? client : new KubeClient(client);
  const review = await c.create<KubeObject & { status?: { userInfo?: { username?: string } } }>(
    selfSubjectReview,
    { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview", metadata: {} },
  );
  return review.status?.userInfo?.username ?? "";
}
