-- Specs of cargoship.facts.host: file state, held packages and services in one round trip (a real local shell).
local facts = require "cargoship.facts.host"
local files = require "unit.files"
local host_mod = require "cargoship.host"
local util = require "cargoship.util"

local function fixture(name) return assert(files.read("tests/fixtures/facts/" .. name)) end

local function sh(cmd)
  local p = io.popen("sh -c " .. util.quote(cmd) .. " 2>/dev/null")
  local out = p:read("a")
  local _, _, code = p:close()
  return out, "", code
end

-- A Host over a connection that runs every command in a local shell, counting them.
local function local_host(os_conf)
  local h = host_mod.new { config = { index = 1, name = "h1", role = "worker" }, dry_run = true }
  local conn = { sent = 0 }
  function conn.exec(_, cmd) conn.sent = conn.sent + 1 return sh(cmd) end
  h:attach(conn)
  h.os = os_conf
  return h
end

local function whoami()
  local p = io.popen("id -un; id -gn")
  local u, g = p:read("l"), p:read("l")
  p:close()
  return u, g
end

describe("facts.host", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("reads every path's state, services and holds in one round trip", function()
    local odd = dir .. "/it's a\nfile"
    files.write(dir .. "/conf", "a=1\n")
    files.write(odd, "")
    assert(os.execute(string.format("chmod 0640 %s/conf && ln -s conf %s/link && mkdir -m 0700 %s/d && touch %s/svc-up",
      dir, dir, dir, dir)))
    local fake_os = { service = function(_, verb, name)
      assert.are.equal("is_active", verb)
      return "test -e " .. util.quote(dir .. "/svc-" .. name)
    end }
    local h = local_host(fake_os)
    local paths = { dir .. "/conf", dir .. "/missing", dir .. "/link", dir .. "/d", odd }
    local f = assert(facts.gather(h, { files = paths, holds = true, services = { "up", "down" } }))
    assert.are.equal(1, h.conn.sent)
    assert.are.equal(1, h.probes_sent)
    local user, group = whoami()
    assert.are.same({ exists = true, type = "file", mode = "0640", owner = user, group = group,
      sha256 = util.sha256("a=1\n") }, f.files[dir .. "/conf"])
    assert.are.same({ exists = false }, f.files[dir .. "/missing"])
    assert.are.same({ "link", nil }, { f.files[dir .. "/link"].type, f.files[dir .. "/link"].sha256 })
    assert.are.same({ "dir", "0700" }, { f.files[dir .. "/d"].type, f.files[dir .. "/d"].mode })
    assert.are.equal(util.sha256(""), f.files[odd].sha256)
    assert.are.same({ up = { active = true }, down = { active = false } }, f.services)
    assert.are.equal("table", type(f.holds))
  end)

  it("quotes every path through cargoship.shell", function()
    local cmd = facts.files_command({ "/etc/$(reboot)", "/x y" })
    assert.truthy(cmd:find("cs_file '/etc/$(reboot)' 1", 1, true))
    assert.truthy(cmd:find("cs_file '/x y' 2", 1, true))
    assert.has_error(function() facts.files_command({ "" }) end)
  end)

  it("parses a line per index and leaves out a path the output does not cover", function()
    local paths = { "/a", "/b", "/c" }
    assert.are.same({ ["/a"] = { exists = false }, ["/b"] = { exists = true, unreadable = true } },
      facts.parse_files("1 N\n2 E\n", paths))
  end)

  it("reads held packages from apt, dnf 4, dnf 5, yum and zypper", function()
    local function held(name)
      local names = {}
      for k in pairs(facts.parse_holds(fixture(name))) do names[#names + 1] = k end
      table.sort(names)
      return names
    end
    assert.are.same({ "kubeadm", "kubectl", "kubelet" }, held("holds-apt.txt"))
    assert.are.same({ "cri-tools", "kubeadm", "kubelet" }, held("holds-dnf4.txt"))
    assert.are.same({ "kubeadm", "kubelet" }, held("holds-dnf5.txt"))
    assert.are.same({ "kube-proxy", "kubelet" }, held("holds-yum.txt"))
    assert.are.same({ "kubeadm", "kubelet" }, held("holds-zypper.txt"))
    assert.are.same({}, facts.parse_holds("kubelet\n"))
  end)

  it("needs the OS configurer for services, and asks nothing when nothing is wanted", function()
    local h = local_host(nil)
    assert.matches("OS configurer", select(2, pcall(facts.gather, h, { services = { "k3s" } })))
    assert.are.same({}, facts.gather(h, {}))
    assert.are.equal(0, h.conn.sent)
  end)
end)

describe("facts.host.drift", function()
  local digest = require "cargoship.digest"
  local file = { exists = true, type = "file", mode = "0600", owner = "root", group = "root",
                 sha256 = digest.sha256("a\n") }

  it("says nothing when content, mode and owner are what a write wants", function()
    assert.is_nil(facts.drift(file, { content = "a\n", mode = "0600" }))
    assert.is_nil(facts.drift(file, { content = "a\n", mode = "600", owner = "root", group = "root" }))
    assert.is_nil(facts.drift(file, { content = "a\n" }))
  end)

  it("says why not, in the words a dry run shows", function()
    assert.equal("missing", facts.drift({ exists = false }, { content = "a\n" }))
    assert.equal("missing", facts.drift(nil, { content = "a\n" }))
    assert.equal("different content", facts.drift(file, { content = "b\n", mode = "0600" }))
    assert.equal("mode 0600, not 0640", facts.drift(file, { content = "a\n", mode = "0640" }))
    assert.equal("owner root:root, not etcd:root", facts.drift(file, { content = "a\n", owner = "etcd" }))
    assert.equal("not a regular file (link)", facts.drift({ exists = true, type = "link" }, { content = "a\n" }))
  end)
end)

describe("facts.host rpm_locks", function()
  it("reads the versionlock plugin's own list file, as its config names it, running no dnf", function()
    local dir = assert(io.popen("mktemp -d")):read("l")
    files.write(dir .. "/versionlock.conf", "[main]\nenabled = 1\nlocklist = " .. dir .. "/locks.list\n")
    files.write(dir .. "/locks.list", "# Added lock on Tue\nrke2-server-0:1.35.4-1.*\n\nrke2-common-0:1.35.4-1.*\n")
    local out = sh(facts.rpm_locks({ dir .. "/nope.conf", dir .. "/versionlock.conf" }))
    assert.equal("#rpm\nrke2-server-0:1.35.4-1.*\nrke2-common-0:1.35.4-1.*\n", out)
    assert.same({ ["rke2-common"] = true, ["rke2-server"] = true }, facts.parse_holds(out))
    -- no plugin configured: no locks can be read, and the answer says so
    assert.equal("#rpm-nolock\n", sh(facts.rpm_locks({ dir .. "/nope.conf" })))
    os.execute("rm -rf " .. util.quote(dir))
  end)
end)
