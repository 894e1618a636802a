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

  it("reports a corrupt archive as an error, not a crash", function()
    write(dir .. "/bad.tar.zst", "\40\181\47\253garbage")
    local ok, err = archive.list(dir .. "/bad.tar.zst")
    assert.is_nil(ok)
    assert.is_string(err)
  end)
end)
