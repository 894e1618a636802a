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
    assert.same({ "checksums.txt", "distro.yaml", "files/0/blob.bin" }, names)
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
    assert.matches("0640  /etc/pki/site%.pem %(28 bytes%)  %[every role, every arch%]  links "
      .. "/etc/pki/site%-link%.pem", text)
    assert.matches("os files, binaries %(1%):\n  0755  /usr/local/bin/rke2 %(29 bytes%)  %[package binary", text)
    assert.matches("images %(0%)", text)
  end)
end)
