import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { buildTags } from "../../../src/cluster/binaries.ts";
import {
  compiledServiceDiscovery,
  prometheusConfig,
  prometheusModuleVersion,
  prometheusRecipe,
} from "../../../src/cluster/prometheus.ts";

/** Every `<name>_sd_configs` key anywhere in a parsed config, by name. */
function serviceDiscoveryNames(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap(serviceDiscoveryNames);
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, inner]) => {
    const match = /^(\w+)_sd_configs$/.exec(key);
    return [...(match ? [match[1]!] : []), ...serviceDiscoveryNames(inner)];
  });
}

describe("the Prometheus build", () => {
  it("compiles in every service discovery the local cluster's prometheus.yml uses", async () => {
    const config = parse(await prometheusConfig("/cluster", "/cluster/kubeconfig"));
    const used = [...new Set(serviceDiscoveryNames(config))].sort();
    assert.deepEqual(used, ["file", "kubernetes"]);
    for (const name of used) assert.ok(compiledServiceDiscovery.includes(name), `${name}_sd_configs`);
  });

  it("leaves out every other discovery, and keys its cache entry apart from a build with them all", () => {
    const tags = buildTags(prometheusRecipe).split(",");
    assert.ok(tags.includes("remove_all_sd"), tags.join(","));
    assert.ok(tags.includes("enable_kubernetes_sd"), tags.join(","));
    assert.notEqual(prometheusRecipe.key, `prometheus-${prometheusModuleVersion}`);
    assert.match(prometheusRecipe.key, /kubernetes-sd$/);
  });
});
