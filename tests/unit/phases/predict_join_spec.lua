-- Specs for the forecast's join target (phases/lib/predict.lua): which hosts a worker's join probe
-- may not hear from yet, because phase 13 of this same run opens their firewall first (-F).
local predict = require "cargoship.phases.lib.predict"
local forecast = require "cargoship.facts.predict"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"
local prefetch = require "cargoship.facts.prefetch"
local validate_hosts = require "cargoship.phases.validate_hosts"
local distro_facts = require "cargoship.phases.distro_facts"

local K3S = { type = "k3s", version = "1.35.2-k3s1", engine = {}, manifests = {} }
local NO_FIREWALL = { firewalld = "absent", ufw = "inactive", nftables = "absent", zones = {} }
local FIREWALLD = { firewalld = "running", firewalld_version = "1.3.4", ufw = "absent", nftables = "absent",
                    zones = { "public" } }

local function host(i, role, fw)
  local h = support.host({ name = "h" .. i, role = role,
    connection = { kind = "ssh", address = "10.0.0." .. i, user = "root" } })
  h.os = os_registry.by_name(fw == FIREWALLD and "rocky" or "debian"):new { service_manager = "systemd" }
  h.facts.node_name, h.facts.private_address = "h" .. i, "10.0.0." .. i
  h.facts.engine = { running = false }
  h.facts.firewall = {}
  for k, v in pairs(fw) do h.facts.firewall[k] = v end
  h.facts.firewall.backend, h.facts.firewall.backend_why = h.os:firewall_backend(h.facts.firewall)
  return h
end

local function target(leader_fw, options)
  local leader, worker = host(1, "controller", leader_fw), host(2, "worker", NO_FIREWALL)
  local ctx = support.ctx({ leader, worker }, { distro = K3S, options = options,
                                                cluster = { name = "lab", hosts = {}, profiles = {} } })
  return predict.join_target(ctx, worker)
end

local NO_ANSWER = "J 124 10.0.0.1 \n"

describe("the forecast's join target", function()
  it("foretells no answer from a leader whose firewall nothing in this run opens", function()
    for _, options in ipairs { {}, { update_firewall = true } } do
      local t = assert(target(NO_FIREWALL, options))
      assert.is_nil(t.firewalled)
      assert.are.equal("cannot reach 10.0.0.1:6443 (the leader h1) at 10.0.0.1: no answer within 2 s",
        forecast.join_problem(NO_ANSWER, t))
    end
  end)

  it("says nothing of no answer from a leader whose running firewall phase 13 opens (-F)", function()
    local t = assert(target(FIREWALLD, { update_firewall = true }))
    assert.is_true(t.firewalled)
    assert.is_nil(forecast.join_problem(NO_ANSWER, t))
    -- without -F the firewall stays as it is: the failure is foretold
    assert.is_nil(assert(target(FIREWALLD, {})).firewalled)
  end)
end)

-- Issue 24: a worker's join probe used to cost phase 4 a round trip of its own, and phase 5's reads
-- another. validate_hosts now sends it ahead: one batch before phase 4 answers both phases.
describe("the join probe, sent ahead", function()
  it("rides in one batch with phase 5's reads, and neither phase sends anything more", function()
    local leader, worker = host(1, "controller", NO_FIREWALL), host(2, "worker", NO_FIREWALL)
    local conn = support.conn({ function(cmd)
      local parts = {}
      for i in cmd:gmatch("printf '\\036cs%-pf%-begin:(%d+)\\n'") do
        parts[#parts + 1] = "\30cs-pf-begin:" .. i .. "\n\30cs-pf-err:" .. i .. "\n\30cs-pf-end:" .. i .. ":0\n"
      end
      return table.concat(parts), "", 0
    end })
    worker:attach(conn)
    local ctx = support.ctx({ leader, worker }, { distro = K3S, cluster = { name = "lab", hosts = {}, profiles = {} } })
    local join = assert(predict.probe_cmds(ctx, worker).join, "the worker has a join probe")
    -- before phase 3's facts are in (the batches before phases 2 and 3) it asks nothing: the
    -- target would be the leader's bare name
    local address = leader.facts.private_address
    leader.facts.private_address = nil
    assert.is_nil(validate_hosts.prefetch(ctx, worker))
    leader.facts.private_address = address
    prefetch.before_phase(ctx, { validate_hosts, distro_facts }, 1, { worker })
    assert.are.equal(1, #conn.commands, "one batch before phase 4")
    -- as root: sudo is not known yet on this connection, so the batch asks it and quotes each command
    local quoted = require("cargoship.shell").quote(join)
    assert.truthy(conn.commands[1].cmd:find(quoted, 1, true), "the batch carries the join probe")
    -- phase 4's own probe and phase 5's reads are answered already: nothing more goes out
    local sudo, joins = predict.probe_hosts(ctx, { worker })
    assert.is_nil(sudo[worker])
    assert.are.equal("", joins[worker])
    assert.are.same({}, prefetch.needs(ctx, { distro_facts }, 1, worker))
    prefetch.before_phase(ctx, { distro_facts }, 1, { worker })
    assert.are.equal(1, #conn.commands, "phase 4 and 5 sent nothing of their own")
  end)
end)
