-- Phase "Gather host facts": hostname, private addresses, clock and firewall state in one read per host; profile merge.
--
-- Stores on each host:
--   host.facts.hostname (machine's short name), .fqdn (hostname -f, may be nil),
--   .node_name (config hostname, else the short name lower-cased: the Kubernetes node name),
--   .private_interface, .private_address (privateAddress, else IPv4, else IPv6), .private_ipv4,
--   .private_ipv6, .private_reasons (why, one sentence per family),
--   .addresses (every global address), .clock = {remote, local_mid, rtt} (epoch seconds),
--   .firewall = {firewalld, ufw, nftables, zones, firewalld_version, backend, backend_why}
--   host.config = the entry with its profile merged (config.merge_profile); the entry as
--   written stays in host.config_declared. Replacing host.config means no later phase can
--   forget the merge; keeping the declared one makes a second run merge from the original.
--   host.facts.predict: with a distro package, what the dry run foretells a later phase
--   would fail on (cargoship.facts.predict, built by phases.lib.predict), in the same batch.
-- Reads as the login user: nothing here needs root.
local config = require "cargoship.config"
local forecast = require "cargoship.facts.predict"
local predict = require "cargoship.phases.lib.predict"
local firewall = require "cargoship.os.firewall"
local network = require "cargoship.os.network"

local M = {
  id = "gather_facts",
  title = "Gather host facts",
  dry_run = "read_only",
  reads = { "connection", "os" },
  creates = { "facts" },
}

-- Keys run in sorted order: "clock" comes right after the quick `ip addr`, so the
-- remote time is taken close to the middle of the round trip.
M.PROBES = {
  addr = "ip -o addr show",
  clock = "date +%s.%N",
  firewall = firewall.PROBE,
  -- hostname -f asks the resolver; a dead DNS must not stall the whole probe
  fqdn = "timeout 3 hostname -f",
  hostname = "read -r h < /proc/sys/kernel/hostname && printf '%s\\n' \"$h\"",
  -- both families in one process: a dry run sends this to every host
  routes = "ip -o route show table all",
}

-- Sent ahead with the other phases' reads (facts/prefetch.lua); the clock's window comes with it.
function M.prefetch()
  return M.PROBES, { sudo = false }
end

function M.prepare(ctx)
  return ctx.hosts
end

local function out(res, key)
  return res[key] and res[key].code == 0 and res[key].out or ""
end

-- Probe answers + host entry -> facts | nil, why. Pure, so specs feed fixtures.
function M.decide(res, cfg)
  local f = {}
  local name = out(res, "hostname"):match("^%s*(%S+)")
  if not name then return nil, "cannot read the hostname (/proc/sys/kernel/hostname)" end
  f.hostname = name:match("^[^.]+")
  local fqdn = out(res, "fqdn"):match("^%s*(%S+)")
  f.fqdn = fqdn and fqdn:find(".", 1, true) and fqdn or nil
  f.node_name = cfg.hostname or f.hostname:lower()
  local addrs = network.parse_addrs(out(res, "addr"))
  if #addrs == 0 and not cfg.private_address then
    return nil, "`ip -o addr show` printed nothing: is iproute2 installed?"
  end
  local conn = cfg.connection or {}
  local r4, r6 = network.split_routes(out(res, "routes"))
  local pick, why = network.choose {
    addrs = addrs, routes4 = network.parse_routes(r4),
    routes6 = network.parse_routes(r6), connection_address = conn.address,
    private_address = cfg.private_address, private_interface = cfg.private_interface,
  }
  if not pick then return nil, why end
  f.private_interface, f.private_address = pick.interface, pick.address
  f.private_ipv4, f.private_ipv6 = pick.ipv4, pick.ipv6
  f.private_reasons = pick.reasons
  f.addresses = network.global_addresses(addrs)
  local secs, frac = out(res, "clock"):match("^%s*(%d+)%.?(%d*)")
  if secs then f.remote_clock = tonumber(secs) + (frac ~= "" and tonumber("0." .. frac) or 0) end
  f.firewall = firewall.parse(res.firewall and res.firewall.out)
  return f
end

function M.run(ctx, hosts)
  local clock = ctx.clock or os.time
  return ctx:each(hosts, function(host)
    -- the profile is merged first: the uploads the forecast sizes include its files
    host.config_declared = host.config_declared or host.config
    host.config = config.merge_profile(ctx.cluster or {}, host.config_declared)
    local want = predict.want(ctx, host)
    local t0 = clock()
    local res, err = host:probes(M.PROBES, { sudo = false })
    if not res then return nil, err end
    local t1 = clock()
    if type(err) == "table" then t0, t1 = err[1], err[2] end  -- answered by the prefetch, then
    -- the forecast's reads apart, so the clock's window is its own batch's
    if want then
      local more, why2 = host:probes(forecast.probes(want), { sudo = false })
      if not more then return nil, why2 end
      for k, v in pairs(more) do res[k] = v end
    end
    local f, why = M.decide(res, host.config_declared)
    if not f then return nil, host.name .. ": " .. why end
    if f.remote_clock then
      f.clock = { remote = f.remote_clock, local_mid = (t0 + t1) / 2, rtt = t1 - t0 }
    end
    f.remote_clock = nil
    local fw = f.firewall
    if host.os then fw.backend, fw.backend_why = host.os:firewall_backend(fw)
    else fw.backend, fw.backend_why = firewall.choose(nil, fw) end
    if want then f.predict = forecast.parse(res, want) end
    for k, v in pairs(f) do host.facts[k] = v end
    host.log:verbose("hostname %s, node name %s, private address %s on %s", f.hostname, f.node_name,
      f.private_address, f.private_interface)
    for _, r in ipairs(f.private_reasons) do host.log:verbose("%s", r) end
    host.log:verbose("firewall: %s", fw.backend_why)
    if host.config_declared.profile then
      host.log:verbose("profile %s merged into the host's settings", host.config_declared.profile)
    end
    return true
  end)
end

return M
