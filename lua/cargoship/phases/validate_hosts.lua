-- Phase "Validate hosts": the preflight; sudo, unique names and addresses, architecture, firewall rules, clock skew.
--
-- Every problem on every host is collected and reported together, each naming its host,
-- so one run shows the whole list. Checks:
--   sudo      the login user (when not root) runs `sudo -n` without a password;
--   names     node names (config hostname, else the machine's) unique, case-insensitively;
--   addresses private addresses unique;
--   arch      the host's architecture is one the distro package carries (without a
--             package: one the engines ship, amd64/arm64/riscv64);
--   firewall  rules and legacy policies can be expressed by the front end the host would
--             use (os.firewall.rule_problems): firewalld needs 0.9+ for forward/out rules and
--             policies and zone names in forward rules; ufw has no sctp/dccp; ufw/nftables
--             forward rules name interfaces; host.policy is firewalld-only. A host with no
--             usable front end is only warned about (the firewall phase leaves it alone);
--   clock     each host within max_clock_skew (default 30 s) of the median host clock.
-- And what a later phase would fail on (issue 23), from host.facts.predict (gathered with the
-- facts) and one probe of the join address per host whose engine this run starts, batched
-- with the sudo check: a dry run reports each as foretold (ctx:predict: "would fail", exit
-- 3, and a real run refuses the plan); a real run's own pass fails the host on it.
local firewall = require "cargoship.os.firewall"
local predict = require "cargoship.phases.lib.predict"
local network = require "cargoship.os.network"

local M = {
  id = "validate_hosts",
  title = "Validate hosts",
  dry_run = "read_only",
  reads = { "connection", "os", "facts" },
  creates = {},
}

M.ENGINE_ARCHES = { "amd64", "arm64", "riscv64" }
M.DEFAULT_MAX_SKEW = 30

function M.prepare(ctx)
  return ctx.hosts
end

local function add(list, host, msg)
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
        add(problems, h, string.format("%s %s is also %s's; each host needs its own", what, v, first[k].name))
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
  add(problems, h, string.format("architecture %s (uname -m %s) is not one %s (%s)", arch,
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
    for _, p in ipairs(firewall.rule_problems(fw.backend, r, fw)) do add(problems, h, p) end
  end
  for _, p in ipairs(firewall.policy_problems(fw.backend, hc.policy, fw)) do add(problems, h, p) end
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
      add(problems, h, string.format("clock is %.1f s %s the median of the cluster's hosts (limit %g s):"
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
    if h.facts.service_manager == nil and h.facts.os then
      h.log:warn("no service manager detected; engine services cannot be managed on this host")
    end
  end
  check_clocks(ctx, problems, hosts)
  return problems
end

function M.run(ctx, hosts)
  -- sudo and the join address in one round trip per host (none for a root login with nothing to join)
  local sudo, joins, targets = predict.probe_hosts(ctx, hosts)
  local problems = {}
  for _, h in ipairs(hosts) do
    if sudo[h] then add(problems, h, sudo[h]) end
  end
  for _, p in ipairs(M.problems(ctx, hosts)) do problems[#problems + 1] = p end
  for _, h in ipairs(hosts) do
    for _, why in ipairs(predict.foretold(h, joins[h], targets[h])) do
      if ctx.dry_run then ctx:predict(h, why) else add(problems, h, why) end
    end
  end
  ctx.validation = problems
  if #problems > 0 then
    -- one failure per problem, on its host: the runner logs them and lists them under the hosts
    local failures = {}
    for i, p in ipairs(problems) do failures[i] = { host = p.host, err = p.message } end
    return nil, failures
  end
  ctx.log:info("%d host%s validated", #hosts, #hosts == 1 and "" or "s")
  return true
end

return M
