#!/usr/bin/python3
"""make_archive_seeds.py - writes the hostile archives of corpus/archive (run again to regenerate them):
a good package, path traversal, absolute names, links out of the tree, devices, huge members and
decompression bombs in tar, tar.gz and tar.zst. Deterministic: fixed mtimes, no owner names."""
import gzip, io, os, subprocess, sys, tarfile

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "archive")
os.makedirs(out, exist_ok=True)


def member(name, data=b"", kind=tarfile.REGTYPE, link="", size=None, mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode, ti.mtime = kind, link, mode, 1700000000
    ti.size = len(data) if size is None else size
    return ti, data


def tar(members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for ti, data in members:
            t.addfile(ti, io.BytesIO(data) if ti.type == tarfile.REGTYPE else None)
    return buf.getvalue()


# a 64 KiB window (wlog=16): from stdin zstd writes no content size, so the frame asks for level
# 19's full 8 MiB window, which the decoder allocates for every input mutated from the seed; under
# ASan that allocation and its free (shadow poisoning, page faults) were ~60% of the archive
# target's time. Mutations still reach large windows: the descriptor is one byte.
def zstd(data):
    return subprocess.run(["zstd", "-q", "-19", "--zstd=wlog=16", "-c"], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


distro = b"apiVersion: v1\nkind: ZarfDistro\nmetadata: {name: t}\nspec: {type: k3s, version: v1.30.0}\n"
good = tar([member("./", kind=tarfile.DIRTYPE, mode=0o755), member("./distro.yaml", distro),
            member("./bin/", kind=tarfile.DIRTYPE, mode=0o755), member("./bin/k3s", b"#!/bin/sh\n", mode=0o755),
            member("./checksums.txt", b"0" * 64 + b"  bin/k3s\n")])
write("good.tar", good)
write("good.tar.zst", zstd(good))
write("good.tar.gz", gzip.compress(good, mtime=0))
write("good-gnu.tar", tar([member("distro.yaml", distro), member("a/" * 60 + "long", b"x")], tarfile.GNU_FORMAT))
write("traversal.tar", tar([member("distro.yaml", distro), member("../escaped", b"x"), member("a/../../b", b"y")]))
write("absolute.tar", tar([member("/tmp/cs-fuzz-absolute", b"x")]))
write("symlink-out.tar", tar([member("etc", kind=tarfile.SYMTYPE, link="/etc"), member("etc/evil", b"x")]))
write("symlink-dotdot.tar", tar([member("d", kind=tarfile.SYMTYPE, link="../../.."), member("d/x", b"x")]))
write("hardlink.tar", tar([member("f", b"x"), member("h", kind=tarfile.LNKTYPE, link="/etc/passwd")]))
write("devices.tar", tar([member("null", kind=tarfile.CHRTYPE), member("fifo", kind=tarfile.FIFOTYPE),
                          member("blk", kind=tarfile.BLKTYPE)]))
write("twice.tar", tar([member("f", b"one"), member("f", b"two"), member("d", kind=tarfile.DIRTYPE),
                        member("d", b"file over dir")]))
write("dir-then-file.tar", tar([member("x/", kind=tarfile.DIRTYPE), member("x/y/z", b"deep")]))
# a member header claiming far more than the archive holds (truncated)
ti, _ = member("huge", size=1 << 40)
write("huge-claimed.tar", ti.tobuf(tarfile.PAX_FORMAT) + b"\0" * 1024)
# a decompression bomb: 320 KiB of zeros (past the harness's 256 KiB cap on one file) in ~100 bytes.
# Not bigger: every input mutated from it is unpacked twice, and a 5 MiB one made the target 8x slower.
bomb = tar([member("bomb", b"\0" * (320 << 10))])
write("bomb.tar.zst", zstd(bomb))
# (no gzip bomb: gzip's ratio makes it 80 KB, and libFuzzer mutates inputs up to the largest seed)
del bomb
write("truncated.tar.zst", zstd(good)[:40])
write("empty", b"")
print("archive seeds:", ", ".join(sorted(os.listdir(out))), file=sys.stderr)
