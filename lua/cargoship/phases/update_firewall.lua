-- Phase "Updating hosts firewall" (-F/--firewall): trust the cluster, open .host.ports, apply .host.firewall.rules.
--
-- Only with --firewall (-F, --update-firewall). Per host (engines.md §5.2):
--   front end  the one cargoship.os.firewall.choose picks from a fresh probe: the OS's
--              preferred one when it runs, else the first that runs (firewalld, ufw,
--              nftables). One installed but stopped is never started and nothing is written
--              beneath it: the host is left alone (ctx:leave) and the report says why
--   plan       trust every other node's private address and the engine's pod and service
--              CIDRs (ctx.engine:cluster_cidrs); open .host.ports to any source; the host's
--              .host.firewall.rules; the engine's peer ports (ctx.engine.peer_ports; every
--              engine's when none is known) closed to the rest. The OS layer gets these as data
--   SSH        a rule that would drop or reject the SSH session cargoship is connected
--              through (its port, from the address the host sees us at) fails the host in
--              assess, naming the rule: nothing is changed there
-- assess reads the front end's state (a second round trip, as root) and returns only what
-- differs (cargoship.os.firewall.actions with plan.state), so a converged host has nothing
-- to do. nftables state lives in /var/lib/cargoship, which no sync phase prunes (§6.9).
local engine = require "distros.engine"
local firewall = require "cargoship.os.firewall"
local fw_state = require "cargoship.os.firewall.state"
local linux = require "cargoship.os.linux"

local M = {
  id = "update_firewall",
  title = "Updating hosts firewall",
  reads = { "connection", "os", "facts" },
  creates = { "firewall" },
}

function M.prepare(ctx)
  if not (ctx.options and ctx.options.update_firewall) then return {} end
  return ctx.hosts
end

-- The engine's peer ports; with no engine known (no package, none running), every engine's.
local function peer_ports(ctx)
  if ctx.engine then return ctx.engine.peer_ports end
  local sets = {}
  for _, t in ipairs(engine.TYPES) do sets[#sets + 1] = assert(engine.load(t)).peer_ports end
  return firewall.merge_ports(sets)
end

-- What this host's firewall should say, whatever the front end.
function M.plan(ctx, host)
  local trust, seen = {}, {}
  local function add(a)
    if a and not seen[a] then
      seen[a] = true
      trust[#trust + 1] = a
    end
  end
  for _, h in ipairs(ctx.hosts) do
    if h ~= host then
      local f = h.facts or {}
      if not f.private_address then error(h.name .. ": no private address was gathered, so it cannot be trusted", 0) end
      add(f.private_address)
      if f.private_ipv6 and f.private_ipv6 ~= f.private_address then add(f.private_ipv6) end
    end
  end
  if ctx.engine then
    for _, c in ipairs(ctx.engine:cluster_cidrs(ctx.distro and ctx.distro.engine)) do add(c) end
  end
  local hc = host.config.host or {}
  return { trust = trust, ports = hc.ports or {}, rules = hc.firewall and hc.firewall.rules or {},
           peer_ports = peer_ports(ctx) }
end

M.FRONT = {
  ssh = [[printf '%s\n' "${SSH_CONNECTION%% *}"]],
  firewall = firewall.PROBE,
}

function M.assess(ctx, host)
  local cfg = host.os or linux
  local front, err = host:probes(M.FRONT, { sudo = false })
  if not front then error(err, 0) end
  local fw = firewall.parse(front.firewall and front.firewall.out)
  local backend, why = cfg:firewall_backend(fw)
  if not backend then
    ctx:leave(host, why)
    return {}
  end
  local plan = M.plan(ctx, host)
  local conn = host.config.connection or {}
  local client = (front.ssh and front.ssh.out or ""):match("^%s*(%S+)")
  local refuse = firewall.ssh_guard(plan.rules, { port = tonumber(conn.port) or 22, client = client })
  if refuse then error(host.name .. ": " .. refuse, 0) end
  local res, perr = host:probes(fw_state.probes(backend, fw))
  if not res then error(perr, 0) end
  fw_state.apply(plan, backend, fw, res)
  if backend == "nftables" and not fw.nftables_conf then
    host.log:warn("firewall: no boot-time nftables file (/etc/nftables.conf, /etc/sysconfig/nftables.conf): "
      .. "table inet cargoship is loaded now but not at the next boot")
  end
  local acts, aerr = cfg:firewall_actions(backend, plan)
  if not acts then error(host.name .. ": " .. aerr, 0) end
  if #acts > 0 then host.log:verbose("firewall: %s (%s)", backend, why) end
  return acts
end

return M
