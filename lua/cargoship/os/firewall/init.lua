-- cargoship.os.firewall: the firewall facade: detection, the rule model and the per-front-end actions under one name.
--
-- The pieces (each its own module under cargoship.os.firewall):
--   detect               which front end a host runs (PROBE, parse, choose)
--   rules                the rule model: addresses, ports, rule checks, the SSH refusal
--   firewalld, ufw, nftables   one front end each: plan in, action records out
--   firewalld_policies   out and forward rules as firewalld policy objects
--   state                what a front end has now, for a precise assess
-- The OS layer names no engine: the engine's peer ports and cluster CIDRs reach it as data
-- in the plan (peer_ports, trust), put there by the phase "Updating hosts firewall".
--
-- actions(backend, plan) -> action records | nil, why, for one node (plan: see rules.lua;
--   plus previous = the recorded rule set, nftables_conf = {path, content}, state = what
--   the host has now: only what differs is returned; without it, everything is returned as
--   for a host that has nothing yet).
-- FIREWALLD_OURS, firewalld_removal(res) -> records taking out all cargoship added to
--   firewalld (reset): actions() of an empty plan against the state the probes read.
local detect = require "cargoship.os.firewall.detect"
local firewalld = require "cargoship.os.firewall.firewalld"
local nftables = require "cargoship.os.firewall.nftables"
local rules = require "cargoship.os.firewall.rules"
local ufw = require "cargoship.os.firewall.ufw"

local M = {
  PROBE = detect.PROBE, parse = detect.parse, choose = detect.choose,
  family = rules.family, ssh_guard = rules.ssh_guard, merge_ports = rules.merge_ports,
  rule_problems = rules.rule_problems, policy_problems = rules.policy_problems,
  FIREWALLD_SERVICE = firewalld.FIREWALLD_SERVICE, FIREWALLD_RECORD = firewalld.FIREWALLD_RECORD,
  rich_rule = firewalld.rich_rule, zone_rich_rule = firewalld.zone_rich_rule,
  UFW_APP = ufw.UFW_APP, UFW_RECORD = ufw.UFW_RECORD, ufw_rule = ufw.ufw_rule, parse_ufw_added = ufw.parse_ufw_added,
  NFT_FILE = nftables.NFT_FILE, nft_rule = nftables.nft_rule, nftables_ruleset = nftables.nftables_ruleset,
}

function M.actions(backend, plan)
  plan = plan or {}
  local v4, v6, why = rules.split_trust(plan.trust)
  if not v4 then return nil, why end
  why = rules.check_ports(plan.ports)
  if why then return nil, why end
  for _, r in ipairs(plan.rules or {}) do
    why = rules.check_rule(r)
    if why then return nil, why end
  end
  if backend == "firewalld" then return firewalld.actions(plan, v4, v6) end
  if backend == "ufw" then return ufw.actions(plan) end
  if backend == "nftables" then return nftables.actions(plan) end
  return nil, "firewall: no actions for front end " .. tostring(backend)
end

-- Exit 0 when firewalld runs and holds something of cargoship's (its record or its files).
M.FIREWALLD_OURS = "firewall-cmd --state >/dev/null 2>&1 && { [ -e " .. firewalld.FIREWALLD_RECORD .. " ] || "
  .. "ls /etc/firewalld/ipsets/cargoship-trusted.xml /etc/firewalld/ipsets/cargoship-trusted6.xml "
  .. "/etc/firewalld/services/" .. firewalld.FIREWALLD_SERVICE .. ".xml 2>/dev/null | grep -q .; }"

-- res: the answers to cargoship.os.firewall.state.probes("firewalld", {}) -> records | nil, why.
-- An empty plan against what the host has: every ipset, service, rich rule and policy of
-- cargoship's goes, then one reload. The record is not rewritten: reset removes its directory.
function M.firewalld_removal(res)
  local plan = require("cargoship.os.firewall.state").apply({ trust = {}, ports = {}, rules = {} }, "firewalld", {},
    res)
  local acts, why = M.actions("firewalld", plan)
  if not acts then return nil, why end
  local out = {}
  for _, a in ipairs(acts) do
    if not (a.kind == "write" and a.path == firewalld.FIREWALLD_RECORD) then out[#out + 1] = a end
  end
  return out
end

return M
