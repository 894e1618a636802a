-- Specs of cargoship.os.firewall.state's firewalld probe: one process for the live state, firewall-cmd's answers.
--
-- The probe runs here through sh, as on a host, against a fake firewall-cmd on PATH: a shell
-- script answering as firewalld 1.3 does (the fallback: one firewall-cmd per answer), and a
-- Python #! line with a fake firewall.client/firewall.command on PYTHONPATH holding the same
-- state (the one-process path, which must never start firewall-cmd). Both must give the
-- same plan.state. The real firewalld answers in integration/firewall (lab, rocky/systemd).
local state = require "cargoship.os.firewall.state"
local util = require "cargoship.util"
local files = require "unit.files"

local q = util.quote

local POLICY_INFO = table.concat({
  "cargoship-out (active)",
  "  priority: -1",
  "  target: CONTINUE",
  "  ingress-zones: HOST",
  "  egress-zones: ANY",
  "  services: ",
  "  ports: ",
  "  protocols: ",
  "  masquerade: no",
  "  forward-ports: ",
  "  source-ports: ",
  "  icmp-blocks: ",
  "  rich rules: ",
  '\trule priority="1" family="ipv4" destination address="192.0.2.9" port port="25" protocol="tcp" reject',
}, "\n")
local RICH = 'rule family="ipv4" source address="192.0.2.0/24" port port="9100" protocol="tcp" accept'

-- firewall-cmd as a shell script: each question it is asked, answered as firewalld 1.3 prints it
local FAKE_SH = [[#!/bin/sh
echo "$*" >> "$CS_FAKE_DIR/asked"
case "$*" in
  "--ipset=cargoship-trusted --get-entries") printf '10.0.0.1\n10.0.0.2\n' ;;
  "--ipset=cargoship-trusted6 --get-entries") echo "Error: INVALID_IPSET: cargoship-trusted6" >&2; exit 118 ;;
  "--permanent --zone=trusted --list-sources") echo "ipset:cargoship-trusted ipset:cargoship-trusted6" ;;
  "--zone=trusted --list-sources") echo "ipset:cargoship-trusted" ;;
  "--permanent --zone=public --list-services") echo "distro-exposed-ports ssh" ;;
  "--zone=public --list-services") echo "ssh" ;;
  "--permanent --zone=public --list-rich-rules") echo 'RICH' ;;
  "--zone=public --list-rich-rules") echo ;;
  "--permanent --get-policies") echo "allow-host-ipv6 cargoship-out" ;;
  "--permanent --info-policy=cargoship-out") cat "$CS_FAKE_DIR/policy" ;;
  "--get-policies") echo "allow-host-ipv6" ;;
  *) echo "fake firewall-cmd: not asked for: $*" >&2; exit 2 ;;
esac
]]

-- the same state behind firewall-cmd's own client library
local FAKE_CLIENT = [[
POLICY = open(__import__("os").environ["CS_FAKE_DIR"] + "/policy").read()
class Error(Exception):
    pass
class Zone:
    def __init__(self, sources, services, rich):
        self.s, self.v, self.r = sources, services, rich
    def getSources(self): return self.s
    def getServices(self): return self.v
    def getRichRules(self): return self.r
class Policy:
    def getSettings(self): return "permanent cargoship-out"
class Config:
    def getZoneByName(self, name):
        return {"trusted": Zone(["ipset:cargoship-trusted", "ipset:cargoship-trusted6"], [], []),
                "public": Zone([], ["ssh", "distro-exposed-ports"], [RICH])}[name]
    def getPolicyNames(self): return ["allow-host-ipv6", "cargoship-out"]
    def getPolicyByName(self, name): return Policy()
class FirewallClient:
    connected = True
    def config(self): return Config()
    def getEntries(self, ipset):
        if ipset != "cargoship-trusted": raise Error("INVALID_IPSET: " + ipset)
        return ["10.0.0.1", "10.0.0.2"]
    def getSources(self, zone): return {"trusted": ["ipset:cargoship-trusted"], "public": []}[zone]
    def getServices(self, zone): return ["ssh"]
    def getRichRules(self, zone): return []
    def getPolicies(self): return ["allow-host-ipv6"]
    def getPolicySettings(self, name): raise Error("INVALID_POLICY: " + name)
]]
local FAKE_COMMAND = [[
import sys
class FirewallCommand:
    def __init__(self, quiet=False, verbose=False): pass
    def print_policy_info(self, policy, settings, default_zone=None, extra_interfaces=[]):
        assert settings == "permanent cargoship-out", settings
        sys.stdout.write(open(__import__("os").environ["CS_FAKE_DIR"] + "/policy").read() + "\n")
]]

local read = files.read
local function write(path, text, mode)
  files.write(path, text)
  if mode then assert(os.execute("chmod " .. mode .. " " .. q(path))) end
