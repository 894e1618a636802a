-- cargoship.os.firewall.state: what a host's firewall front end has now, for the firewall phase's precise assess.
--
-- probes(backend, fw) -> {key = command}: the reads (as root) of one front end's state
-- apply(plan, backend, fw, res) -> plan with plan.state (and previous, nftables_conf) filled
--   from the answers, which cargoship.os.firewall.actions compares with
local firewalld = require "cargoship.os.firewall.firewalld"
local nftables = require "cargoship.os.firewall.nftables"
local policies = require "cargoship.os.firewall.firewalld_policies"
local shell = require "cargoship.shell"
local ufw = require "cargoship.os.firewall.ufw"

local M = {}

local ABSENT = 44

local function cat(path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

-- The state probes of a front end (as root): what actions() compares with.
function M.probes(backend, fw)
  local p = {}
  if backend == "nftables" then
    p.file = cat(nftables.NFT_FILE)
    p.table = "nft list table inet cargoship >/dev/null 2>&1"
    if fw.nftables_conf then p.conf = cat(fw.nftables_conf) end
  elseif backend == "ufw" then
    p.added = "ufw show added"
    p.app = cat("/etc/ufw/applications.d/cargoship")
    p.previous = cat(ufw.UFW_RECORD)
  elseif backend == "firewalld" then
    p.ipset4 = cat("/etc/firewalld/ipsets/cargoship-trusted.xml")
    p.ipset6 = cat("/etc/firewalld/ipsets/cargoship-trusted6.xml")
    p.service = cat("/etc/firewalld/services/" .. firewalld.FIREWALLD_SERVICE .. ".xml")
    p.entries4 = "firewall-cmd --ipset=cargoship-trusted --get-entries"
    p.entries6 = "firewall-cmd --ipset=cargoship-trusted6 --get-entries"
    p.sources = "firewall-cmd --permanent --zone=trusted --list-sources | tr ' ' '\\n'"
    p.sources_rt = "firewall-cmd --zone=trusted --list-sources | tr ' ' '\\n'"
    p.services = "firewall-cmd --permanent --zone=public --list-services"
    p.services_rt = "firewall-cmd --zone=public --list-services"
    p.rich = "firewall-cmd --permanent --zone=public --list-rich-rules"
    p.rich_rt = "firewall-cmd --zone=public --list-rich-rules"
    p.previous = cat(firewalld.FIREWALLD_RECORD)
    p.policies = policies.PROBE
    p.policies_rt = policies.PROBE_RUNTIME
  end
  return p
end

local function file_of(res, key)
  local r = res[key]
  if not r or r.code == ABSENT then return nil end
  if r.code ~= 0 then error(key .. ": cannot read (exit " .. tostring(r.code) .. ")", 0) end
  return r.out
end

local function out_of(res, key)
  local r = res[key]
  return r and r.code == 0 and r.out or ""
end

local function trim(s) return (s:gsub("%s+$", "")) end

-- Probe answers -> plan.state (and plan.previous, plan.nftables_conf) for actions().
function M.apply(plan, backend, fw, res)
  local st = {}
  if backend == "nftables" then
    st.file = file_of(res, "file")
    st.table_loaded = res.table and res.table.code == 0
    if fw.nftables_conf then plan.nftables_conf = { path = fw.nftables_conf, content = file_of(res, "conf") or "" } end
  elseif backend == "ufw" then
    if not res.added or res.added.code ~= 0 then error("ufw show added failed: is ufw 0.36 or later installed?", 0) end
    st.added = res.added.out
    st.app = file_of(res, "app")
    plan.previous = file_of(res, "previous")
  elseif backend == "firewalld" then
    st.files = {
      ["/etc/firewalld/ipsets/cargoship-trusted.xml"] = file_of(res, "ipset4"),
      ["/etc/firewalld/ipsets/cargoship-trusted6.xml"] = file_of(res, "ipset6"),
      ["/etc/firewalld/services/" .. firewalld.FIREWALLD_SERVICE .. ".xml"] = file_of(res, "service"),
    }
    st.ipset_entries = { ["cargoship-trusted"] = trim(out_of(res, "entries4")),
                         ["cargoship-trusted6"] = trim(out_of(res, "entries6")) }
    st.trusted_sources, st.trusted_sources_runtime = out_of(res, "sources"), out_of(res, "sources_rt")
    st.public_services, st.public_services_runtime = out_of(res, "services"), out_of(res, "services_rt")
    st.rich_rules, st.rich_rules_runtime = out_of(res, "rich"), out_of(res, "rich_rt")
    for _, k in ipairs({ "policies", "policies_rt" }) do
      if res[k] and res[k].code ~= 0 then error("firewalld: cannot list the cargoship policies (exit "
        .. tostring(res[k].code) .. ")", 0) end
    end
    st.policies = policies.parse(out_of(res, "policies"))
    st.policies_runtime = policies.parse(out_of(res, "policies_rt"))
    plan.previous = file_of(res, "previous")
  end
  plan.state = st
  return plan
end

return M
