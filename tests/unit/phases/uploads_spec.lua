-- Specs of phases.lib.uploads: engine method choice, the one-probe assessment run by a real shell, manifest records.
local uploads = require "cargoship.phases.lib.uploads"
local util = require "cargoship.util"

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

local function entry(package, target, extra)
  local e = { list = "os", target = target, staged = "/nonexistent", mode = "0644", symlinks = {},
              selector = { package = package, arch = {} } }
  for k, v in pairs(extra or {}) do e[k] = v end
  if extra and extra.selector then e.selector = extra.selector end
  return e
end

local function host(ptype, role, arch)
  return { name = "h", role = role or "worker", facts = { arch = arch or "amd64" },
           os = { package_type = ptype } }
end

describe("cargoship.phases.lib.uploads.method", function()
  local ctx = { distro = { os_files = {
    entry("rpm", "/var/lib/rancher/rke2/rpm/a.rpm"),
    entry("apt", "/var/lib/rancher/rke2/deb/a.deb",
      { selector = { package = "apt", profile = "controller", arch = {} } }),
    entry("binary", "/usr/local/bin/rke2", { selector = { package = "binary", arch = { "arm64" } } }),
    entry("binary", "/usr/local/bin/rke2-amd64", { selector = { package = "binary", arch = { "amd64" } } }),
    entry(nil, "/etc/never"),
  } } }

  it("takes RPM on Enterprise Linux when the package has rpm files", function()
    local m, list = uploads.method(ctx, host("rpm"))
    assert.equal("rpm", m)
    assert.equal(1, #list)
  end)

  it("takes APT only for the role its files select, else falls through to binaries of the host's arch", function()
    assert.equal("apt", (uploads.method(ctx, host("apt", "controller"))))
    local m, list = uploads.method(ctx, host("apt", "worker"))
    assert.equal("binary", m)
    assert.same({ "/usr/local/bin/rke2-amd64" }, { list[1].target })
    m, list = uploads.method(ctx, host("apt", "worker", "arm64"))
    assert.same({ "binary", "/usr/local/bin/rke2" }, { m, list[1].target })
  end)

  it("ships nothing to a host no selector matches", function()
    assert.is_nil((uploads.method(ctx, host("apt", "worker", "riscv64"))))
    assert.is_nil((uploads.method({}, host("rpm"))))
  end)
end)

describe("cargoship.phases.lib.uploads assessment against a real shell", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  -- a host whose probe is run by /bin/sh here, on files under dir (no sudo, no SSH)
  local function local_host(prefix)
    return { name = "local", probe = function(_, cmd)
      local p = assert(io.popen((prefix or "") .. cmd))
      local out = p:read("a")
      local _, _, code = p:close()
      return out, "", code
    end }
  end

  local function item(path, content, mode, extra)
    local src = dir .. "/src/" .. util.sha256(path)
    write(src, content)
    local it = { category = "file", source = src, path = path, sha256 = util.sha256(content), size = #content,
                 mode = mode, symlinks = {} }
    for k, v in pairs(extra or {}) do it[k] = v end
    return it
  end

  it("has nothing to do where hash, mode and links match", function()
    local it = item(dir .. "/t/a.conf", "same\n", "0640", { symlinks = { dir .. "/t/link.conf" } })
    write(it.path, "same\n")
    os.execute("chmod 640 " .. util.quote(it.path) .. " && ln -s " .. util.quote(it.path) .. " "
      .. util.quote(dir .. "/t/link.conf"))
    assert.same({}, assert(uploads.assess(local_host(), { it })))
  end)

  it("plans directories, the upload with its size, a mode fix, links and the removal of partial uploads", function()
    local new = item(dir .. "/new/dir/b.bin", string.rep("b", 1000), "0755", { symlinks = { dir .. "/l/b" } })
    local moded = item(dir .. "/t/c.conf", "c\n", "0600")
    write(moded.path, "c\n")
    os.execute("chmod 644 " .. util.quote(moded.path))
    write(dir .. "/t/.c.conf.cargoship-20260101T000000Z-1.tmp", "partial")
    local acts = assert(uploads.assess(local_host(), { new, moded }))
    local says = {}
    for i, a in ipairs(acts) do says[i] = a.kind .. ": " .. a.say end
    assert.same({
      "run: remove 1 partial upload a cut run left",
      "run: create " .. dir .. "/new/dir, " .. dir .. "/l",
      "upload: upload " .. new.path .. " (1000 bytes, file)",
      "run: link " .. dir .. "/l/b -> " .. new.path,
      "run: set mode 0600 on " .. moded.path,
    }, says)
    assert.equal(1000, acts[3].size)
    assert.equal(new.sha256, acts[3].sha256)
    assert.equal("0755", acts[3].mode)
    -- and the commands do what they say, run by the same shell
    for _, a in ipairs(acts) do
      if a.kind == "run" then assert(os.execute(a.cmd)) end
    end
    assert.is_nil(io.open(dir .. "/t/.c.conf.cargoship-20260101T000000Z-1.tmp"))
    assert.equal(tonumber("600", 8), require("cargoship.fs").mode(moded.path))
  end)

  -- openssl -r and sha256sum mark a name holding a backslash with a "\\" before the hash: read as
  -- part of the hash, every apply re-uploaded it (and the transport's check after an upload failed)
  it("reads each hasher's hash of a name with a backslash, and re-uploads what it cannot hash", function()
    local bin = dir .. "/bin"
    os.execute("mkdir -p " .. util.quote(bin))
    local it = item(dir .. "/t/odd\\name.conf", "same\n", "0644")
    write(it.path, "same\n")
    os.execute("chmod 644 " .. util.quote(it.path))
    local path = "PATH=" .. util.quote(bin) .. ":$PATH\n"
    -- openssl, then python3 (openssl fails), then sha256sum (both fail), then none
    for _, broken in ipairs({ "", "openssl", "python3", "sha256sum" }) do
      if broken ~= "" then
        write(bin .. "/" .. broken, "#!/bin/sh\nexit 1\n")
        os.execute("chmod 755 " .. util.quote(bin .. "/" .. broken))
      end
      local acts = assert(uploads.assess(local_host(path), { it }))
      if broken == "sha256sum" then
        assert.same({ "upload" }, { acts[1].kind })
      else
        assert.same({}, acts, "with " .. (broken == "" and "openssl" or broken) .. " broken")
      end
    end
  end)

  it("uploads a changed file even when its mode is right", function()
    local it = item(dir .. "/t/d", "new\n", "0644")
    write(it.path, "old\n")
    local acts = assert(uploads.assess(local_host(), { it }))
    assert.same({ "upload" }, { acts[1].kind })
  end)

  it("leaves a binary alone when its target already holds it, else stages it beside the target", function()
    local it = item(dir .. "/bin/rke2.cargoship-staged", "#!/bin/sh\n", "0755", { final = dir .. "/bin/rke2",
      category = "engine" })
    write(it.final, "#!/bin/sh\n")
    os.execute("chmod 755 " .. util.quote(it.final))
    assert.same({}, assert(uploads.assess(local_host(), { it })))
    write(it.final, "#!/bin/sh\necho old\n")
    local acts = assert(uploads.assess(local_host(), { it }))
    assert.same({ "upload", dir .. "/bin/rke2.cargoship-staged" }, { acts[1].kind, acts[1].path })
  end)
end)

describe("cargoship.phases.lib.uploads records", function()
  it("lists category and path sorted, binaries by their target", function()
    assert.equal("engine\t/usr/local/bin/rke2\nfile\t/etc/a\nimage\t/var/i.tar\n", uploads.manifest_text({
      { category = "image", path = "/var/i.tar" }, { category = "file", path = "/etc/a" },
      { category = "engine", path = "/usr/local/bin/rke2.cargoship-staged", final = "/usr/local/bin/rke2" } }))
  end)

  it("removes what the old manifest lists and the new one does not", function()
    assert.same({ "/etc/old", "/var/i-1.34.tar" },
      uploads.stale("file\t/etc/a\nfile\t/etc/old\nimage\t/var/i-1.34.tar\n", "file\t/etc/a\nimage\t/var/i-1.35.tar\n"))
    assert.same({}, uploads.stale(nil, "file\t/etc/a\n"))
  end)

  it("says bytes as people read them", function()
    assert.equal("512 B", uploads.human(512))
    assert.equal("256.0 MiB", uploads.human(256 * 1048576))
  end)
end)
