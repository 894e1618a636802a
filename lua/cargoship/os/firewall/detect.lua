-- cargoship.os.firewall.detect: which firewall front end a host runs (engines.md §5.2), from one unprivileged probe.
--
-- PROBE: constant shell text printing the front ends' state as key=value lines
-- parse(out) -> fw = {firewalld, firewalld_version, zones, ufw, nftables, nftables_conf}
-- choose(preferred, fw) -> backend | nil, why
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
    return nil, string.format("%s is installed but %s: it is never started (it could cut the SSH session) and "
      .. "nothing is written beneath it (it would replace it when started); the firewall is left alone on this host",
      preferred, STOPPED_WORD[preferred] or "not running")
  end
  for _, b in ipairs({ "firewalld", "ufw", "nftables" }) do
    -- a front end installed but stopped rules whatever is written beneath it once started
    if fw[b] and fw[b] ~= "absent" and fw[b] ~= RUNNING[b] and STOPPED_WORD[b] then
      return nil, string.format("%s is installed but %s: nothing is written beneath it (it would replace it when "
        .. "started), and it is never started (it could cut the SSH session); the firewall is left alone on this host",
        b, STOPPED_WORD[b])
    end
    if fw[b] == RUNNING[b] then
      return b, string.format("%s detected (%s)", b, preferred and (preferred .. " is not installed")
        or "the OS names no preferred front end")
    end
  end
  return nil, "no firewall front end detected (firewalld, ufw or nftables)"
end

return M
