// One rule for every name that comes from outside (object keys, archive entries): it must stay
// inside DEST. Checked on the name itself, before any file is touched.
import { DownloadError } from "./errors.ts";

/**
 * Normalises `name` to a relative "/"-separated path, or throws UnsafeArchive/InvalidArgument
 * (per `what`) for an absolute path, a ".." segment, a backslash or NUL, or an empty name.
 */
export function safeRelativePath(name: string, what: "archive entry" | "object"): string {
  const reason = what === "archive entry" ? "UnsafeArchive" : "InvalidArgument";
  const refuse = (why: string) =>
    new DownloadError(reason, `${what} "${name}" ${why}`, {
      hint: "names must be relative paths that stay inside the model directory",
    });
  if (name.includes("\0")) throw refuse("contains a NUL byte");
  if (name.includes("\\")) throw refuse("contains a backslash");
  if (name.startsWith("/") || /^[a-zA-Z]:/.test(name)) throw refuse("is an absolute path");
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw refuse('climbs out with ".."');
  if (parts.length === 0) throw refuse("is empty");
  return parts.join("/");
}
