-- Specs of `cargoship package create/inspect/verify`: offline builds, and each corruption named by its file.
local build = require "cargoship.package.build"
local package = require "cargoship.package"
local util = require "cargoship.util"
local yaml = require "cargoship.yaml"

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

local function write(path, data)
  os.execute("mkdir -p " .. util.quote(path:match("^(.*)/")))
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

local BIN = "#!/bin/sh\necho rke2 stand-in\n"

local function source_dir(root, extra)
  write(root .. "/src/site/ca.pem", "-----BEGIN CERTIFICATE-----\n")
  write(root .. "/src/values.yaml", "addons: {disabled: [rke2-ingress-nginx]}\n")
  write(root .. "/mirror/v1/rke2", BIN)
  write(root .. "/src/distro.yaml", [[
apiVersion: zarf.dev/v1alpha1
kind: ZarfDistro
metadata: {name: demo, version: 1.35.4-rke2r1, architecture: amd64}
spec:
  type: rke2
  version: 1.35.4-rke2r1
  values:
    files: [values.yaml]
    mappings: [{source: .addons.disabled, target: .config.disable}]
  config:
    os:
      files:
        - source: https://example.invalid/v1/rke2
          target: /usr/local/bin/rke2
          executable: true
          shasum: "]] .. util.sha256(BIN) .. [["
          selector: {package: binary}
    files:
      - {source: site/ca.pem, target: /etc/pki/site.pem, perm: "0640", user: root, group: root,
         symlinks: [/etc/pki/site-link.pem]}
      - {data: "hello\n", target: /etc/hello.txt}
]] .. (extra or ""))
  return root .. "/src"
end

-- A distro.yaml with config.files and no config.os (metadata extras, a top-level line)
local function files_only_yaml(meta, top)
  return "kind: ZarfDistro\nmetadata: {name: plain, version: 1.35.3, architecture: amd64" .. meta .. "}\n" .. top
    .. "spec:\n  type: upstream\n  version: 1.35.3\n  config:\n    files:\n"
    .. '      - {source: blob.bin, target: /opt/blob.bin, perm: "0644"}\n'
end

local function rebuild(root)
  return build.create(root .. "/src", { out = root,
    file_overrides = { "https://example.invalid=" .. root .. "/mirror" } })
end

local function create(root, extra, opts)
  opts = opts or {}
  opts.out = opts.out or root
  opts.file_overrides = opts.file_overrides or { "https://example.invalid=" .. root .. "/mirror" }
  return build.create(source_dir(root, extra), opts)
end

-- an unpacked copy of a fresh package, for the corruption cases
local function unpacked(root)
  local out = assert(create(root))
  return assert(package.unpack(out))
end

local function edit_yaml(dir, fn)
  local doc = yaml.load_file(dir .. "/distro.yaml")[1]
  fn(doc)
  write(dir .. "/distro.yaml", yaml.dump(doc))
end