end

-- runs the probe through sh with the fake on PATH -> the answers as host:probes gives them
local function probe(dir, env)
  local p = assert(io.popen(string.format("cd %s && env CS_FAKE_DIR=%s PATH=%s %s sh -c %s 2>/dev/null; echo \"\\n$?\"",
    q(dir), q(dir), q(dir .. "/bin:/usr/bin:/bin"), env or "", q(state.FIREWALLD_PROBE))))
  local out = p:read("a")
  p:close()
  local body, code = out:match("^(.*)\n\n(%d+)\n$")
  return { firewalld = { out = body, code = tonumber(code) },
           ipset4 = { out = "", code = 44 }, ipset6 = { out = "", code = 44 }, service = { out = "", code = 44 },
           previous = { out = "", code = 44 } }
end

local function live(res)
  return state.apply({}, "firewalld", {}, res).state
end

describe("the firewalld state probe", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir .. "/bin") .. " " .. q(dir .. "/py/firewall")))
    write(dir .. "/policy", POLICY_INFO)
    write(dir .. "/py/firewall/__init__.py", "")
    write(dir .. "/py/firewall/client.py", "RICH = " .. string.format("%q", RICH) .. "\n" .. FAKE_CLIENT)
    write(dir .. "/py/firewall/command.py", FAKE_COMMAND)
  end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  local WANT = {
    ipset_entries = { ["cargoship-trusted"] = "10.0.0.1\n10.0.0.2", ["cargoship-trusted6"] = "" },
    services = "distro-exposed-ports ssh", services_rt = "ssh",
  }

  local function check(st)
    assert.are.same(WANT.ipset_entries, st.ipset_entries)
    assert.are.equal("ipset:cargoship-trusted\nipset:cargoship-trusted6", (st.trusted_sources:gsub("\n+$", "")))
    assert.are.equal("ipset:cargoship-trusted", (st.trusted_sources_runtime:gsub("\n+$", "")))
    assert.are.equal(WANT.services, (st.public_services:gsub("\n+$", "")))
    assert.are.equal(WANT.services_rt, (st.public_services_runtime:gsub("\n+$", "")))
    assert.are.equal(RICH, (st.rich_rules:gsub("\n+$", "")))
    assert.are.equal("", (st.rich_rules_runtime:gsub("\n+$", "")))
    assert.are.same({ "cargoship-out" }, (function() local n = {} for k in pairs(st.policies) do n[#n + 1] = k end
      return n end)())
    assert.are.same({ 'rule priority="1" family="ipv4" destination address="192.0.2.9" port port="25" protocol="tcp" '
      .. "reject" }, st.policies["cargoship-out"].rules)
    assert.are.same({ "HOST" }, st.policies["cargoship-out"].ingress)
    assert.are.same({}, st.policies_runtime)
  end

  it("asks firewall-cmd once per answer where firewall-cmd is not a Python program", function()
    write(dir .. "/bin/firewall-cmd", (FAKE_SH:gsub("RICH", RICH)), "755")
    local st = live(probe(dir))
    check(st)
    local asked = 0
    for _ in read(dir .. "/asked"):gmatch("[^\n]+") do asked = asked + 1 end
    assert.are.equal(11, asked)
  end)

  it("gives the same answers from firewall-cmd's client library in one process, never starting firewall-cmd", function()
    -- firewall-cmd's #! line names the interpreter; its body must not run
    write(dir .. "/bin/firewall-cmd", "#!/usr/bin/python3 -s\nimport sys\nopen(sys.argv[0] + '.ran', 'w')\n", "755")
    local st = live(probe(dir, "PYTHONPATH=" .. q(dir .. "/py")))
    check(st)
    assert.is_nil(read(dir .. "/bin/firewall-cmd.ran"))
    assert.is_nil(read(dir .. "/asked"))
  end)

  it("falls back to firewall-cmd when its library cannot be loaded, and says which answer is missing", function()
    -- a Python #! line (through env) whose interpreter has no firewall package: the client
    -- exits 3 and the ten questions go to firewall-cmd (shell under this fake python3)
    local body = FAKE_SH:gsub("^#![^\n]*\n", ""):gsub("RICH", RICH)
    write(dir .. "/bin/firewall-cmd", "#!/usr/bin/env python3\n" .. body, "755")
    write(dir .. "/bin/python3", '#!/bin/sh\n[ "$1" = - ] && exit 3\nexec sh "$@"\n', "755")
    check(live(probe(dir)))
    local asked = 0
    for _ in read(dir .. "/asked"):gmatch("[^\n]+") do asked = asked + 1 end
    assert.are.equal(11, asked)
    assert.has_error(function() live({ firewalld = { out = "", code = 1 } }) end,
      "firewalld: no answer for entries4 (exit 1)")
  end)

end)
