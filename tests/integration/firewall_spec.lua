-- Integration spec on the lab: phase 13 (apply -F) on real firewalld, ufw and nftables, real traffic between hosts.
--
-- Issue 12 "Done when": after `apply -F` a cluster peer reaches a node's engine port (rke2's
-- supervisor port 9345, a python listener) and a lab host outside the cluster does not, on
-- each of firewalld (the rocky/systemd host, running as on EL), ufw (a Debian host, enabled
-- by the operator first) and nftables (a Debian host without ufw); a .host.ports entry is
-- reachable from the non-member; the dry run equals the run (JSON) and writes nothing; a
-- second apply changes nothing; a front end installed but stopped is left alone and the
-- report says why; a rule set that would close cargoship's SSH port is refused, naming the
-- rule; and cargoship's SSH session survives every case (the phases after 13 run through it).
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local ENGINE_PORT, OPEN_PORT = 9345, 30080
-- a second exposed port, dropped later; the outsider's listeners the firewalld node's out rules aim at
local DROP_PORT, EGRESS_OK, EGRESS_BLOCKED = 30083, 30082, 30081
-- a port the in rules open to the outsider alone: an allow for it, then a reject for everyone
local IN_PORT = 30084

local function index_of(h)
  for i, x in ipairs(lab.hosts()) do if x.address == h.address then return i end end
end

-- cluster members: firewalld, ufw, nftables; the outsider: a fourth lab host
local FWD = lab.find("rocky", "systemd")
local UFW = lab.find("debian", "systemd")
local NFT = lab.find("debian", "runit")
local OUT = lab.find("rocky", "runit")
local MEMBERS = { FWD, UFW, NFT }
local I = { fwd = index_of(FWD), ufw = index_of(UFW), nft = index_of(NFT), out = index_of(OUT) }
-- a second host outside the cluster, which no rule names
for i in ipairs(lab.hosts()) do
  if not I.other and i ~= I.fwd and i ~= I.ufw and i ~= I.nft and i ~= I.out then I.other = i end
end
local ALL = #lab.hosts()

local work
local RULES = "      host:\n        ports: [{port: %d, protocol: tcp}]\n"
  .. "        firewall:\n          rules: [{name: no-telnet, action: deny, protocol: tcp, port: 23}]"

local function sh_ok(i, cmd)
  local code, out = run.ssh(i, cmd)
  assert(code == 0, "h" .. i .. ": " .. cmd .. ": " .. out)
  return out
end

-- Can host i open a TCP connection to addr:port?
local function reaches(i, addr, port)
  local _, out = run.ssh(i, string.format("timeout 4 bash -c 'exec 3<>/dev/tcp/%s/%d' && echo open || echo closed",
    addr, port))
  return out:match("open") ~= nil
end

local function listen(i, port)
  sh_ok(i, string.format("cd /tmp && (setsid python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 </dev/null &)"
    .. "; sleep 0.5", port))
end

local function apply(args, cluster_extra)
  run.cluster(work, MEMBERS, cluster_extra or function() return string.format(RULES, OPEN_PORT) end)
  return run.apply(work, args .. run.NO_ENGINE .. " --distro " .. q(run.built(work .. "/distro.yaml")))
end

-- What an earlier run of this spec left: gone, so every run starts from the hosts as booted
-- (/var/lib/cargoship too: on a fresh host, earlier phases of the run create it after the dry
-- run saw it missing, and the plan must still equal the run).
local function reset()
  for _, i in ipairs { I.fwd, I.ufw, I.nft } do run.ssh(i, "rm -rf /var/lib/cargoship") end
  run.ssh(I.fwd, "for r in $(firewall-cmd --permanent --zone=public --list-rich-rules | tr ' ' '~'); do"
    .. " firewall-cmd -q --permanent --zone=public --remove-rich-rule=\"$(echo $r | tr '~' ' ')\"; done;"
    .. " firewall-cmd -q --permanent --zone=trusted --remove-source=ipset:cargoship-trusted;"
    .. " firewall-cmd -q --permanent --zone=public --remove-service=distro-exposed-ports;"
    .. " for p in $(firewall-cmd --permanent --get-policies); do case $p in cargoship-*)"
    .. " firewall-cmd -q --permanent --delete-policy=$p;; esac; done;"
    .. " rm -f /etc/firewalld/ipsets/cargoship-trusted*.xml /etc/firewalld/services/distro-exposed-ports.xml"
    .. " /var/lib/cargoship/firewalld.rules; firewall-cmd -q --reload; true")
  run.ssh(I.ufw, "ufw --force reset >/dev/null; rm -f /etc/ufw/applications.d/cargoship /var/lib/cargoship/ufw.rules;"
    .. " rm -f /etc/ufw/*.rules.20*; true")
  run.ssh(I.nft, "nft delete table inet cargoship 2>/dev/null; rm -f /var/lib/cargoship/nftables.nft;"
    .. " sed -i '/cargoship/d' /etc/nftables.conf; if [ -x /usr/sbin/ufw.cs-hidden ]; then"
    .. " mv /usr/sbin/ufw.cs-hidden /usr/sbin/ufw; fi; true")
