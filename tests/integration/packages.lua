-- tests/integration/packages.lua: a real .rpm, a real .deb and a big file, built offline once per test run.
--
-- build() -> {dir, rpm, deb, big, big_sha256}: cached under $CS_TEST_PKG_DIR (default
-- /tmp/cargoship-test-pkgs-<LAB_PREFIX>): a spec or the benchmark that runs later in the same
-- run finds them there. The .rpm is made by Debian's rpmbuild (noarch, a %post scriptlet in
-- rpm's built-in Lua, so it needs no /bin/sh from the Rocky look-alike's empty rpm database),
-- the .deb by dpkg-deb (a postinst script); both leave a mark under /var/lib/cs-test.
local util = require "cargoship.util"

local M = {}

local q = util.quote

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  if not ok then error("command failed: " .. cmd .. "\n" .. out, 2) end
  return out
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

M.RPM_MARK = "/var/lib/cs-test/rpm-post"
M.DEB_MARK = "/var/lib/cs-test/deb-postinst"

local SPEC = [[
Name: cs-test
Version: 1.0
Release: 1
Summary: cargoship test package
License: MIT
BuildArch: noarch
AutoReqProv: no

%description
A package whose post-install scriptlet leaves a mark.

%install
mkdir -p %{buildroot}/usr/share/cs-test
echo "rpm payload" > %{buildroot}/usr/share/cs-test/hello

%files
/usr/share/cs-test/hello

%post -p <lua>
posix.mkdir("/var/lib/cs-test")
local f = io.open("/var/lib/cs-test/rpm-post", "w")
f:write("cs-test %post ran\n")
f:close()
]]

local CONTROL = [[
Package: cs-test
Version: 1.0
Architecture: all
Maintainer: cargoship tests <tests@cargoship.invalid>
Description: cargoship test package
 A package whose postinst leaves a mark.
]]

local POSTINST = "#!/bin/sh\nset -e\nmkdir -p /var/lib/cs-test\n"
  .. "echo 'cs-test postinst ran' > /var/lib/cs-test/deb-postinst\n"

-- An OCI layout at dir holding each ref as a two-architecture index (amd64, arm64), made by
-- hand: a real tar layer, its config and manifest per arch, the index, sha256 digests.
function M.oci_layout(dir, refs)
  local archive = require "cargoship.archive"
  local json = require "cargoship.json"
  local function blob(media, bytes)
    local hex = util.sha256(bytes)
    sh("mkdir -p " .. q(dir .. "/blobs/sha256"))
    write(dir .. "/blobs/sha256/" .. hex, bytes)
    return { mediaType = media, digest = "sha256:" .. hex, size = #bytes }
  end
  sh("mkdir -p " .. q(dir .. "/blobs/sha256"))
  local function image(arch, ref)
    local t = dir .. "/layer.tar"
    assert(archive.write(t, { { name = "etc", dir = true },
      { name = "etc/image", data = arch .. " " .. ref .. "\n" } }))
    local f = assert(io.open(t, "rb"))
    local layer = blob("application/vnd.oci.image.layer.v1.tar", f:read("a"))
    f:close()
    os.remove(t)
    local config = blob("application/vnd.oci.image.config.v1+json", json.encode({ architecture = arch, os = "linux",
      rootfs = { type = "layers", diff_ids = { layer.digest } } }))
    local man = blob("application/vnd.oci.image.manifest.v1+json", json.encode({ schemaVersion = 2,
      mediaType = "application/vnd.oci.image.manifest.v1+json", config = config, layers = { layer } }))
    man.platform = { os = "linux", architecture = arch }
    return man
  end
  local top = {}
  for _, ref in ipairs(refs) do
    local idx = blob("application/vnd.oci.image.index.v1+json", json.encode({ schemaVersion = 2,
      mediaType = "application/vnd.oci.image.index.v1+json",
      manifests = { image("amd64", ref), image("arm64", ref) } }))
    idx.annotations = { ["org.opencontainers.image.ref.name"] = ref }
    top[#top + 1] = idx
  end
  write(dir .. "/index.json", json.encode({ schemaVersion = 2, manifests = top }))
  write(dir .. "/oci-layout", '{"imageLayoutVersion":"1.0.0"}')
  return dir
end

function M.build(opts)
  opts = opts or {}
  local dir = os.getenv("CS_TEST_PKG_DIR") or ("/tmp/cargoship-test-pkgs-" .. (os.getenv("LAB_PREFIX") or "lab"))
  local big_mib = opts.big_mib or 64
  local r = { dir = dir, rpm = dir .. "/cs-test-1.0-1.noarch.rpm", deb = dir .. "/cs-test_1.0_all.deb",
              big = dir .. "/big-" .. big_mib .. ".bin" }
  sh("mkdir -p " .. q(dir))
  if not io.open(r.rpm, "rb") then
    local top = dir .. "/rpmbuild"
    sh("mkdir -p " .. q(top .. "/SPECS"))
    write(top .. "/SPECS/cs-test.spec", SPEC)
    sh("rpmbuild --quiet --define " .. q("_topdir " .. top) .. " -bb " .. q(top .. "/SPECS/cs-test.spec"))
    sh("cp " .. q(top .. "/RPMS/noarch/cs-test-1.0-1.noarch.rpm") .. " " .. q(r.rpm))
  end
  if not io.open(r.deb, "rb") then
    local root = dir .. "/debroot"
    sh("rm -rf " .. q(root) .. " && mkdir -p " .. q(root .. "/DEBIAN") .. " " .. q(root .. "/usr/share/cs-test"))
    write(root .. "/DEBIAN/control", CONTROL)
    write(root .. "/DEBIAN/postinst", POSTINST)
    write(root .. "/usr/share/cs-test/hello", "deb payload\n")
    sh("chmod 0755 " .. q(root .. "/DEBIAN/postinst"))
    sh("dpkg-deb --root-owner-group -Zgzip --build " .. q(root) .. " " .. q(r.deb))
  end
  if not io.open(r.big, "rb") then
    -- incompressible, so no layer of the path can make it cheaper than it is
    sh("head -c " .. (big_mib * 1048576) .. " /dev/urandom > " .. q(r.big .. ".tmp") .. " && mv " .. q(r.big .. ".tmp")
      .. " " .. q(r.big))
  end
  r.big_sha256 = util.sha256_file(r.big)
  return r
end

return M