describe("cargoship package create", function()
  local root
  before_each(function() root = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)

  it("stages files, data, mirrored URLs and values, with checksums.txt and the aggregate", function()
    local out = assert(create(root))
    assert.equal(root .. "/cargoship-demo-amd64-1.35.4-rke2r1.tar.zst", out)
    local listing = {}
    for _, e in ipairs(assert(require("cargoship.archive").list(out))) do listing[e.name] = e end
    assert.equal(tonumber("755", 8), listing["os/0/rke2"].mode)
    assert.equal(tonumber("644", 8), listing["files/0/site.pem"].mode)
    assert.truthy(listing["values/0-values.yaml"])
    local p = assert(package.read(out))
    assert.is_true(p.built)
    assert.equal(util.sha256(read(p.dir .. "/checksums.txt")), p.aggregate)
    assert.equal(BIN, read(p.dir .. "/os/0/rke2"))
    assert.equal("hello\n", read(p.dir .. "/files/1/hello.txt"))
    assert.same({ "values/0-values.yaml" }, p.values_files)
    assert.equal("0640", p.files[1].mode)
    assert.same({ "/etc/pki/site-link.pem" }, p.files[1].symlinks)
    assert.equal("https://example.invalid/v1/rke2", p.doc.build.fileSources[1].declared)
    assert.equal(root .. "/mirror", p.doc.build.fileOverrides["https://example.invalid"])
    package.release(p)
    assert.is_nil(io.open(p.dir .. "/distro.yaml"))
  end)

  it("stages config.files once when there is no config.os: they are not OS files", function()
    write(root .. "/src/blob.bin", "payload\n")
    write(root .. "/src/distro.yaml", files_only_yaml("", ""))
    local out = assert(build.create(root .. "/src", { out = root }))
    local names = {}
    for _, e in ipairs(assert(require("cargoship.archive").list(out))) do
      if e.type == "file" then names[#names + 1] = e.name end
    end
    table.sort(names)
    assert.same({ "cargoship-integrity.txt", "checksums.txt", "distro.yaml", "files/0/blob.bin" }, names)
    local p = assert(package.read(out))
    assert.equal(1, #p.files)
    assert.same({}, p.os_files)
    package.release(p)
  end)

  it("reads a Go-tool package that has config.files and no os/ directory", function()
    local dir = root .. "/pkg"
    write(dir .. "/files/0/blob.bin", "payload\n")
    local sums = util.sha256("payload\n") .. " files/0/blob.bin\n"
    write(dir .. "/checksums.txt", sums)
    write(dir .. "/distro.yaml",
      files_only_yaml(", aggregateChecksum: " .. util.sha256(sums), "build: {architectures: [amd64]}\n"))
    local p = assert(package.read(dir))
    assert.equal(1, #p.files)
    assert.same({}, p.os_files)
    package.release(p)
  end)

  it("archives as .tar when metadata.uncompressed", function()
    source_dir(root)
    local text = read(root .. "/src/distro.yaml"):gsub("architecture: amd64}",
      "architecture: amd64, uncompressed: true}")
    write(root .. "/src/distro.yaml", text)
    local out = assert(rebuild(root))
    assert.matches("%-1%.35%.4%-rke2r1%.tar$", out)
    assert.equal("ustar", read(out):sub(258, 262))
  end)

  it("refuses an -o whose directory does not exist, before any work, naming it", function()
    for _, out in ipairs({ root .. "/absent", root .. "/absent/p.tar.zst", root .. "/src/distro.yaml/" }) do
      local got, err = create(root, nil, { out = out })
      assert.is_nil(got, out)
      assert.matches("not an existing directory %(%-o names a directory", err, 1, false, out)
      assert.is_nil(io.open(root .. "/absent"), out)
    end
    assert.matches("%.tar%.zst$", assert(create(root, nil, { out = root .. "/p.tar.zst" })))
    -- an archive path must end as what is written: a zstd tar was named .tar.gz or .tar
    for _, out in ipairs({ root .. "/p.tar.gz", root .. "/p.tgz", root .. "/p.tar" }) do
      local got, err = create(root, nil, { out = out })
      assert.is_nil(got, out)
      assert.are.equal("-o " .. out .. ": the archive is written as a zstd-compressed tar (the default), so its "
        .. "name must end in .tar.zst", err)
      assert.is_nil(io.open(out), out)
    end
  end)

  it("refuses a URL without a mirror, a mirrored URL without shasum and a shasum mismatch", function()
    local _, err = create(root, nil, { file_overrides = {} })
    assert.matches("spec.config.os.files%[0%]%.source: https://example.invalid/v1/rke2 is a URL and nothing is "
      .. "downloaded here: give a local mirror with %-%-file%-override", err)
    source_dir(root)
    write(root .. "/src/distro.yaml", read(root .. "/src/distro.yaml"):gsub('shasum: "%x+"',
      'shasum: "' .. string.rep("0", 64) .. '"'))
    _, err = rebuild(root)
    assert.matches("spec.config.os.files%[0%]: " .. root:gsub("%p", "%%%0") .. "/mirror/v1/rke2 has sha256 "
      .. util.sha256(BIN) .. ", shasum says 0000", err)
    write(root .. "/src/distro.yaml", read(root .. "/src/distro.yaml"):gsub('\n%s+shasum: "%x+"', ""))
    _, err = rebuild(root)
    assert.matches("spec.config.os.files%[0%]%.shasum: required when %-%-file%-override redirects", err)
  end)

  it("refuses a target leaving the root, a bad perm and onCreate actions at build", function()
    source_dir(root)
    local base = read(root .. "/src/distro.yaml")
    write(root .. "/src/distro.yaml", (base:gsub("/etc/hello.txt", "/etc/../root/.ssh/authorized_keys")))
    local _, err = rebuild(root)
    assert.matches("distro%.yaml:%d+:%d+: spec%.config%.files%[1%]%.target: must be an absolute path without '%.%.', "
      .. 'got string "/etc/%.%./root/%.ssh/authorized_keys"', err)
    write(root .. "/src/distro.yaml", (base:gsub('perm: "0640"', 'perm: "0044"')))
    _, err = rebuild(root)
    assert.matches('spec.config.files%[0%]%.perm: the owner must be able to read the file, got 0044', err)
    write(root .. "/src/distro.yaml", (base:gsub('perm: "0640"', 'perm: "0948"')))
    _, err = rebuild(root)
    assert.matches('spec.config.files%[0%]%.perm: expected an octal mode', err)
    write(root .. "/src/distro.yaml", (base:gsub("/usr/local/bin/rke2", "/var/lib/rancher/rke2/rke2-selinux.rpm")))
    _, err = rebuild(root)
    assert.matches("spec%.config%.os%.files%[0%]: a %.rpm under selector%.package binary would only be copied, "
      .. "never installed", err)
    write(root .. "/src/distro.yaml", base .. "  actions: {onCreate: {before: [{cmd: curl -O x}]}}\n")
    _, err = rebuild(root)
    assert.matches("spec.actions.onCreate: build actions are not run", err)
  end)
end)

describe("loading and verifying a package", function()
  local root, dir
  before_each(function()
    root = tmpdir()
    dir = unpacked(root)
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root) .. " " .. util.quote(dir)) end)

  local function refused(pattern)
    local p, err = package.read(dir)
    assert.is_nil(p)
    assert.matches(pattern, err)
    assert.is_nil(package.verify(dir))
  end

  it("accepts the unpacked directory as the archive", function()
    assert.is_true(package.verify(dir))
    local p = assert(package.read(dir))
    assert.is_false(p.temp)
    assert.equal(dir .. "/files/0/site.pem", p.files[1].staged)
  end)

  it("names a listed file that is missing", function()
    os.remove(dir .. "/files/1/hello.txt")
    refused("files/1/hello%.txt: listed in checksums%.txt but missing from the package")
  end)

  it("names an extra file", function()
    write(dir .. "/files/1/extra.sh", "rm -rf /\n")
    refused("files/1/extra%.sh: not listed in checksums%.txt")
  end)

  it("names a file whose hash does not match", function()
    write(dir .. "/os/0/rke2", "#!/bin/sh\necho tampered\n")
    refused("os/0/rke2: sha256 %x+, checksums%.txt says " .. util.sha256(BIN))
  end)

  it("names a changed checksums.txt (aggregate) and a listed path leaving the package", function()
    write(dir .. "/checksums.txt", read(dir .. "/checksums.txt") .. util.sha256("x") .. " ../../etc/passwd\n")
    refused("checksums%.txt: sha256 %x+ is not metadata%.aggregateChecksum")
    edit_yaml(dir, function(d) d.metadata.aggregateChecksum = util.sha256(read(dir .. "/checksums.txt")) end)
    refused("%.%./%.%./etc/passwd: path leaves the package %(checksums%.txt:%d+%)")
  end)

  it("names a target path traversal and a values path leaving the package", function()
    edit_yaml(dir, function(d) d.spec.config.files[2].target = "/etc/../../root/x" end)
    refused("spec%.config%.files%[1%]%.target: must be an absolute path without '%.%.', "
      .. "got string \"/etc/%.%./%.%./root/x\"")
    edit_yaml(dir, function(d)
      d.spec.config.files[2].target = "/etc/hello.txt"
      d.spec.values.files = { "../../values.yaml" }
    end)
    refused("spec%.values%.files%[0%]: %.%./%.%./values%.yaml leaves the package")
  end)

  it("names a bad perm", function()
    edit_yaml(dir, function(d) d.spec.config.files[1].perm = "0999" end)
    refused("distro%.yaml:%d+:%d+: spec%.config%.files%[0%]%.perm: expected an octal mode such as \"0644\", "
      .. "got string \"0999\"")
  end)

  it("refuses a symbolic link inside the package", function()
    os.execute("ln -s /etc/shadow " .. util.quote(dir .. "/files/0/shadow"))
    refused("files/0/shadow: a symbolic link")
  end)

  it("inspect lists engine, architectures, files per selector and images", function()
    local p = assert(package.read(dir))
    local text = require("cargoship.commands.package").describe(p)
    assert.matches("engine:        rke2 1%.35%.4%-rke2r1", text)
    assert.matches("architectures: amd64", text)
    assert.matches("checksum:      %x+ %(every file, distro%.yaml, the engine and the architectures covered%)", text)
    assert.matches("0640  /etc/pki/site%.pem %(28 bytes%)  %[every role, every arch%]  links "
      .. "/etc/pki/site%-link%.pem", text)
    assert.matches("os files, binaries %(1%):\n  0755  /usr/local/bin/rke2 %(29 bytes%)  %[package binary", text)
    assert.matches("images %(0%)", text)
  end)
end)

-- Issue 23: one flipped bit anywhere in a package is refused, naming what was altered.
describe("every byte of a package is covered", function()
  local root, dir
  before_each(function()
    root = tmpdir()
    dir = unpacked(root)
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root) .. " " .. util.quote(dir)) end)

  -- flips one bit (mask) of the first byte of `needle` in the file (at its n-th byte when n is given)
  local function flip(path, needle, mask, n)
    local text = read(path)
    local at = assert(text:find(needle, 1, true), needle .. " not in " .. path) + (n or 0)
    write(path, text:sub(1, at - 1) .. string.char(text:byte(at) ~ mask) .. text:sub(at + 1))
  end

  local function refused(pattern)
    local p, err = package.read(dir)
    assert.is_nil(p)
    assert.matches(pattern, err)
    local ok, why = package.verify(dir)
    assert.is_nil(ok)
    assert.matches(pattern, why)
  end

  it("a fresh package verifies whole: files, distro.yaml, engine and architectures", function()
    local ok, coverage = package.verify(dir)
    assert.is_true(ok)
    assert.equal("full", coverage)
    assert.equal("full", assert(package.read(dir)).coverage)
    assert.matches("files/1/hello%.txt", read(dir .. "/checksums.txt"))
    assert.matches("%x+ cargoship%-integrity%.txt\n", read(dir .. "/checksums.txt"))
    assert.equal("cargoship package integrity 1\ntype rke2\nversion 1.35.4-rke2r1\narchitectures amd64\n"
      .. "distro.yaml " .. read(dir .. "/cargoship-integrity.txt"):match("distro%.yaml (%x+)\n") .. "\n",
      read(dir .. "/cargoship-integrity.txt"))
  end)

  it("names distro.yaml when one bit of an install target flips (/etc/pki -> /etc/pkI)", function()
    flip(dir .. "/distro.yaml", "/etc/pki/site.pem", 0x20, 7)
    assert.matches("/etc/pkI/site%.pem", read(dir .. "/distro.yaml"))
    refused("distro%.yaml: sha256 %x+ %(aggregate blanked%), cargoship%-integrity%.txt says %x+: distro%.yaml was "
      .. "altered after the build")
  end)

  it("names distro.yaml when its architecture or engine claim is altered", function()
    local text = read(dir .. "/distro.yaml")
    write(dir .. "/distro.yaml", (text:gsub("amd64", "arm64")))
    refused("distro%.yaml: sha256 %x+ %(aggregate blanked%), cargoship%-integrity%.txt says")
    write(dir .. "/distro.yaml", text)
    assert.is_true(package.verify(dir))
    write(dir .. "/distro.yaml", (text:gsub("type: rke2", "type: k3s")))
    refused("distro%.yaml: sha256 %x+ %(aggregate blanked%), cargoship%-integrity%.txt says")
  end)

  it("names the record when it is rewritten (with checksums.txt and the aggregate) to claim another arch", function()
    local rec = read(dir .. "/cargoship-integrity.txt"):gsub("architectures amd64", "architectures arm64")
    write(dir .. "/cargoship-integrity.txt", rec)
    local sums = read(dir .. "/checksums.txt"):gsub("%x+ cargoship%-integrity%.txt", util.sha256(rec)
      .. " cargoship-integrity.txt")
    write(dir .. "/checksums.txt", sums)
    local text = read(dir .. "/distro.yaml")
    local old = yaml.load(text)[1].metadata.aggregateChecksum
    write(dir .. "/distro.yaml", (text:gsub(old, util.sha256(sums))))
    refused('cargoship%-integrity%.txt: architectures "arm64", distro%.yaml says "amd64"')
  end)

  it("names a payload file with one flipped bit", function()
    flip(dir .. "/os/0/rke2", "stand-in", 0x01)
    refused("os/0/rke2: sha256 %x+, checksums%.txt says " .. util.sha256(BIN))
  end)

  it("names checksums.txt with one flipped bit", function()
    flip(dir .. "/checksums.txt", " files/0/site.pem", 0x01, -1)
    refused("checksums%.txt: sha256 %x+ is not metadata%.aggregateChecksum %x+ %(distro%.yaml%): one of the two was "
      .. "altered")
  end)

  it("names the aggregate with one flipped bit", function()
    -- a digit's low bit: still hex, so the schema check passes and the aggregate check speaks
    local agg = yaml.load(read(dir .. "/distro.yaml"))[1].metadata.aggregateChecksum
    flip(dir .. "/distro.yaml", agg, 0x01, agg:find("%d") - 1)
    refused("checksums%.txt: sha256 %x+ is not metadata%.aggregateChecksum %S+ %(distro%.yaml%)")
  end)

  it("names the integrity record with one flipped bit", function()
    flip(dir .. "/cargoship-integrity.txt", "architectures", 0x01)
    refused("cargoship%-integrity%.txt: sha256 %x+, checksums%.txt says %x+")
  end)

  it("refuses, or reads unchanged, an archive with one bit flipped anywhere (a sweep of offsets)", function()
    source_dir(root)
    write(root .. "/src/distro.yaml", (read(root .. "/src/distro.yaml"):gsub("architecture: amd64}",
      "architecture: amd64, uncompressed: true}")))
    local out = assert(rebuild(root))
    local good = assert(package.read(out))
    local want = read(good.dir .. "/checksums.txt") .. read(good.dir .. "/distro.yaml")
    package.release(good)
    local bytes = read(out)
    -- every 13th byte that is not zero (headers and contents; zero blocks are padding), bit by bit
    local tried, refused_n = 0, 0
    for at = 1, #bytes do
      if bytes:byte(at) ~= 0 and at % 13 == 0 then
        local mask = 1 << (tried % 8)
        tried = tried + 1
        local bad = root .. "/flipped.tar"
        write(bad, bytes:sub(1, at - 1) .. string.char(bytes:byte(at) ~ mask) .. bytes:sub(at + 1))
        local p = package.read(bad)
        if p then
          -- read: then nothing cargoship uses changed (an unused header field, tar's checksum silent on it)
          assert.equal(want, read(p.dir .. "/checksums.txt") .. read(p.dir .. "/distro.yaml"), "byte " .. at)
          assert.is_true(package.verify(p.dir))
          package.release(p)
        else
          refused_n = refused_n + 1
        end
      end
    end
    assert.is_true(tried > 100, tostring(tried))
    assert.is_true(refused_n > tried * 0.9, refused_n .. " of " .. tried .. " refused")
  end)

  it("gives an arm64 and an amd64 package of the same files different aggregates", function()
    local amd = assert(package.read(root .. "/cargoship-demo-amd64-1.35.4-rke2r1.tar.zst"))
    source_dir(root)
    write(root .. "/src/distro.yaml", (read(root .. "/src/distro.yaml"):gsub("architecture: amd64",
      "architecture: arm64")))
    local arm = assert(package.read(assert(build.create(root .. "/src", { out = root, now = 0,
      file_overrides = { "https://example.invalid=" .. root .. "/mirror" } }))))
    assert.same({ "arm64" }, arm.architectures)
    assert.equal(read(amd.dir .. "/files/0/site.pem"), read(arm.dir .. "/files/0/site.pem"))
    assert.equal(read(amd.dir .. "/os/0/rke2"), read(arm.dir .. "/os/0/rke2"))
    assert.are_not.equal(amd.aggregate, arm.aggregate)
    package.release(amd)
    package.release(arm)
  end)

  it("still reads and verifies a Go-tool package (no record): its files covered, distro.yaml not", function()
    local go = root .. "/go"
    write(go .. "/files/0/blob.bin", "payload\n")
    local sums = util.sha256("payload\n") .. " files/0/blob.bin\n"
    write(go .. "/checksums.txt", sums)
    write(go .. "/distro.yaml",
      files_only_yaml(", aggregateChecksum: " .. util.sha256(sums), "build: {architectures: [amd64]}\n"))
    local ok, coverage = package.verify(go)
    assert.is_true(ok)
    assert.equal("files", coverage)
    local p = assert(package.read(go))
    assert.equal("files", p.coverage)
    assert.equal(util.sha256(sums), p.aggregate)
    write(go .. "/files/0/blob.bin", "paylaod\n")
    local none, why = package.read(go)
    assert.is_nil(none)
    assert.matches("files/0/blob%.bin: sha256 %x+, checksums%.txt says", why)
  end)
end)

