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
    p.previous = cat(firewalld.FIREWALLD_RECORD)
    p.firewalld = M.FIREWALLD_PROBE
  end
  return p
end

-- firewalld's live state: the answers M.apply reads, each as firewall-cmd prints it, framed
-- "\29fw:KEY:EXIT\n<output>\n". firewall-cmd is a Python program, and each start cost ~0.35 s
-- of a host's CPU (the lab's real firewalld: 1,038 starts took 353 s of a CI run), ten of them
-- per assess: the answers come from one process instead, firewall-cmd's own client library
-- (firewall.client, what firewall-cmd calls) under the interpreter of its #! line, printed
-- as firewall-cmd prints them. Where that library cannot be loaded or the daemon not
-- reached, the ten firewall-cmd calls give the same answers (trailing newlines dropped, as $(...)
-- drops them). On the lab's firewalld 1.3.3: 0.8 s for the one process, 5.0 s for the ten calls.
local FALLBACK = {
  { "entries4", "firewall-cmd --ipset=cargoship-trusted --get-entries" },
  { "entries6", "firewall-cmd --ipset=cargoship-trusted6 --get-entries" },
  { "sources", "firewall-cmd --permanent --zone=trusted --list-sources | tr ' ' '\\n'" },
  { "sources_rt", "firewall-cmd --zone=trusted --list-sources | tr ' ' '\\n'" },
  { "services", "firewall-cmd --permanent --zone=public --list-services" },
  { "services_rt", "firewall-cmd --zone=public --list-services" },
  { "rich", "firewall-cmd --permanent --zone=public --list-rich-rules" },
  { "rich_rt", "firewall-cmd --zone=public --list-rich-rules" },
  { "policies", policies.PROBE },
  { "policies_rt", policies.PROBE_RUNTIME },
}

-- as firewall-cmd prints each answer (its --get-entries, --list-*, --get-policies, --info-policy)
local CLIENT = [[
import io, sys
try:
    from firewall.client import FirewallClient
    from firewall.command import FirewallCommand
    fw = FirewallClient()
    if not fw.connected:
        sys.exit(3)
    cfg = fw.config()
except Exception:
    sys.exit(3)
cmd = FirewallCommand()
out = sys.stdout
def answer(key, fn):
    buf = io.StringIO()
    sys.stdout = buf
    try:
        text, code = fn(), 0
    except Exception:
        text, code = "", 1
    finally:
        sys.stdout = out
    out.write("\x1dfw:%s:%d\n%s\n" % (key, code, (buf.getvalue() + (text or "")).rstrip("\n")))
def policies(names, info):
    try:
        names = names()
    except Exception:
        return ""
    for p in names:
        if p.startswith("cargoship-"):
            sys.stdout.write("policy=%s\n" % p)
            cmd.print_policy_info(p, info(p))
answer("entries4", lambda: "\n".join(fw.getEntries("cargoship-trusted")))
answer("entries6", lambda: "\n".join(fw.getEntries("cargoship-trusted6")))
answer("sources", lambda: "\n".join(cfg.getZoneByName("trusted").getSources()))
answer("sources_rt", lambda: "\n".join(fw.getSources("trusted")))
answer("services", lambda: " ".join(sorted(cfg.getZoneByName("public").getServices())))
answer("services_rt", lambda: " ".join(sorted(fw.getServices("public"))))
answer("rich", lambda: "\n".join(cfg.getZoneByName("public").getRichRules()))
answer("rich_rt", lambda: "\n".join(fw.getRichRules("public")))
answer("policies", lambda: policies(cfg.getPolicyNames, lambda p: cfg.getPolicyByName(p).getSettings()))
answer("policies_rt", lambda: policies(fw.getPolicies, fw.getPolicySettings))
]]

local function fallback()
  local lines = { "cs_fw() { cs_k=$1; shift; cs_o=$(eval \"$1\" 2>/dev/null); printf '\\035fw:%s:%d\\n%s\\n' "
    .. "\"$cs_k\" \"$?\" \"$cs_o\"; }" }
  for _, kv in ipairs(FALLBACK) do lines[#lines + 1] = shell.fmt("cs_fw %s %s", kv[1], kv[2]) end
  return table.concat(lines, "\n")
end

-- the client only under a Python #! line (a wrapper script's interpreter is never fed Python)
M.FIREWALLD_PROBE = "if cs_fc=$(command -v firewall-cmd) && IFS= read -r cs_l < \"$cs_fc\"; then\n"
  .. "  set -f; set -- ${cs_l#\\#!}; set +f\n"
  .. "  case \"${1##*/} ${2-}\" in python*|platform-python*|\"env python\"*)\n"
  .. "    \"$@\" - <<'CS_FIREWALLD_CLIENT' && exit 0\n" .. CLIENT .. "CS_FIREWALLD_CLIENT\n"
  .. "  esac\n"
  .. "fi\n" .. fallback()

-- res.firewalld (M.FIREWALLD_PROBE's framed answers) -> res with one entry per answer
local function unframe(res)
  local fw = res.firewalld
  if not fw then return res end
  local r = {}
  for k, v in pairs(res) do r[k] = v end
  local out, pos = fw.out or "", 1
  while true do
    local s, e, k, c = out:find("\29fw:([%w_]+):(%d+)\n", pos)
    if not s then break end
    local nxt = out:find("\29fw:", e + 1, true) or #out + 1
    r[k] = { out = (out:sub(e + 1, nxt - 1):gsub("\n$", "")), code = tonumber(c) }
    pos = nxt
  end
  for _, kv in ipairs(FALLBACK) do
    if not r[kv[1]] then error("firewalld: no answer for " .. kv[1] .. " (exit " .. tostring(fw.code) .. ")", 0) end
  end
  return r
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
    res = unframe(res)
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
