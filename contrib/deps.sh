#!/usr/bin/env bash
# deps.sh - installs, from Debian's archive, every package cargoship builds, tests and benchmarks with.
# Only what is missing is installed; safe to run again; silent when nothing is missing.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config            # the build
  liblua5.4-dev lua5.4 libssh2-1-dev libyaml-dev libssl-dev libedit-dev libarchive-dev
  lua-cjson lua-busted lua-check shellcheck   # Lua libraries, specs, lint
  openssh-client openssh-server debootstrap iproute2 util-linux procps psmisc  # the lab
  tmux valgrind time                          # terminal, leak tests, benchmarks
  clang libclang-rt-14-dev                    # the fuzz targets: clang-14 and its libFuzzer runtime
  # real peers of the package, engine, firewall and secret specs (all offline):
  rpm dpkg-dev                                # rpmbuild and dpkg-deb build test packages
  skopeo containerd                           # check exported image archives (skopeo inspect, ctr import)
  kubernetes-client                           # Debian's kubectl: the lab's stand-in engines ship it
  python3 python3-yaml openssl                # Debian's /usr/bin/python3 (stand-ins, mkimage.py); stand-in certs
  age ansible                                 # secrets; the Ansible baseline of the benchmarks
  python3-jsonschema                          # a real JSON Schema validator for `cargoship schema`
  curl                                        # `cargoship sha256sum URL` fetches with it (the operator's machine)
  zsh fish                                    # real shells for the specs of `cargoship completion zsh|fish`
)
missing=()
for p in "${PKGS[@]}"; do
  [[ $p == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
[ "$(id -u)" = 0 ] && SUDO= || SUDO=sudo
# Some machines carry the Google Cloud SDK's `kubectl` package, whose
# /usr/bin/kubectl (a version dispatcher) kubernetes-client would overwrite,
# so dpkg refuses it. Divert that file aside (kept as kubectl.google-cloud-sdk)
# in favour of kubernetes-client; `dpkg-divert --remove` undoes it.
if [[ " ${missing[*]} " == *" kubernetes-client "* ]] && dpkg-query -W -f='${Status}' kubectl 2>/dev/null | grep -q 'ok installed' \
  && ! dpkg-divert --list /usr/bin/kubectl | grep -q kubernetes-client; then
  $SUDO dpkg-divert --quiet --package kubernetes-client --rename --divert /usr/bin/kubectl.google-cloud-sdk --add /usr/bin/kubectl
fi
echo "deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