-- Issue 23: reading a hostile package archive refuses it, naming the member, and writes
-- nothing outside its own temp directory (removed on refusal: the parent stays empty).
describe("reading a hostile package archive", function()
  local root, parent
  before_each(function()
    root = tmpdir()
    parent = root .. "/tmp"
    os.execute("mkdir " .. util.quote(parent))
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)

  local function listing(d)
    local p = assert(io.popen("find " .. util.quote(d) .. " -mindepth 1"))
    local out = p:read("a")
    p:close()
    return out
  end

  -- a .tar.zst of a valid distro.yaml, then one member made by Python's tarfile (kind, name, link)
  local function archive_with(kind, name, link)
    write(root .. "/src/distro.yaml", files_only_yaml("", ""))
    local script = [==[
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    t.add(sys.argv[2], "distro.yaml")
    ti = tarfile.TarInfo(sys.argv[4])
    ti.type = {"file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
               "fifo": tarfile.FIFOTYPE}[sys.argv[3]]
    ti.linkname = sys.argv[5]
    data = b"owned\n" if sys.argv[3] == "file" else b""
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))
]==]
    local out = root .. "/hostile.tar"
    assert(os.execute("python3 -c " .. util.quote(script) .. " " .. util.quote(out) .. " "
      .. util.quote(root .. "/src/distro.yaml") .. " " .. kind .. " " .. util.quote(name) .. " "
      .. util.quote(link or "") .. " && zstd -q --rm " .. util.quote(out)))
    return out .. ".zst"
  end

  for _, case in ipairs({
    { "file", "../escape", nil, "%.%./escape: extract: member path leaves the package" },
    { "file", "files/../../../escape", nil, "files/%.%./%.%./%.%./escape: extract: member path leaves the package" },
    { "file", "ROOT/escape", nil, "/escape: extract: member path leaves the package %(absolute or %.%.%)" }, -- absolute
    { "symlink", "files", "..", "files: extract: a symbolic link" },
    { "hardlink", "files/0/blob.bin", "../../escape", "files/0/blob%.bin: extract: a hard link" },
    { "fifo", "files/0/blob.bin", nil, "files/0/blob%.bin: extract: not a regular file or directory" },
  }) do
    it("refuses a " .. case[1] .. " member " .. case[2] .. (case[3] and (" -> " .. case[3]) or ""), function()
      local path = archive_with(case[1], (case[2]:gsub("ROOT", root)), case[3])
      local p, err = package.read(path, { tmpdir = parent })
      assert.is_nil(p)
      assert.matches("^" .. path:gsub("%p", "%%%0") .. ": .*" .. case[4], err)
      assert.equal("", listing(parent))
      assert.is_nil(io.open(root .. "/escape"))
    end)
  end

  it("stops a package whose payload unpacks past package.LIMITS, naming the member", function()
    write(root .. "/src/blob.bin", ("\0"):rep(4 << 20))
    write(root .. "/src/distro.yaml", files_only_yaml("", ""))
    local out = assert(build.create(root .. "/src", { out = root }))
    -- the defaults let a real package through (4 MiB of zeros is far below 64 MiB)
    local p = assert(package.read(out, { tmpdir = parent }))
    package.release(p)
    assert.equal("", listing(parent))
    local saved = package.LIMITS.ratio_after
    package.LIMITS.ratio_after = 1 << 20
    local none, err = package.read(out, { tmpdir = parent })
    package.LIMITS.ratio_after = saved
    assert.is_nil(none)
    assert.matches("files/0/blob%.bin: extract: unpacks to more than 100 times its compressed size", err)
    assert.equal("", listing(parent))
    package.LIMITS.max_member = 1 << 20
    none, err = package.read(out, { tmpdir = parent })
    package.LIMITS.max_member = 16 << 30
    assert.is_nil(none)
    assert.matches("files/0/blob%.bin: extract: declares 4194304 bytes, more than the bound of 1048576", err)
    assert.equal("", listing(parent))
  end)
end)
