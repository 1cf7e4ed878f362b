#!/usr/bin/env python3
"""Write a single-layer OCI/Docker image as a docker-archive tarball (the `docker save`
format), without any daemon. `ctr -n k8s.io images import FILE` loads it into containerd.

Usage:
  mkimage.py --tag NAME:TAG --out FILE.tar
             [--entrypoint JSON] [--cmd JSON] [--user UID[:GID]] [--workdir DIR]
             [--env K=V]... [--label K=V]...
             [--file SRC:DEST[:MODE]]... [--symlink DEST:TARGET]... [--dir DEST[:MODE]]...

The layer is reproducible: entries sorted, owned by 0:0, mtime 0 (so the same inputs give
the same image id).
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def parse_mode(s, default):
    return int(s, 8) if s else default


def build_layer(files, symlinks, dirs):
    entries = {}  # path -> (kind, payload, mode)

    def add_parents(path):
        parts = path.strip("/").split("/")[:-1]
        cur = ""
        for p in parts:
            cur = f"{cur}/{p}" if cur else p
            entries.setdefault(cur, ("dir", None, 0o755))

    for spec in dirs:
        dest, _, mode = spec.partition(":")
        dest = dest.strip("/")
        add_parents(dest)
        entries[dest] = ("dir", None, parse_mode(mode, 0o755))
    for spec in files:
        parts = spec.split(":")
        if len(parts) < 2:
            sys.exit(f"bad --file {spec!r}: want SRC:DEST[:MODE]")
        src, dest = parts[0], parts[1].strip("/")
        mode = parse_mode(parts[2] if len(parts) > 2 else "", None)
        with open(src, "rb") as f:
            data = f.read()
        if mode is None:
            mode = os.stat(src).st_mode & 0o7777
        add_parents(dest)
        entries[dest] = ("file", data, mode)
    for spec in symlinks:
        dest, _, target = spec.partition(":")
        dest = dest.strip("/")
        add_parents(dest)
        entries[dest] = ("symlink", target, 0o777)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            kind, payload, mode = entries[path]
            ti = tarfile.TarInfo(path)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mtime = 0
            ti.mode = mode
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                tar.addfile(ti)
            elif kind == "symlink":
                ti.type = tarfile.SYMTYPE
                ti.linkname = payload
                tar.addfile(ti)
            else:
                ti.size = len(payload)
                tar.addfile(ti, io.BytesIO(payload))
    return buf.getvalue()


def add_bytes(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    ti.mode = 0o644
    tar.addfile(ti, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--user")
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--file", action="append", default=[])
    ap.add_argument("--symlink", action="append", default=[])
    ap.add_argument("--dir", action="append", default=[])
    a = ap.parse_args()

    layer = build_layer(a.file, a.symlink, a.dir)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()

    cfg = {"Env": a.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
           "WorkingDir": a.workdir}
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        cfg["Cmd"] = json.loads(a.cmd)
    if a.user:
        cfg["User"] = a.user
    if a.label:
        cfg["Labels"] = dict(kv.split("=", 1) for kv in a.label)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/lib/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_id = hashlib.sha256(config_bytes).hexdigest()
    layer_dir = hashlib.sha256(layer).hexdigest()

    manifest = [{"Config": f"{config_id}.json", "RepoTags": [a.tag], "Layers": [f"{layer_dir}/layer.tar"]}]
    name, _, tag = a.tag.rpartition(":")
    repositories = {name: {tag: layer_dir}}
    layer_json = {"id": layer_dir, "created": "1970-01-01T00:00:00Z", "container_config": cfg, "os": "linux"}

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, f"{layer_dir}/VERSION", b"1.0")
        add_bytes(tar, f"{layer_dir}/json", json.dumps(layer_json).encode())
        add_bytes(tar, f"{layer_dir}/layer.tar", layer)
        add_bytes(tar, f"{config_id}.json", config_bytes)
        add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
        add_bytes(tar, "repositories", json.dumps(repositories).encode())
    os.replace(tmp, a.out)
    print(f"{a.tag} sha256:{config_id} -> {a.out} ({len(layer)} byte layer)")


if __name__ == "__main__":
    main()
