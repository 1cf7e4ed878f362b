#!/usr/bin/env python3
"""Write docker-archive tarballs (scripts/lib/mkimage.py's, one per platform) as one OCI
image layout in a tar file: what `ctr images import`, `skopeo copy oci-archive:FILE:TAG`
and `oras cp --from-oci-layout FILE:TAG` read. Prints the digest that names the image:
the image index's (index.json points at it, tagged --ref-name).

Usage:
  ocilayout.py --archive FILE.tar [--archive FILE.tar]... --ref-name TAG --out FILE.tar
               [--annotation K=V]...

The configs are copied byte for byte (the image IDs stay those of the archives); layers are
gzip-compressed with mtime 0 and the tar entries are sorted, owned by 0:0, mtime 0, so the
same archives give the same digest.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class Blobs:
    def __init__(self):
        self.by_digest = {}

    def add(self, media_type, data, **extra):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.by_digest[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data), **extra}


def read_archive(path):
    """The config bytes and the uncompressed layers of a docker-archive with one image."""
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        if len(manifest) != 1:
            sys.exit(f"{path}: {len(manifest)} images in manifest.json, expected 1")
        config = tar.extractfile(manifest[0]["Config"]).read()
        layers = [tar.extractfile(name).read() for name in manifest[0]["Layers"]]
    diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    got = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    if got != diff_ids:
        sys.exit(f"{path}: layers {got} are not the config's diff_ids {diff_ids}")
    return config, layers


def image_manifest(blobs, path):
    config, layers = read_archive(path)
    cfg = json.loads(config)
    platform = {"architecture": cfg["architecture"], "os": cfg["os"]}
    if cfg.get("variant"):
        platform["variant"] = cfg["variant"]
    descriptors = [blobs.add(LAYER_GZIP, gzip.compress(layer, compresslevel=9, mtime=0)) for layer in layers]
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": blobs.add(CONFIG, config),
        "layers": descriptors,
    }
    return blobs.add(MANIFEST, canonical(manifest), platform=platform)


def add_bytes(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    tar.addfile(ti, io.BytesIO(data))


def add_dir(tar, name):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mtime = 0
    ti.mode = 0o755
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    tar.addfile(ti)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archive", action="append", required=True)
    ap.add_argument("--ref-name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--annotation", action="append", default=[])
    a = ap.parse_args()

    blobs = Blobs()
    manifests = [image_manifest(blobs, path) for path in a.archive]
    platforms = [json.dumps(m["platform"], sort_keys=True) for m in manifests]
    if len(set(platforms)) != len(platforms):
        sys.exit(f"two archives for the same platform: {platforms}")
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}
    if a.annotation:
        index["annotations"] = dict(kv.split("=", 1) for kv in a.annotation)
    top = blobs.add(INDEX, canonical(index), annotations={"org.opencontainers.image.ref.name": a.ref_name})
    # The same image again without a name: `ctr images import --digests` names only unnamed
    # entries by their digest (NAME@sha256:...), the name the chart's pinned image resolves to.
    unnamed = {k: v for k, v in top.items() if k != "annotations"}
    layout_index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [top, unnamed]}

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add_bytes(tar, "index.json", canonical(layout_index))
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        for digest in sorted(blobs.by_digest):
            add_bytes(tar, "blobs/sha256/" + digest.removeprefix("sha256:"), blobs.by_digest[digest])
    os.replace(tmp, a.out)
    print(top["digest"])
    for m in manifests:
        p = m["platform"]
        print(f"  {p['os']}/{p['architecture']}: manifest {m['digest']}", file=sys.stderr)


if __name__ == "__main__":
    main()
