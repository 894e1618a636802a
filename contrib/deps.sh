#!/usr/bin/env bash
# deps.sh - installs, from Debian's archive, every package cargoship builds, tests and benchmarks with.
# Only what is missing is installed; safe to run again.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config            # the build
  liblua5.4-dev lua5.4 libssh2-1-dev libyaml-dev libssl-dev libedit-dev libarchive-dev
  lua-cjson lua-busted lua-check shellcheck   # Lua libraries, specs, lint
  openssh-client openssh-server debootstrap iproute2 util-linux procps psmisc  # the lab
  tmux valgrind time                          # terminal, leak tests, benchmarks
)
missing=()
for p in "${PKGS[@]}"; do
  [[ $p == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] && SUDO= || SUDO=sudo
  echo "deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
