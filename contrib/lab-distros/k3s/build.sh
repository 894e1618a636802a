#!/bin/sh
# build.sh OUTDIR [CARGOSHIP]: the k3s stand-in as a binary-flavoured distro package (cargoship package create).
# Assembles the package's source directory from tests/lab/standin: the program stamped
# v1.35.2+k3s1 as /usr/local/bin/k3s, the units and runit dirs under cargoship's service names
# (k3s-server, k3s-agent), and copies of this machine's /usr/bin/kubectl (the stand-in's
# `k3s kubectl` runs it; the lab images lack it) and /usr/bin/openssl (the stand-in's
# certificates; some images lack it). RPM and APT flavours are not built yet.
set -eu
out=${1:?outdir}; cs=${2:-cargoship}
here=$(cd "$(dirname "$0")" && pwd)
s=$here/../../../tests/lab/standin
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
/usr/bin/python3 "$s/standin.py" stamp v1.35.2+k3s1 "$src/k3s"
sed 's#k3s.service.env#k3s-server.service.env#' "$s/systemd/k3s.service" > "$src/k3s-server.service"
cp "$s/systemd/k3s-agent.service" "$src/"
mkdir -p "$src/sv-server/log" "$src/sv-agent/log"
cp "$s/runit/k3s/run" "$s/runit/k3s/finish" "$src/sv-server/"
cp "$s/runit/k3s/log/run" "$src/sv-server/log/run"
cp "$s/runit/k3s-agent/run" "$s/runit/k3s-agent/finish" "$src/sv-agent/"
cp "$s/runit/k3s-agent/log/run" "$src/sv-agent/log/run"
cp /usr/bin/kubectl /usr/bin/openssl "$src/"
cp "$here/distro.yaml" "$src/"
mkdir -p "$out"
"$cs" package create "$src" -o "$out"
