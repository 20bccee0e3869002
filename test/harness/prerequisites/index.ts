/**
 * Every prerequisite a test can declare (`// test-needs: NAME`, see needs.ts). To add one, write
 * a Prerequisite (engine.ts: a cheap check, an install, how to do it by hand; its check may say
 * "unavailable" with a reason, and then the tests that need it are reported as skipped) and list
 * it here.
 */
import type { Prerequisite } from "./engine.ts";
import { prometheus } from "./monitoring.ts";
import { images, ownRealNode, realNode } from "./real-node.ts";
import { azurite, fakeGcs, moto } from "./test-servers.ts";
import { cluster, curl, helm, openssl } from "./tools.ts";

export const registry: readonly Prerequisite[] = [
  cluster,
  helm,
  openssl,
  curl,
  moto,
  azurite,
  fakeGcs,
  realNode,
  ownRealNode,
  images,
  prometheus,
];
