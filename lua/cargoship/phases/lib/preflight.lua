-- cargoship.phases.lib.preflight: the checks of "Validate hosts" that need no round trip (facts in, problems out).
--
-- Each problem is {host = Host, message} and names what to change; see phases/validate_hosts.lua
-- for the list.
local firewall = require "cargoship.os.firewall"
local network = require "cargoship.os.network"

local M = {}

M.ENGINE_ARCHES = { "amd64", "arm64", "riscv64" }
M.DEFAULT_MAX_SKEW = 30

function M.add(list, host, msg)
  local prefix = host.name .. ": "
  if msg:sub(1, #prefix) == prefix then msg = msg:sub(#prefix + 1) end
  list[#list + 1] = { host = host, message = msg }
end

-- key_of(host) -> the value as the host has it; canon(value) -> what must not repeat.
local function check_unique(problems, hosts, what, key_of, canon)
  local first = {}
  for _, h in ipairs(hosts) do
    local v = key_of(h)
    if v then
      local k = canon(v):lower()
      if first[k] then
        M.add(problems, h, string.format("%s %s is also %s's; each host needs its own", what, v, first[k].name))
      else
        first[k] = h
      end
    end
  end
end

local function check_arch(ctx, problems, h)
  local arches = ctx.distro and ctx.distro.architectures or M.ENGINE_ARCHES
  local arch = h.facts.arch
  if not arch then return end
  for _, a in ipairs(arches) do if a == arch then return end end
  M.add(problems, h, string.format("architecture %s (uname -m %s) is not one %s (%s)", arch,
    h.facts.machine or "?", ctx.distro and "the distro package carries" or "the engines ship",
    table.concat(arches, ", ")))
end

local function check_firewall(ctx, problems, h)
  local hc = h.config.host or {}
  local rules = hc.firewall and hc.firewall.rules or {}
  if #rules == 0 and next(hc.policy or {}) == nil then return end
  local fw = h.facts.firewall or {}
  if not fw.backend then
    if ctx.options and ctx.options.update_firewall then
      h.log:warn("firewall rules are set but will not be applied here: %s", fw.backend_why or "unknown")
    end
    return
  end
  for _, r in ipairs(rules) do
    for _, p in ipairs(firewall.rule_problems(fw.backend, r, fw)) do M.add(problems, h, p) end
  end
  for _, p in ipairs(firewall.policy_problems(fw.backend, hc.policy, fw)) do M.add(problems, h, p) end
end

-- The node's address inside the engine's pod or service CIDR: node and pod traffic would
-- share addresses (and the firewall's sets refuse the overlap).
local function check_cidrs(ctx, problems, h)
  local addr = h.facts.private_address
  if not addr or not ctx.engine then return end
  for _, cidr in ipairs(ctx.engine:cluster_cidrs(ctx.distro and ctx.distro.engine)) do
    if network.in_cidr(addr, cidr) then
      M.add(problems, h, string.format("private address %s lies in the cluster's pod or service CIDR %s: pods,"
        .. " services and nodes need separate ranges (move the CIDR in the distro package's engine config)",
        addr, cidr))
    end
  end
end

local function median(xs)
  local s = table.move(xs, 1, #xs, 1, {})
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return (s[n // 2] + s[n // 2 + 1]) / 2
end

local function check_clocks(ctx, problems, hosts)
  local limit = tonumber(ctx.options and ctx.options.max_clock_skew) or M.DEFAULT_MAX_SKEW
  local offsets, timed = {}, {}
  for _, h in ipairs(hosts) do
    local c = h.facts.clock
    if c then
      offsets[#offsets + 1] = c.remote - c.local_mid
      timed[#timed + 1] = h
    end
  end
  if #offsets < 2 then return end
  local mid = median(offsets)
  for i, h in ipairs(timed) do
    local d = offsets[i] - mid
    if math.abs(d) > limit then
      M.add(problems, h, string.format("clock is %.1f s %s the median of the cluster's hosts (limit %g s):"
        .. " sync it (chrony/NTP), TLS and etcd need agreeing clocks", math.abs(d),
        d > 0 and "ahead of" or "behind", limit))
    end
  end
end

-- Everything that needs no round trip -> list of {host = Host, message}. Pure, for specs.
function M.problems(ctx, hosts)
  local problems = {}
  check_unique(problems, hosts, "node name", function(h) return h.facts.node_name end, tostring)
  check_unique(problems, hosts, "private address", function(h) return h.facts.private_address end,
    network.canonical)
  for _, h in ipairs(hosts) do
    check_arch(ctx, problems, h)
    check_firewall(ctx, problems, h)
    check_cidrs(ctx, problems, h)
    if h.facts.service_manager == nil and h.facts.os then
      h.log:warn("no service manager detected; engine services cannot be managed on this host")
    end
  end
  check_clocks(ctx, problems, hosts)
  return problems
end

return M
