# lib.sh - sourced by contrib/lab-distros/<engine>/build.sh: stage dir, stand-in programs, rpm/deb builders.
#
# The build scripts assemble a package source directory ($src) from tests/lab/standin and this
# machine's Debian tools, build real .rpm files (Debian's rpmbuild, offline) and real .deb
# files (dpkg-deb), then run `cargoship package create` on it. Everything is local: no network.
# Set before sourcing: here (the engine's dir). After ld_init: src, top (rpmbuild topdir), s (standin dir).
# shellcheck shell=sh disable=SC2154 # here: set by the sourcing build.sh

ld_init() {  # OUT (archive path, or a directory) CARGOSHIP: checks the tools, makes $src
  out=${1:?usage: build.sh OUT.tar.zst [CARGOSHIP]}; cs=${2:-cargoship}
  s=$here/../../../tests/lab/standin
  for t in rpmbuild dpkg-deb /usr/bin/python3 /usr/bin/kubectl /usr/bin/openssl; do
    command -v "$t" >/dev/null 2>&1 || { echo "build.sh: $t is needed (contrib/deps.sh installs it)" >&2; exit 1; }
  done
  work=$(mktemp -d "${TMPDIR:-/tmp}/lab-distro.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  src=$work/src; top=$work/rpmbuild
  mkdir -p "$src/rpm" "$src/deb" "$top"
  # fixed mtimes inside the rpm/deb payloads, so two builds of the same inputs give the same files
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1767225600}; export SOURCE_DATE_EPOCH
}

# LD_VERSION=X.Y.Z builds the same package at another engine version (the `-next` packages the
# upgrade specs install over the base ones): ld_version BASE sets V to the version to build, and
# ld_create rewrites BASE to it throughout distro.yaml (metadata, spec and every file name).
# shellcheck disable=SC2034 # V: read by the sourcing build.sh
ld_version() {  # BASE
  ld_base=$1
  V=${LD_VERSION:-$1}
  case $V in *[!0-9.]*|.*|*.|*..*) echo "build.sh: LD_VERSION must be X.Y.Z: $V" >&2; exit 1 ;; esac
}

ld_stamp() {  # VERSION OUT: the stand-in program reporting VERSION
  /usr/bin/python3 "$s/standin.py" stamp "$1" "$2"
}

# A runit service dir NAME in DIR (default $src/sv) from the stand-in's dir FROM; the sed
# expression SED (may be empty) rewrites the run script (environment files, the binary's path).
ld_sv() {  # FROM NAME [SED] [DIR]
  d=${4:-$src/sv}/$2
  mkdir -p "$d/log"
  sed -e "${3:-}" "$s/runit/$1/run" > "$d/run"
  cp "$s/runit/$1/finish" "$d/finish"
  sed -e "s#runit/$1\\b#runit/$2#g" "$s/runit/$1/log/run" > "$d/log/run"
  chmod 0755 "$d/run" "$d/finish" "$d/log/run"
}

# rpmbuild of SPEC with the sources in $src; the .rpm lands in $src/rpm/. Extra -D defines follow.
# No build-time post-processing (strip, debuginfo, build-id links: the payload is the files as
# given), no automatic dependencies (the lab's rpm database knows only lab-el-base's
# capabilities; each spec says what it needs), zstd level 3 payload (seconds, not minutes).
ld_rpm() {  # SPEC [--define 'k v' ...]
  spec=$1; shift
  rpmbuild --quiet -bb "$spec" \
    --define "_topdir $top" --define "_sourcedir $src" --define "_rpmdir $top/RPMS" \
    --define "__os_install_post %{nil}" --define "debug_package %{nil}" --define "_build_id_links none" \
    --define "_binary_payload w3.zstdio" --define "use_source_date_epoch_as_buildtime 1" \
    --define "clamp_mtime_to_source_date_epoch 1" --define "_buildhost lab-distros" "$@" \
    2> "$work/rpmbuild.err" || { cat "$work/rpmbuild.err" >&2; exit 1; }
  find "$top/RPMS" -name '*.rpm' -exec mv {} "$src/rpm/" \;
}

# dpkg-deb of the tree DIR (DIR/DEBIAN/control etc.), root-owned, gzip -1; the .deb lands in
# $src/deb/ named Package_Version_Architecture.deb as apt's own downloads are.
ld_deb() {  # DIR
  for f in postinst prerm postrm preinst; do [ -f "$1/DEBIAN/$f" ] && chmod 0755 "$1/DEBIAN/$f"; done
  pkg=$(sed -n 's/^Package: //p' "$1/DEBIAN/control")
  ver=$(sed -n 's/^Version: //p' "$1/DEBIAN/control")
  arch=$(sed -n 's/^Architecture: //p' "$1/DEBIAN/control")
  find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group -Zgzip -z1 --build "$1" "$src/deb/${pkg}_${ver}_${arch}.deb" >/dev/null
}

# The container-selinux stand-in rpm (common/container-selinux.spec) into $src/rpm/.
ld_container_selinux() {
  cp "$here/../common/container.cil" "$src/"
  ld_rpm "$here/../common/container-selinux.spec"
}

# A deb tree $work/deb/NAME (left in $tree) with DEBIAN/control from the template CONTROL
# (@VERSION@ replaced) and, for a service package, common/service.{postinst,prerm,postrm}.
ld_debtree() {  # NAME VERSION CONTROL [SERVICE]
  tree=$work/deb/$1
  mkdir -p "$tree/DEBIAN"
  sed "s/@VERSION@/$2/g" "$3" > "$tree/DEBIAN/control"
  if [ -n "${4:-}" ]; then
    for f in postinst prerm postrm; do sed "s/@SERVICE@/$4/g" "$here/../common/service.$f" > "$tree/DEBIAN/$f"; done
  fi
}

# Copies FILE into the deb/rpm-independent tree ROOT at PATH with MODE.
ld_put() {  # ROOT PATH MODE FILE
  mkdir -p "$1$(dirname "$2")"
  cp "$4" "$1$2"; chmod "$3" "$1$2"
}

# LD_FLAVOURS=binary (or rpm,apt, ...) keeps only those flavours' os.files (and the ones of no flavour): a package for proving
# one flavour on hosts that would otherwise take another (every lab host is apt- or rpm-typed).
ld_create() {  # the package archive at $out, from $src with distro.yaml
  if [ -n "${LD_FLAVOURS:-}" ]; then
    LD_FLAVOURS=$LD_FLAVOURS /usr/bin/python3 -c '
import os, sys, yaml
keep = os.environ["LD_FLAVOURS"].split(",")
d = yaml.safe_load(open(sys.argv[1]))
files = d["spec"]["config"]["os"]["files"]
d["spec"]["config"]["os"]["files"] = [f for f in files if f["selector"].get("package") in keep + [None]]
yaml.safe_dump(d, open(sys.argv[2], "w"), sort_keys=False)' "$here/distro.yaml" "$src/distro.yaml"
  else
    cp "$here/distro.yaml" "$src/"
  fi
  if [ -n "${LD_VERSION:-}" ] && [ "$LD_VERSION" != "$ld_base" ]; then
    sed -i "s/$(printf %s "$ld_base" | sed 's/\./\\./g')/$LD_VERSION/g" "$src/distro.yaml"
  fi
  case $out in
    *.tar.zst|*.tar) mkdir -p "$(dirname "$out")" ;;
    *) mkdir -p "$out" ;;  # a directory: package create names the archive cargoship-<name>-<arch>-<version>.tar.zst
  esac
  "$cs" -q package create "$src" -o "$out"
}