end

setup(function()
  work = run.work()
  reset()
  lab.write(work .. "/distro.yaml", "kind: ZarfDistro\nmetadata: {name: fw}\nspec: {type: rke2, version: 1.35.4-rke2r1,"
    .. " config: {os: {files: " .. run.container_selinux(work, work) .. "}}}\n")
  -- the operator enables ufw (with SSH allowed) before cargoship is asked to add to it;
  -- the nftables node has no ufw, so nftables is the front end it runs
  sh_ok(I.ufw, "ufw allow 22/tcp >/dev/null && ufw --force enable >/dev/null")
  sh_ok(I.nft, "if [ -x /usr/sbin/ufw ]; then mv /usr/sbin/ufw /usr/sbin/ufw.cs-hidden; fi")
  for _, i in ipairs { I.fwd, I.ufw, I.nft } do
    listen(i, ENGINE_PORT)
    listen(i, OPEN_PORT)
    listen(i, DROP_PORT)
    listen(i, IN_PORT)
  end
  listen(I.out, EGRESS_OK)
  listen(I.out, EGRESS_BLOCKED)
end)

teardown(function()
  pcall(reset)
  for _, i in ipairs { I.fwd, I.ufw, I.nft, I.out } do pcall(run.ssh, i, "pkill -f 'http.server' ; true") end
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("apply -F on firewalld, ufw and nftables", function()
  local plan, first, second, up0, up1, up2, up3

  setup(function()
    up0 = run.uppers(ALL)
    plan = apply("--dry-run -F")
    up1 = run.uppers(ALL)
    first = apply("--confirm -F")
    up2 = run.uppers(ALL)
    second = apply("--confirm -F")
    up3 = run.uppers(ALL)
  end)

  it("plans each node on the front end it runs, and the dry run writes no byte", function()
    assert.are.equal(3, plan.code, plan.stderr)
    run.assert_unchanged(up0, up1, ALL)
    local fw = run.phase(plan.doc, "update_firewall")
    assert.are.equal("would_act", fw.verdict)
    local says = {}
    for _, h in ipairs(fw.hosts) do
      local s = {}
      for _, a in ipairs(h.actions) do s[#s + 1] = a.say end
      says[h.host] = table.concat(s, "\n")
    end
    assert.matches("trust ipset cargoship-trusted", says[FWD.address], 1, true)
    assert.matches("ufw allow from " .. NFT.address, says[UFW.address], 1, true)
    assert.matches("load table inet cargoship", says[NFT.address], 1, true)
  end)

  it("does what the plan said, and the SSH session carried the run to its end", function()
    assert.are.equal(0, first.code, first.stderr)
    local all = run.compare(plan.doc, first.doc)
    for _, x in ipairs(all) do assert.are.equal("done", x.action.outcome, x.phase .. " on " .. x.host) end
    assert.are.equal("ran", run.phase(first.doc, "disconnect").verdict)
  end)

  it("lets a peer reach every node's engine port and keeps an outsider out", function()
    for _, target in ipairs { FWD, UFW, NFT } do
      local peer = target == FWD and I.nft or I.fwd
      assert.is_true(reaches(peer, target.address, ENGINE_PORT), "peer h" .. peer .. " -> " .. target.address)
      assert.is_false(reaches(I.out, target.address, ENGINE_PORT), "outsider -> " .. target.address)
    end
  end)

  it("opens the declared .host.ports to the outsider, and SSH stays open to it", function()
    for _, target in ipairs { FWD, UFW, NFT } do
      assert.is_true(reaches(I.out, target.address, OPEN_PORT), "outsider -> " .. target.address .. ":" .. OPEN_PORT)
      assert.is_true(reaches(I.out, target.address, 22), "outsider -> " .. target.address .. ":22")
    end
  end)

  it("keeps nftables state outside /etc/cargoship and includes it at boot", function()
    local out = sh_ok(I.nft, "test -f /var/lib/cargoship/nftables.nft && ! test -e /etc/cargoship/nftables.nft"
      .. " && grep -c 'include \"/var/lib/cargoship/nftables.nft\"' /etc/nftables.conf")
    assert.are.equal("1\n", out)
  end)

  it("changes nothing the second time", function()
    assert.are.equal(0, second.code, second.stderr)
    run.compare(second.doc.plan, second.doc)
    assert.are.equal("nothing_to_do", run.phase(second.doc.plan, "update_firewall").verdict)
    assert.are.equal("nothing_to_do", run.verdict(second.doc, "update_firewall"))
    run.assert_unchanged(up2, up3, ALL)
  end)
end)

-- The host block of member i (1 = firewalld, 2 = ufw, 3 = nftables) with these ports and,
-- on the firewalld node, the out and forward rules when `policies` is set.
local function host_block(ports, policies)
  return function(i)
    local list = {}
    for _, p in ipairs(ports[i] or {}) do list[#list + 1] = string.format("{port: %d, protocol: tcp}", p) end
    local rules = { "{name: no-telnet, action: deny, protocol: tcp, port: 23}" }
    if policies then
      -- in rules, first match deciding on every front end: the outsider's allow, then a reject
      rules[#rules + 1] = string.format("{name: in-ok, action: allow, source: %s, protocol: tcp, port: %d}",
        OUT.address, IN_PORT)
      rules[#rules + 1] = string.format("{name: in-no, action: reject, protocol: tcp, port: %d}", IN_PORT)
    end
    if policies and i == 1 then
      -- first match decides: the allow before the reject lets one port of the outsider through
      rules[#rules + 1] = string.format("{name: out-ok, action: allow, direction: out, destination: %s,"
        .. " protocol: tcp, port: %d}", OUT.address, EGRESS_OK)
      rules[#rules + 1] = string.format("{name: no-egress, action: reject, direction: out, destination: %s,"
        .. " protocol: tcp}", OUT.address)
      rules[#rules + 1] = "{name: fwd-http, action: allow, direction: forward, ingress: public, egress: trusted,"
        .. " protocol: tcp, port: 80}"
    elseif policies then
      -- every new outbound TCP connection refused: cargoship's SSH session into the host lives on
      rules[#rules + 1] = "{name: no-out, action: reject, direction: out, protocol: tcp}"
    end
    return "      host:\n        ports: [" .. table.concat(list, ", ") .. "]\n"
      .. "        firewall:\n          rules: [" .. table.concat(rules, ", ") .. "]"
  end
end

local function says_of(doc, host)
  local s = {}
  for _, h in ipairs(run.phase(doc, "update_firewall").hosts) do
    if h.host == host.address then
      for _, a in ipairs(h.actions) do s[#s + 1] = a.say end
    end
  end
  return table.concat(s, "\n")
end

-- dry run (writes nothing), the run it planned, then a second run that has nothing to do
local function converge(extra)
  local before = run.uppers(ALL)
  local plan = apply("--dry-run -F", extra)
  run.assert_unchanged(before, run.uppers(ALL), ALL)
  assert.are.equal(3, plan.code, plan.stderr)
  local r = apply("--confirm -F", extra)
  assert.are.equal(0, r.code, r.stderr)
  for _, x in ipairs(run.compare(plan.doc, r.doc)) do
    assert.are.equal("done", x.action.outcome, x.phase .. " on " .. x.host)
  end
  assert.are.equal("ran", run.phase(r.doc, "disconnect").verdict)
  local again = apply("--confirm -F", extra)
  assert.are.equal(0, again.code, again.stderr)
  assert.are.equal("nothing_to_do", run.phase(again.doc.plan, "update_firewall").verdict)
  assert.are.equal("nothing_to_do", run.verdict(again.doc, "update_firewall"))
  return plan
end

local function cargoship_policies()
  return sh_ok(I.fwd, "firewall-cmd --list-all-policies | grep -A30 '^cargoship-' || true")
end

describe("out and forward rules, and what the cluster file drops", function()
  local ALL3 = { OPEN_PORT, DROP_PORT }

  it("firewalld filters the node's egress through policy cargoship-out, first match deciding", function()
    assert.is_true(reaches(I.fwd, OUT.address, EGRESS_BLOCKED), "before: firewalld node -> outsider")
    local plan = converge(host_block({ ALL3, ALL3, ALL3 }, true))
    assert.matches("create firewalld policy cargoship-out (HOST -> ANY)", says_of(plan.doc, FWD), 1, true)
    assert.is_true(reaches(I.fwd, OUT.address, EGRESS_OK), "allowed egress")
    assert.is_false(reaches(I.fwd, OUT.address, EGRESS_BLOCKED), "rejected egress")
    assert.is_true(reaches(I.out, FWD.address, 22), "SSH to the firewalld node")
  end)

  it("keeps in rules in the file's order on every front end: the outsider's allow before the reject", function()
    -- firewalld would try a rich rule's reject before an accept; the priorities keep the order
    for _, target in ipairs { FWD, UFW, NFT } do
      assert.is_true(reaches(I.out, target.address, IN_PORT), "outsider -> " .. target.address .. ":" .. IN_PORT)
      assert.is_false(reaches(I.other, target.address, IN_PORT), "h" .. I.other .. " -> " .. target.address)
    end
    assert.matches('rule priority="-2" family="ipv4" source address="' .. OUT.address .. '" port port="' .. IN_PORT
      .. '" protocol="tcp" accept', sh_ok(I.fwd, "firewall-cmd --zone=public --list-rich-rules"), 1, true)
  end)

  it("ufw and nftables refuse every new outbound connection, and cargoship's SSH session survived it", function()
    -- converge() above ran the dry run, the run to its disconnect and a second run, each
    -- through new SSH sessions into these hosts, with the out rule in force from the first
    for _, i in ipairs { I.ufw, I.nft } do
      assert.is_false(reaches(i, OUT.address, EGRESS_OK), "h" .. i .. " -> outsider")
      assert.is_true(reaches(I.out, lab.host(i).address, 22), "outsider -> h" .. i .. ":22")
    end
  end)

  it("puts forward rules into a cargoship-fwd policy of the rule's zones", function()
    local out = cargoship_policies()
    assert.matches("cargoship%-fwd%-%x%x%x%x %(active%)\n.-ingress%-zones: public\n  egress%-zones: trusted\n", out)
    assert.matches('rule priority="1" port port="80" protocol="tcp" accept', out, 1, true)
    assert.matches("cargoship-out (active)", out, 1, true)
    assert.matches("ingress-zones: HOST\n  egress-zones: ANY\n", out, 1, true)
    assert.matches('priority="2" family="ipv4" destination address="' .. OUT.address .. '" protocol value="tcp" reject',
      out, 1, true)
  end)

  it("opens every declared port to the outsider", function()
    for _, target in ipairs { FWD, UFW, NFT } do
      assert.is_true(reaches(I.out, target.address, DROP_PORT), "outsider -> " .. target.address .. ":" .. DROP_PORT)
    end
  end)

  it("closes a port dropped from .host.ports and removes dropped rules and their policies", function()
    local plan = converge(host_block({ { OPEN_PORT }, { OPEN_PORT }, { OPEN_PORT } }, false))
    local fwd = says_of(plan.doc, FWD)
    assert.matches("delete firewalld policy cargoship-out", fwd, 1, true)
    assert.matches("delete firewalld policy cargoship%-fwd%-%x%x%x%x", fwd)
    assert.matches("write /etc/firewalld/services/distro-exposed-ports.xml", fwd, 1, true)
    assert.matches("write /etc/ufw/applications.d/cargoship", says_of(plan.doc, UFW), 1, true)
    assert.matches("load table inet cargoship", says_of(plan.doc, NFT), 1, true)
    -- nftables' chains accept by policy (only the engine ports are closed to non-members), so
    -- there the dropped port leaves the table rather than becoming unreachable
    for _, target in ipairs { FWD, UFW } do
      assert.is_false(reaches(I.out, target.address, DROP_PORT), "dropped: outsider -> " .. target.address)
      assert.is_true(reaches(I.out, target.address, OPEN_PORT), "kept: outsider -> " .. target.address)
    end
    local tbl = sh_ok(I.nft, "nft list table inet cargoship")
    assert.matches("dport[^\n]*" .. OPEN_PORT .. "[^\n]*accept", tbl)
    assert.is_nil(tbl:find(tostring(DROP_PORT), 1, true), tbl)
    assert.are.equal("", cargoship_policies())
    for _, i in ipairs { I.fwd, I.ufw, I.nft } do
      assert.is_true(reaches(i, OUT.address, EGRESS_BLOCKED), "egress open again: h" .. i)
    end
  end)

  it("closes the last port too: the service leaves zone public, the ufw profile goes", function()
    local plan = converge(host_block({ {}, {}, { OPEN_PORT } }, false))
    assert.matches("close the exposed ports in zone public", says_of(plan.doc, FWD), 1, true)
    assert.matches("ufw: drop rule allow cargoship-ports", says_of(plan.doc, UFW), 1, true)
    assert.matches("remove /etc/ufw/applications.d/cargoship", says_of(plan.doc, UFW), 1, true)
    for _, target in ipairs { FWD, UFW } do
      assert.is_false(reaches(I.out, target.address, OPEN_PORT), "no port left: outsider -> " .. target.address)
      assert.is_true(reaches(I.out, target.address, 22), "SSH stays: outsider -> " .. target.address)
    end
    assert.are.equal("absent\n", sh_ok(I.fwd, "firewall-cmd --permanent --zone=public --list-services"
      .. " | grep -qw distro-exposed-ports && echo present || echo absent"))
    assert.are.equal("absent\n", sh_ok(I.ufw, "test -e /etc/ufw/applications.d/cargoship && echo present"
      .. " || echo absent"))
  end)
end)

describe("apply -F refuses", function()
  it("a rule set that would close the SSH port, naming the rule, before changing anything", function()
    local before = run.uppers(ALL)
    local r = apply("--dry-run -F", function(i)
      if i == 2 then
        return "      host:\n        firewall:\n"
          .. "          rules: [{name: lockdown, action: reject, protocol: tcp, port: 20-30}]"
      end
    end)
    assert.are.equal(1, r.code, r.stderr)
    local fw = run.phase(r.doc, "update_firewall")
    assert.are.equal("failed", fw.verdict)
    local msg
    for _, h in ipairs(fw.hosts) do if h.error ~= require("cjson").null then msg = h.error end end
    assert(msg, require("cjson").encode(fw))
    assert.matches('firewall rule "lockdown" would reject the SSH port 22', msg, 1, true)
    run.assert_unchanged(before, run.uppers(ALL), ALL)
  end)
end)

describe("a front end installed but stopped", function()
  it("is never started and nothing is written beneath it; the report says why", function()
    sh_ok(I.fwd, "systemctl stop firewalld")
    sh_ok(I.nft, "nft delete table inet cargoship; rm -f /var/lib/cargoship/nftables.nft")
    local before = run.uppers(ALL)
    local plan = apply("--dry-run -F")
    local r = apply("--confirm -F")
    local ok, err = pcall(function()
      assert.are.equal(0, r.code, r.stderr)
      run.compare(plan.doc, r.doc)
      local fw = run.phase(r.doc, "update_firewall")
      for _, h in ipairs(fw.hosts) do
        if h.host == FWD.address then
          assert.are.same({}, h.actions)
          assert.matches("firewalld is installed but not running: it is never started", h.left_alone, 1, true)
        end
      end
      assert.are.equal("inactive\n", select(2, run.ssh(I.fwd, "systemctl is-active firewalld")))
      assert.are.equal("absent\n", select(2, run.ssh(I.fwd, "nft list table inet cargoship >/dev/null 2>&1"
        .. " && echo present || echo absent")))
      local diff = lab.snapshot_diff(before[I.fwd], run.uppers(ALL)[I.fwd])
      assert.are.same({}, diff, "nothing written on the host whose firewalld is stopped")
    end)
    run.ssh(I.fwd, "systemctl start firewalld")
    assert(ok, err)
  end)
end)
