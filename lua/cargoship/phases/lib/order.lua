-- phases.lib.order: the orders a phase works through its hosts in: leader first and serial, or per-profile batches.
--
-- M.leader_first(ctx, hosts) -> hosts with ctx.leader (when among them) first, the rest in order.
-- M.batches(ctx, hosts) -> {{host..}..}: one group per profile (hosts without one together),
--   each cut to the profile's concurrency (else -w, else -c: cluster-yaml.md §3.2); groups in order of first
--   appearance in the config.
-- M.run(ctx, hosts, how, fn) -> true | nil, err: fn(host) -> true | nil, err over hosts,
--   how = "serial": leader first, one host at a time, stopping at the first failure;
--   how = "batches": a batch at a time, the hosts of a batch at once (ctx:each), stopping
--   after a batch with a failure (err is then ctx:each's failure list).
local config = require "cargoship.config"

local M = {}

function M.leader_first(ctx, hosts)
  local list = {}
  for _, h in ipairs(hosts) do
    if h == ctx.leader then table.insert(list, 1, h) else list[#list + 1] = h end
  end
  return list
end

function M.batches(ctx, hosts)
  local groups, order = {}, {}
  for _, h in ipairs(hosts) do
    local p = h.config and h.config.profile or (h.config_declared and h.config_declared.profile) or ""
    if not groups[p] then groups[p] = {}; order[#order + 1] = p end
    table.insert(groups[p], h)
  end
  local out = {}
  for _, p in ipairs(order) do
    local g = groups[p]
    local prof = ctx.cluster and ctx.cluster.profiles and ctx.cluster.profiles[p]
    local size = config.resolve_concurrency(prof and prof.concurrency or { kind = "default" }, #g,
      ctx.options and (ctx.options.work_concurrency or ctx.options.concurrency)) or #g
    for i = 1, #g, size do
      local b = {}
      for j = i, math.min(i + size - 1, #g) do b[#b + 1] = g[j] end
      out[#out + 1] = b
    end
  end
  return out
end

function M.run(ctx, hosts, how, fn)
  if how == "serial" then
    for _, h in ipairs(M.leader_first(ctx, hosts)) do
      local ok, err = fn(h)
      if not ok then return nil, err end
    end
    return true
  end
  if how ~= "batches" then error("order.run: how is \"serial\" or \"batches\", not " .. tostring(how), 2) end
  for _, batch in ipairs(M.batches(ctx, hosts)) do
    local ok, failures = ctx:each(batch, fn)
    if not ok then return nil, failures end
  end
  return true
end

return M
