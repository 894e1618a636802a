-- cargoship.os.firewall: which firewall front end a host would use (engines.md §5.2) and which rules it can express.
local M = {}

-- Collects the front-end state as key=value lines, without root: firewalld is found by
-- process name, ufw by its config file, zones from the zone directories. Constant text.
M.PROBE = [[
have() { for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  if [ -x "$d/$1" ]; then echo "$d/$1"; return 0; fi; done; return 1; }
if fc=$(have firewall-cmd) || have firewalld >/dev/null; then
  if grep -qx firewalld /proc/[0-9]*/comm 2>/dev/null; then echo firewalld=running
  else echo firewalld=stopped; fi
  [ -n "$fc" ] && v=$("$fc" --version 2>/dev/null) && echo "firewalld_version=$v"
  for z in /usr/lib/firewalld/zones/*.xml /etc/firewalld/zones/*.xml; do
    [ -e "$z" ] && { z=${z##*/}; echo "zone=${z%.xml}"; }
  done
fi
if have ufw >/dev/null; then
  if grep -qi '^ENABLED=yes' /etc/ufw/ufw.conf 2>/dev/null; then echo ufw=active
  else echo ufw=inactive; fi
fi
if have nft >/dev/null; then
  echo nft=present
  for f in /etc/nftables.conf /etc/sysconfig/nftables.conf; do
    [ -e "$f" ] && echo "nftables_conf=$f"; done
  systemctl is-active --quiet nftables 2>/dev/null && echo nftables_service=active
fi
true]]

-- -> {firewalld = "running"|"stopped"|"absent", firewalld_version, zones = {..},
--     ufw = "active"|"inactive"|"absent", nftables = "usable"|"present"|"absent", nftables_conf}
function M.parse(out)
  local f = { firewalld = "absent", ufw = "absent", nftables = "absent", zones = {} }
  local service_active
  for line in (out or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k == "zone" then f.zones[#f.zones + 1] = v
    elseif k == "nft" then f.nftables = "present"
    elseif k == "nftables_conf" then f.nftables_conf = f.nftables_conf or v
    elseif k == "nftables_service" then service_active = true
    elseif k == "firewalld_version" then f.firewalld_version = v:match("[%d.]+")
    elseif k then f[k] = v end
  end
  -- kube-proxy and CNI rules alone do not make nftables a firewall someone manages
  if f.nftables == "present" and (service_active or f.nftables_conf) then f.nftables = "usable" end
  return f
end

local RUNNING = { firewalld = "running", ufw = "active", nftables = "usable" }
local STOPPED_WORD = { firewalld = "not running", ufw = "inactive" }

-- M.choose(preferred, fw) -> backend | nil, why
-- The OS's preferred front end when it runs; nothing when it is installed but stopped
-- (starting it could cut the SSH session, writing nftables beneath it would be undone
-- when it starts); else the first that detects: firewalld, ufw, nftables.
function M.choose(preferred, fw)
  if preferred and fw[preferred] == RUNNING[preferred] then
    return preferred, preferred .. " is running (the OS's preferred front end)"
  end
  if preferred and fw[preferred] and fw[preferred] ~= "absent" then
    return nil, string.format("%s is installed but %s: the firewall is left alone on this host",
      preferred, STOPPED_WORD[preferred] or "not running")
  end
  for _, b in ipairs({ "firewalld", "ufw", "nftables" }) do
    if fw[b] == RUNNING[b] then
      return b, string.format("%s detected (%s)", b, preferred and (preferred .. " is not installed")
        or "the OS names no preferred front end")
    end
  end
  return nil, "no firewall front end detected (firewalld, ufw or nftables)"
end

local function version_at_least(v, major, minor)
  if not v then return true end -- unknown: do not refuse on a guess
  local a, b = v:match("^(%d+)%.(%d+)")
  a, b = tonumber(a), tonumber(b)
  if not a then return true end
  return a > major or (a == major and b >= minor)
end

local function is_interface_name(s)
  return #s <= 15 and not s:find("[%s/:]") and s ~= "ANY" and s ~= "HOST"
end

local function has_zone(fw, z)
  if z == "ANY" or z == "HOST" or #fw.zones == 0 then return true end
  for _, known in ipairs(fw.zones) do if known == z then return true end end
  return false
end

-- M.rule_problems(backend, rule, fw) -> list of sentences (empty when the backend can
-- express the rule). Only what would fail on the host; the syntax was checked at load.
function M.rule_problems(backend, rule, fw)
  local out = {}
  local name = rule.name or rule.key or "?"
  local function add(fmt, ...) out[#out + 1] = string.format("firewall rule %q: " .. fmt, name, ...) end
  if backend == "firewalld" then
    -- forward and outbound filtering need policy objects, which firewalld got in 0.9
    if (rule.direction == "forward" or rule.direction == "out")
      and not version_at_least(fw.firewalld_version, 0, 9) then
      add("direction %s needs firewalld 0.9 or later (policies), the host has %s",
        rule.direction, fw.firewalld_version)
    end
    if rule.direction == "forward" then
      for _, k in ipairs({ "ingress", "egress" }) do
        if rule[k] and not has_zone(fw, rule[k]) then
          add("%s %q is not a firewalld zone on this host (forward rules name zones on firewalld; zones: %s)",
            k, rule[k], table.concat(fw.zones, ", "))
        end
      end
    end
  elseif backend == "ufw" or backend == "nftables" then
    if backend == "ufw" and (rule.protocol == "sctp" or rule.protocol == "dccp") then
      add("ufw cannot filter protocol %s (it knows tcp, udp, esp, ah, gre, igmp)", rule.protocol)
    end
    if rule.direction == "forward" then
      for _, k in ipairs({ "ingress", "egress" }) do
        if rule[k] and not is_interface_name(rule[k]) then
          add("%s %q is not an interface name, which %s forward rules need (zone names are firewalld's)",
            k, rule[k], backend)
        end
      end
    end
  end
  return out
end

-- Legacy host.policy entries are firewalld policy files and nothing else.
function M.policy_problems(backend, policy, fw)
  local out = {}
  for name in pairs(policy or {}) do
    if backend ~= "firewalld" then
      out[#out + 1] = string.format("firewall policy %q: host.policy is firewalld-only, this host uses %s",
        name, backend)
    elseif not version_at_least(fw.firewalld_version, 0, 9) then
      out[#out + 1] = string.format("firewall policy %q needs firewalld 0.9 or later, the host has %s",
        name, fw.firewalld_version)
    end
  end
  table.sort(out)
  return out
end

return M
