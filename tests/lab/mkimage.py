#!/usr/bin/python3
# mkimage.py - writes a tiny container image archive offline (OCI layout + docker manifest.json in one tar).
#
# usage: mkimage.py OUT.tar REF [FILE_CONTENT]
#   REF  e.g. docker.io/library/hello:1.0 (also registry.lab:5000/x/y:tag)
# The archive holds one layer (/hello.txt) and is readable as both
# `oci-archive:OUT.tar` and `docker-archive:OUT.tar` (skopeo), and by
# `ctr images import` (containerd). Output is byte-for-byte reproducible for
# the same arguments. Standard library only: runs on the machine and in lab hosts.
import hashlib
import io
import json
import sys
import tarfile


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main(argv):
    if len(argv) not in (3, 4) or ":" not in argv[2].rsplit("/", 1)[-1]:
        sys.stderr.write("usage: mkimage.py OUT.tar REGISTRY/REPO:TAG [FILE_CONTENT]\n")
        return 2
    out, ref = argv[1], argv[2]
    content = (argv[3] if len(argv) == 4 else "hello from the cargoship lab\n").encode()
    layer = tar_bytes([("hello.txt", content)])
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/hello"]},
                         "rootfs": {"type": "layers", "diff_ids": [digest(layer)]}}, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer),
                    "size": len(layer)}]}, sort_keys=True).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest),
        "size": len(manifest), "annotations": {"io.containerd.image.name": ref,
                                               "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}]},
        sort_keys=True).encode()
    blob = {d: "blobs/sha256/" + d.split(":")[1] for d in (digest(layer), digest(config), digest(manifest))}
    docker = json.dumps([{"Config": blob[digest(config)], "RepoTags": [ref],
                          "Layers": [blob[digest(layer)]]}]).encode()
    with open(out, "wb") as f:
        f.write(tar_bytes([("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index),
                           ("manifest.json", docker), (blob[digest(layer)], layer),
                           (blob[digest(config)], config), (blob[digest(manifest)], manifest)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
