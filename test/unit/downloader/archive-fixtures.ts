// Builds good and hostile archives with Python's tarfile/zipfile (python3 is on every CI
// machine), since well-behaved archivers refuse to write the hostile ones.
import { execFileSync } from "node:child_process";
import { join } from "node:path";

const script = String.raw`
import io, sys, tarfile, zipfile
kind, out = sys.argv[1], sys.argv[2]

def tar(entries, mode="w:gz"):
    with tarfile.open(out, mode) as t:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[e.get("type", "file")]
            info.linkname = e.get("link", "")
            data = e.get("data", b"")
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)

def zip_(entries):
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for e in entries:
            info = zipfile.ZipInfo(e["name"])
            info.compress_type = zipfile.ZIP_DEFLATED
            if e.get("type") == "sym":
                info.external_attr = (0o120777 << 16)
            else:
                info.external_attr = (0o100644 << 16)
            z.writestr(info, e.get("data", b""))

good = [{"name": "model/", "type": "dir"}, {"name": "model/saved_model.pb", "data": b"pb" * 1000}, {"name": "model/variables/v.index", "data": b"index"}]
cases = {
    "good-tgz": lambda: tar(good),
    "good-tar": lambda: tar(good, "w"),
    "good-zip": lambda: zip_([e for e in good if e.get("type") != "dir"]),
    "traversal-tgz": lambda: tar([{"name": "ok.txt", "data": b"ok"}, {"name": "../evil.txt", "data": b"evil"}]),
    "absolute-tgz": lambda: tar([{"name": "/tmp/mlmodel-evil.txt", "data": b"evil"}]),
    "symlink-tgz": lambda: tar([{"name": "link", "type": "sym", "link": "/etc"}, {"name": "link/passwd", "data": b"evil"}]),
    "hardlink-tgz": lambda: tar([{"name": "a.txt", "data": b"a"}, {"name": "b.txt", "type": "hard", "link": "/etc/passwd"}]),
    "fifo-tgz": lambda: tar([{"name": "pipe", "type": "fifo"}]),
    "bomb-tgz": lambda: tar([{"name": "zeros.bin", "data": b"\0" * (64 << 20)}]),
    "traversal-zip": lambda: zip_([{"name": "../evil.txt", "data": b"evil"}]),
    "symlink-zip": lambda: zip_([{"name": "link", "type": "sym", "data": b"/etc/passwd"}]),
    "bomb-zip": lambda: zip_([{"name": "zeros.bin", "data": b"\0" * (64 << 20)}]),
    "not-an-archive": lambda: open(out, "wb").write(b"this is not gzip at all" * 100),
}
cases[kind]()
`;

export type FixtureKind =
  | "good-tgz"
  | "good-tar"
  | "good-zip"
  | "traversal-tgz"
  | "absolute-tgz"
  | "symlink-tgz"
  | "hardlink-tgz"
  | "fifo-tgz"
  | "bomb-tgz"
  | "traversal-zip"
  | "symlink-zip"
  | "bomb-zip"
  | "not-an-archive";

/** Writes the fixture into `dir` and returns its path (named with the right extension). */
export function makeArchive(dir: string, kind: FixtureKind): string {
  const ext = kind.endsWith("zip") ? ".zip" : kind === "good-tar" ? ".tar" : ".tar.gz";
  const out = join(dir, `${kind}${ext}`);
  execFileSync("python3", ["-c", script, kind, out]);
  return out;
}
