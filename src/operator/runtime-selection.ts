/**
 * Which runtime serves a model: spec.runtime by name (a ServingRuntime in the model's
 * namespace first, then a ClusterServingRuntime), else the best runtime that auto-selects
 * spec.model.format, else a custom image. Pure: the caller passes the cached runtimes.
 */
import type { MLModel } from "../api/mlmodel.ts";
import type { AnyServingRuntime, ServingRuntimeSpec } from "../api/servingruntime.ts";

export interface ResolvedRuntime {
  /** "ClusterServingRuntime/triton", "ServingRuntime/my-rt" or "custom". */
  ref: string;
  /** Absent for a custom image without a runtime. */
  spec?: ServingRuntimeSpec;
}

export type RuntimeResolution =
  | { ok: true; runtime: ResolvedRuntime }
  | { ok: false; reason: "RuntimeNotFound" | "NoRuntimeForFormat" | "FormatNotSupported"; message: string };

function refOf(rt: AnyServingRuntime): string {
  return `${rt.kind}/${rt.metadata.name}`;
}

export function resolveRuntime(
  model: Pick<MLModel, "spec">,
  namespaced: readonly AnyServingRuntime[],
  cluster: readonly AnyServingRuntime[],
): RuntimeResolution {
  const { runtime: wanted, image } = model.spec;
  const format = model.spec.model.format;
  if (wanted) {
    const found =
      namespaced.find((r) => r.metadata.name === wanted) ?? cluster.find((r) => r.metadata.name === wanted);
    if (!found) {
      const known = [...namespaced, ...cluster].map((r) => r.metadata.name).sort();
      return {
        ok: false,
        reason: "RuntimeNotFound",
        message: `spec.runtime "${wanted}" names no ServingRuntime in this namespace and no ClusterServingRuntime; available: ${known.join(", ") || "none (run `mlmodel install`)"}`,
      };
    }
    if (format && !found.spec.supportedModelFormats.some((f) => f.name === format)) {
      return {
        ok: false,
        reason: "FormatNotSupported",
        message: `runtime ${refOf(found)} does not serve model.format "${format}"; it serves ${found.spec.supportedModelFormats.map((f) => f.name).join(", ")}`,
      };
    }
    return { ok: true, runtime: { ref: refOf(found), spec: found.spec } };
  }
  if (format) {
    // Namespaced runtimes win over cluster ones (a team may override a built-in), then
    // priority, then name, so the choice is deterministic.
    const candidates = [namespaced, cluster].flatMap((group, scope) =>
      group.flatMap((rt) =>
        rt.spec.supportedModelFormats
          .filter((f) => f.name === format && f.autoSelect !== false)
          .map((f) => ({ rt, scope, priority: f.priority ?? 0 })),
      ),
    );
    candidates.sort(
      (a, b) =>
        a.scope - b.scope ||
        b.priority - a.priority ||
        (a.rt.metadata.name ?? "").localeCompare(b.rt.metadata.name ?? ""),
    );
    const best = candidates[0];
    if (best) return { ok: true, runtime: { ref: refOf(best.rt), spec: best.rt.spec } };
    if (!image) {
      const formats = [
        ...new Set(
          [...namespaced, ...cluster].flatMap((r) => r.spec.supportedModelFormats.map((f) => f.name)),
        ),
      ];
      return {
        ok: false,
        reason: "NoRuntimeForFormat",
        message: `no runtime auto-selects model.format "${format}"; formats served here: ${formats.sort().join(", ") || "none (run `mlmodel install`)"}. Set spec.runtime, or spec.image for a custom server`,
      };
    }
  }
  return { ok: true, runtime: { ref: "custom" } };
}
