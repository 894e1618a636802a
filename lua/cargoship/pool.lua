-- cargoship.pool: run a function over items with at most N in flight; per-item results and errors.
local loop = require "cargoship.loop"

local M = {}

-- M.map(items, limit, fn) -> results
-- fn(item, index) runs in its own task. results[i] is
--   { ok = true, n = k, ... }          the values fn returned (results[i][1..n])
--   { ok = false, err = e, code = c }  fn raised (code "error") or was cancelled ("cancelled")
-- limit <= 0 or nil means no limit. If the calling task is cancelled, no further item
-- starts, the items in flight are cancelled (their destructors run), and the
-- cancellation propagates to the caller.
function M.map(items, limit, fn)
  local n = #items
  if not limit or limit <= 0 or limit > n then limit = math.max(n, 1) end
  local sem = loop.semaphore(limit)
  local tasks = {}
  -- on any exit, normal or not, nothing may outlive the pool
  local guard <close> = setmetatable({}, { __close = function()
    for _, t in pairs(tasks) do t:cancel() end
  end })
  for i = 1, n do
    sem:acquire()
    tasks[i] = loop.spawn(function()
      loop.defer(function() sem:release() end)
      return fn(items[i], i)
    end)
  end
  local results = {}
  for i = 1, n do
    local r = table.pack(tasks[i]:join())
    if r[1] then
      results[i] = table.pack(table.unpack(r, 2, r.n))
      results[i].ok = true
    else
      results[i] = { ok = false, err = r[2], code = r[3] }
    end
  end
  tasks = {}
  local _ = guard
  return results
end

-- M.each(items, limit, fn): like map, but raises the first error (by item order) after all
-- items have ended; for callers that want all-or-nothing.
function M.each(items, limit, fn)
  local results = M.map(items, limit, fn)
  for i, r in ipairs(results) do
    if not r.ok then error(string.format("item %d: %s", i, tostring(r.err)), 0) end
  end
  return results
end

return M
