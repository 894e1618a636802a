-- Specs for picking an OS configurer from os-release: fixtures of real distributions in, configurer out.
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local function facts(name)
  return os_registry.os_facts(os_registry.parse_os_release(support.fixture("os-release/" .. name)))
end

local function pick(name, override)
  return os_registry.select(facts(name), override, { service_manager = "systemd" })
end

describe("os matcher", function()
  local cases = {
    -- fixture              configurer  lineage                      matched by
    { "debian-12",          "debian",   "debian < linux",            "ID debian" },
    { "ubuntu-22.04",       "ubuntu",   "ubuntu < debian < linux",   "ID ubuntu" },
    { "ubuntu-24.04",       "ubuntu",   "ubuntu < debian < linux",   "ID ubuntu" },
    { "rhel-9",             "rhel",     "rhel < linux",              "ID rhel" },
    { "rocky-9",            "rocky",    "rocky < rhel < linux",      "ID rocky" },
    { "almalinux-9",        "alma",     "alma < rhel < linux",       "ID almalinux" },
    { "centos-stream-9",    "centos",   "centos < rhel < linux",     "ID centos" },
    { "oracle-9",           "oracle",   "oracle < rhel < linux",     "ID ol" },
    { "fedora-40",          "fedora",   "fedora < rhel < linux",     "ID fedora" },
    { "sles-15",            "sles",     "sles < linux",              "ID sles" },
    { "opensuse-leap-15",   "opensuse", "opensuse < sles < linux",   "ID opensuse-leap" },
    { "opensuse-tumbleweed", "opensuse", "opensuse < sles < linux",  "ID opensuse-tumbleweed" },
    -- derivatives nobody wrote a configurer for, through ID_LIKE in its order
    { "linuxmint-21",       "ubuntu",   "ubuntu < debian < linux",   "ID_LIKE ubuntu" },
    { "amzn-2023",          "fedora",   "fedora < rhel < linux",     "ID_LIKE fedora" },
    { "amzn-2",             "centos",   "centos < rhel < linux",     "ID_LIKE centos" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " -> " .. c[2], function()
      local cfg, how = pick(c[1])
      assert.is_not_nil(cfg, how)
      assert.equal(c[2], cfg.id)
      assert.equal(c[3], cfg:lineage())
      assert.equal(c[4], how)
    end)
  end

  it("reads the facts a report shows", function()
    assert.same({ id = "rocky", version_id = "9.4", pretty_name = "Rocky Linux 9.4 (Blue Onyx)",
                  name = "Rocky Linux", like = { "rhel", "centos", "fedora" } }, facts("rocky-9"))
    assert.same({ id = "debian", version_id = "12", pretty_name = "Debian GNU/Linux 12 (bookworm)",
                  name = "Debian GNU/Linux", like = {} }, facts("debian-12"))
  end)

  it("refuses an unknown OS, naming its ID and PRETTY_NAME and the way out", function()
    local cfg, why = pick("alpine-3.19")
    assert.is_nil(cfg)
    assert.matches('ID "alpine", PRETTY_NAME "Alpine Linux v3.19"', why, 1, true)
    assert.matches("supported: ubuntu, debian, rocky", why, 1, true)
    assert.matches("set `os: <name>`", why, 1, true)
  end)

  it("takes the host's os override before detection, by configurer id or os-release ID", function()
    local cfg, how = pick("alpine-3.19", "debian")
    assert.equal("debian", cfg.id)
    assert.equal('os override "debian"', how)
    assert.equal("alma", pick("rocky-9", "almalinux").id)
    assert.equal("ubuntu", pick("debian-12", "Ubuntu").id)
  end)

  it("refuses an override that names no configurer", function()
    local cfg, why = pick("debian-12", "gentoo")
    assert.is_nil(cfg)
    assert.matches('os "gentoo" is not a known OS configurer', why, 1, true)
  end)

  it("treats a missing ID as linux (os-release(5)) and refuses it", function()
    local f = os_registry.os_facts(os_registry.parse_os_release('NAME="Custom"\n'))
    assert.equal("linux", f.id)
    assert.is_nil((os_registry.select(f)))
  end)

  it("parses quoting and escapes as a shell would", function()
    local rel = os_registry.parse_os_release(table.concat({
      'A="double \\"quoted\\" \\$HOME"', "B='single $x'", "C=bare", "# comment", "", "  D=\"x\"  " }, "\n"))
    assert.same({ A = 'double "quoted" $HOME', B = "single $x", C = "bare", D = "x" }, rel)
  end)

  it("normalizes machine names to package architectures", function()
    assert.equal("amd64", os_registry.normalize_arch("x86_64"))
    assert.equal("arm64", os_registry.normalize_arch("aarch64\n"))
    assert.equal("riscv64", os_registry.normalize_arch("riscv64"))
    assert.equal("arm", os_registry.normalize_arch("armv7l"))
    assert.equal("s390x", os_registry.normalize_arch("s390x"))
    assert.equal("mips", os_registry.normalize_arch("mips"))
  end)
end)
