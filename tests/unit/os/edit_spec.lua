-- Specs for the prepare-phase builders: a host's file and the wanted settings in, the new content and actions out.
local edit = require "cargoship.os.edit"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local function fx(name) return support.fixture("os/" .. name) end
local function cfg(id) return os_registry.by_name(id):new { service_manager = "systemd" } end

local ENV = { http_proxy = "http://proxy.internal:3128", NO_PROXY = "localhost,10.0.0.0/8,.cluster.local",
              CS_NOTE = "two words", HTTPS_PROXY = "http://proxy.internal:3128" }
local NODES = { { address = "10.0.0.1", fqdn = "cp1.example.internal", name = "cp1" },
                { address = "10.0.0.2", hostname = "cp2.example.internal" },
                { address = "fd00::3", name = "w1" } }

describe("sysctl drop-in", function()
  it("is one file of sorted key = value lines under a header, loaded with sysctl -p of that file", function()
    local f = cfg("ubuntu"):sysctl { ["net.ipv4.ip_forward"] = 1, ["fs.inotify.max_user_instances"] = "8192",
                                     ["net.bridge.bridge-nf-call-iptables"] = 1 }
    assert.same({ path = "/etc/sysctl.d/99-cargoship.conf", content = fx("sysctl-99-cargoship.conf"), mode = "0644",
                  load = "sysctl -p '/etc/sysctl.d/99-cargoship.conf'" }, f)
    local acts = cfg("rocky"):sysctl_actions { ["vm.max_map_count"] = 262144 }
    assert.same({ "write", "run" }, { acts[1].kind, acts[2].kind })
    assert.equal(edit.SYSCTL_HEADER .. "vm.max_map_count = 262144\n", acts[1].content)
    assert.equal("sysctl -p '/etc/sysctl.d/99-cargoship.conf'", acts[2].cmd)
  end)
  it("refuses keys and values that would break the file", function()
    assert.has_error(function() edit.sysctl { ["a b"] = 1 } end)
    assert.has_error(function() edit.sysctl { ["net.x"] = "1\nkernel.panic = 1" } end)
  end)
end)

describe("/etc/environment upsert", function()
  it("replaces the managed keys in place, keeps every other line, appends new keys sorted", function()
    local before = fx("environment-before.txt")
    local after = assert(edit.environment(before, ENV))
    assert.equal(fx("environment-after.txt"), after)
    -- the PATH line, the comment and LANG are byte for byte the host's
    assert.matches('PATH="/usr/local/sbin:', after, 1, true)
    assert.matches("# proxy settings from the image build\n", after, 1, true)
    assert.is_nil(after:find("duplicate", 1, true), "a later duplicate would override ours")
    assert.matches("\nexport NO_PROXY=localhost,10.0.0.0/8", after, 1, true)
  end)
  it("is idempotent and writes nothing when already in place", function()
    local once = assert(edit.environment(fx("environment-before.txt"), ENV))
    assert.equal(once, edit.environment(once, ENV))
    local deb = cfg("debian")
    assert.same({}, deb:environment_actions(once, ENV))
    local acts = deb:environment_actions(nil, { A = "1" })
    assert.same({ "write", "/etc/environment", "A=1\n", "0644" },
      { acts[1].kind, acts[1].path, acts[1].content, acts[1].mode })
  end)
  it("quotes so pam_env and a shell read the same value", function()
    assert.equal("A='x y'\nB=\"it's\"\nC=\n", edit.environment("", { A = "x y", B = "it's", C = "" }))
    local none, why = edit.environment("", { D = "it's $HOME" })
    assert.is_nil(none)
    assert.matches("no spelling", why)
    assert.is_nil((edit.environment("", { ["bad-name"] = "x" })))
    assert.is_nil((edit.environment("", { E = "two\nlines" })))
  end)
end)

describe("modules-load.d", function()
  it("writes a file for each module whose file differs, then loads the missing ones in one command", function()
    local acts = cfg("debian"):modules_actions({ "br_netfilter", "overlay", "nf_conntrack" },
      { overlay = "overlay\n", nf_conntrack = "nf_conntrack # edited\n" }, { nf_conntrack = true })
    assert.same({ "write", "write", "run" }, { acts[1].kind, acts[2].kind, acts[3].kind })
    assert.same({ "/etc/modules-load.d/br_netfilter.conf", "br_netfilter\n", "0644" },
      { acts[1].path, acts[1].content, acts[1].mode })
    assert.equal("/etc/modules-load.d/nf_conntrack.conf", acts[2].path)
    assert.matches("for m in 'br_netfilter' 'overlay'; do if ! err=$(modprobe", acts[3].cmd, 1, true)
    assert.equal("load kernel modules br_netfilter, overlay", acts[3].say)
    assert.same({}, cfg("debian"):modules_actions({ "overlay" }, { overlay = "overlay\n" }, { overlay = true }))
    local none, why = cfg("debian"):modules_actions({ "ok", "rm -rf /" })
    assert.is_nil(none)
    assert.matches("is not a module name", why)
  end)
end)

describe("/etc/hosts managed block", function()
  it("adds a marked block of the nodes and leaves the host's lines untouched", function()
    local before = fx("hosts-before.txt")
    local after = assert(edit.hosts(before, NODES))
    assert.equal(fx("hosts-after.txt"), after)
    assert.equal(before, after:sub(1, #before))
  end)
  it("is idempotent, rewrites the block in place, and removes it for no nodes", function()
    local once = assert(edit.hosts(fx("hosts-before.txt"), NODES))
    assert.equal(once, edit.hosts(once, NODES))
    local tail = once .. "10.9.9.9 after-the-block\n"
    local changed = assert(edit.hosts(tail, { NODES[1] }))
    assert.is_nil(changed:find("cp2", 1, true))
    assert.matches("# END cargoship\n10.9.9.9 after%-the%-block\n$", changed)
    assert.equal(fx("hosts-before.txt"), edit.hosts(once, {}))
    assert.same({}, cfg("rocky"):hosts_actions(once, NODES))
    assert.equal("/etc/hosts", cfg("rocky"):hosts_actions(fx("hosts-before.txt"), NODES)[1].path)
  end)
  it("refuses a block without an end marker, and names that are not names", function()
    local none, why = edit.hosts(edit.HOSTS_BEGIN .. "\n10.0.0.1 a\nuser line\n", NODES)
    assert.is_nil(none)
    assert.matches("no end marker", why)
    assert.is_nil((edit.hosts("", { { address = "10.0.0.1; rm", name = "x" } })))
    assert.is_nil((edit.hosts("", { { address = "10.0.0.1", name = "a b" } })))
  end)
end)

describe("nftables boot include", function()
  it("appends the include once, after the file's own flush", function()
    local after = edit.include_line(fx("nftables.conf"), "/var/lib/cargoship/nftables.nft")
    assert.equal(fx("nftables-after.conf"), after)
    assert.equal(after, edit.include_line(after, "/var/lib/cargoship/nftables.nft"))
  end)
end)
