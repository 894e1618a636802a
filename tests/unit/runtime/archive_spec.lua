-- Specs of runtime/archive.c: archives written here are read by GNU tar; unsafe members are refused by name.
local archive = require "cargoship.archive"
local util = require "cargoship.util"

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local function write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

describe("cargoship.archive", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  for _, filter in ipairs({ "none", "zstd", "gzip" }) do
    it("writes a " .. filter .. " tar GNU tar lists with modes, root owner and mtime 0", function()
      write(dir .. "/src", string.rep("x", 200000))
      local out = dir .. "/o.tar"
      assert(archive.write(out, {
        { name = "d", dir = true },
        { name = "d/big", path = dir .. "/src", mode = tonumber("644", 8) },
        { name = "run.sh", data = "#!/bin/sh\n", mode = tonumber("755", 8) },
      }, { filter = filter }))
      local flag = ({ none = "", zstd = "--zstd", gzip = "-z" })[filter]
      local listing, ok = sh("tar " .. flag .. " -tvf " .. util.quote(out))
      assert.is_true(ok, listing)
      assert.matches("drwxr%-xr%-x root/root%s+0 1970%-01%-01 00:00 d/", listing)
      assert.matches("%-rw%-r%-%-r%-%- root/root%s+200000 1970%-01%-01 00:00 d/big", listing)
      assert.matches("%-rwxr%-xr%-x root/root%s+10 1970%-01%-01 00:00 run.sh", listing)
      -- and read back by us: same bytes
      local into = dir .. "/x"
      os.execute("mkdir " .. util.quote(into))
      local got = assert(archive.extract(out, into))
      assert.equal(3, #got)
      assert.equal(string.rep("x", 200000), read(into .. "/d/big"))
      assert.equal(tonumber("755", 8), require("cargoship.fs").mode(into .. "/run.sh"))
    end)
  end

  it("gives the same bytes for the same entries (reproducible packages)", function()
    local a, b = dir .. "/a.tar.zst", dir .. "/b.tar.zst"
    local entries = { { name = "f", data = "same" } }
    assert(archive.write(a, entries, { filter = "zstd" }))
    assert(archive.write(b, entries, { filter = "zstd" }))
    assert.equal(util.sha256(read(a)), util.sha256(read(b)))
  end)

  it("extracts one member to a file (a source's extractPath)", function()
    os.execute("cd " .. util.quote(dir) .. " && mkdir -p bin && printf rke2 > bin/rke2 && tar czf r.tgz bin")
    assert(archive.extract(dir .. "/r.tgz", dir, "bin/rke2", dir .. "/out"))
    assert.equal("rke2", read(dir .. "/out"))
    local ok, err = archive.extract(dir .. "/r.tgz", dir, "bin/nope", dir .. "/out2")
    assert.is_nil(ok)
    assert.matches("no member bin/nope", err)
  end)

  it("refuses an absolute member, a '..' member and a symbolic link, naming each", function()
    os.execute("cd " .. util.quote(dir) .. " && printf x > f && tar cf abs.tar --absolute-names " .. util.quote(dir)
      .. "/f && tar cf dots.tar --transform 's,^f,../../escape,' f && ln -s /etc evil && tar cf link.tar evil")
    for name, want in pairs({ ["abs.tar"] = "/f: extract: member path leaves the package",
                              ["dots.tar"] = "%.%./%.%./escape: extract: member path leaves the package",
                              ["link.tar"] = "evil: extract: a symbolic link" }) do
      local into = dir .. "/" .. name .. ".d"
      os.execute("mkdir " .. util.quote(into))
      local ok, err = archive.extract(dir .. "/" .. name, into)
      assert.is_nil(ok, name)
      assert.matches(want, err)
    end
    assert.is_nil(io.open(dir .. "/../escape"))
  end)

  -- Hostile archives (issue 23), made here by Python's tarfile: each refused naming its member,
  -- and nothing written outside the directory unpacked into (only `into` is ever in `dir`).
  local MAKE = [[
import io, sys, tarfile
TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
         "char": tarfile.CHRTYPE, "block": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}
out = open(sys.argv[1], "wb")
for spec in sys.argv[2:]:
    kind, name, arg = (spec.split(":", 2) + [""])[:3]
    ti = tarfile.TarInfo(name)
    ti.type = TYPES[kind]
    data = b""
    if kind == "file": data = arg.encode()
    elif kind in ("symlink", "hardlink"): ti.linkname = arg
    elif kind in ("char", "block"): ti.devmajor, ti.devminor = 1, 3
    ti.size = len(data)
    if kind == "file" and arg.startswith("declare="):  # a header only, declaring a size
        ti.size, data = int(arg[8:]), None
    out.write(ti.tobuf(tarfile.GNU_FORMAT))
    if data: out.write(data + b"\0" * (-len(data) % 512))
if data is not None: out.write(b"\0" * 1024)
]]

  local function hostile(name, ...)
    local args = { util.quote(MAKE), util.quote(dir .. "/" .. name) }
    for _, m in ipairs({ ... }) do args[#args + 1] = util.quote((m:gsub("DIR", dir))) end
    local out, ok = sh("python3 -c " .. table.concat(args, " "))
    assert(ok, out)
    return dir .. "/" .. name
  end

  -- extracts into dir/into -> nil, err (asserted refused); and dir holds only the archives and `into`
  local function refused(tarball, pattern, limits)
    local into = dir .. "/into"
    os.execute("rm -rf " .. util.quote(into) .. " && mkdir " .. util.quote(into))
    local ok, err = archive.extract(tarball, into, limits)
    assert.is_nil(ok, tarball)
    assert.matches(pattern, err)
    local left = sh("cd " .. util.quote(dir) .. " && find . -mindepth 1 -not -name '*.tar*' -not -path './into*'")
    assert.equal("", left)
    assert.is_nil(io.open("/tmp/cargoship-escape"))
    return err
  end

  it("refuses members leaving the tree: absolute, '..' at any depth, links out, naming each", function()
    refused(hostile("abs.tar", "file:DIR/escape:x"), "^" .. dir:gsub("%p", "%%%0")
      .. "/escape: extract: member path leaves the package %(absolute or %.%.%)")
    refused(hostile("dots.tar", "file:ok:fine", "file:a/../../escape:x"),
      "^a/%.%./%.%./escape: extract: member path leaves the package")
    refused(hostile("deep.tar", "dir:a/", "file:a/b/../../../../../tmp/cargoship-escape:x"),
      "^a/b/%.%./%.%./%.%./%.%./%.%./tmp/cargoship%-escape: extract: member path leaves")
    refused(hostile("sym.tar", "symlink:up:..", "file:up/escape:x"), "^up: extract: a symbolic link")
    refused(hostile("symabs.tar", "symlink:etc:/etc", "file:etc/cargoship-escape:x"), "^etc: extract: a symbolic link")
    refused(hostile("hard.tar", "hardlink:hl:../escape"), "^hl: extract: a hard link")
    refused(hostile("hardin.tar", "file:f:x", "hardlink:hl:/etc/passwd"), "^hl: extract: a hard link")
  end)

  it("refuses devices and fifos, naming each", function()
    refused(hostile("char.tar", "char:null"), "^null: extract: not a regular file or directory")
    refused(hostile("block.tar", "block:sda"), "^sda: extract: not a regular file or directory")
    refused(hostile("fifo.tar", "fifo:pipe"), "^pipe: extract: not a regular file or directory")
  end)

  it("refuses a member declaring more than the bound, before writing a byte of it", function()
    -- 20 GiB declared, nothing behind the header: refused on the header alone (default bound 16 GiB)
    refused(hostile("huge.tar", "file:ok:fine", "file:huge:declare=" .. (20 << 30)),
      "^huge: extract: declares 21474836480 bytes, more than the bound of 17179869184 for one member")
    refused(hostile("big.tar", "file:big:" .. ("x"):rep(5000)),
      "^big: extract: declares 5000 bytes, more than the bound of 4096 for one member", { max_member = 4096 })
    assert.is_nil(io.open(dir .. "/into/big"))
  end)

  it("refuses an archive whose members add up past the total bound or the member count", function()
    local t = hostile("total.tar", "file:a:" .. ("x"):rep(3000), "file:b:" .. ("y"):rep(3000))
    refused(t, "^b: extract: would bring the unpacked total past the bound of 5000 bytes", { max_total = 5000 })
    assert.equal(3000, #read(dir .. "/into/a"))
    assert.is_nil(io.open(dir .. "/into/b"))
    refused(t, "^b: extract: more than 1 members %(the bound%)", { max_entries = 1 })
    local into = dir .. "/into"
    os.execute("rm -rf " .. util.quote(into) .. " && mkdir " .. util.quote(into))
    assert(archive.extract(t, into, { max_total = 6000, max_entries = 2 }))
  end)

  it("stops a compression bomb (zstd of zeros) once past the ratio bound, the member named", function()
    -- 256 MiB of zeros: a few KiB of zstd; the default bounds stop it after 64 MiB at 100:1
    local out, ok = sh("cd " .. util.quote(dir) .. " && truncate -s 256M zeros && tar --zstd -cf bomb.tar.zst zeros "
      .. "&& rm zeros")
    assert(ok, out)
    assert.is_true(#read(dir .. "/bomb.tar.zst") < 1024 * 1024)
    refused(dir .. "/bomb.tar.zst", "^zeros: extract: unpacks to more than 100 times its compressed size "
      .. "%(a compression bomb%?%)", { ratio_after = 1 << 20 })
    assert.is_true(#read(dir .. "/into/zeros") <= 2 << 20)
    refused(dir .. "/bomb.tar.zst", "^zeros: extract: unpacks to more than 100 times its compressed size")
    -- the same bound on one member taken out (a source's extractPath)
    local none, err = archive.extract(dir .. "/bomb.tar.zst", dir, "zeros", dir .. "/into/one", { ratio_after = 1 })
    assert.is_nil(none)
    assert.matches("^zeros: extract: unpacks to more than 100 times", err)
  end)

  it("reports a corrupt archive as an error, not a crash", function()
    write(dir .. "/bad.tar.zst", "\40\181\47\253garbage")
    local ok, err = archive.list(dir .. "/bad.tar.zst")
    assert.is_nil(ok)
    assert.is_string(err)
  end)
end)
