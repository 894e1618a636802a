-- Specs for the forecast's join target (phases/lib/predict.lua): which hosts a worker's join probe
-- may not hear from yet, because phase 13 of this same run opens their firewall first (-F).
local predict = require "cargoship.phases.lib.predict"
local forecast = require "cargoship.facts.predict"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

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
