/**
 * What the runtime offers to its users' unit tests, apart from the production API (index.ts) so
 * that an operator's process and bundle never load it: `mlmodel-operator/runtime/testing`.
 */

export type { FakeClientOptions, FakeFailureMatch, FakeRequest } from "./fake-client.ts";
export { FakeClient } from "./fake-client.ts";
export type { FakeReconcileContext, RecordedEvent } from "./fake-context.ts";
export { fakeReconcileContext } from "./fake-context.ts";
