-- cargoship.pipeline.heap: where a run's Lua heap goes per host, phase by phase (CARGOSHIP_HEAP_PROFILE=1).
--
-- A measuring aid for bench/scale.sh (issue 24: peak RSS per connected host), not a feature:
-- with CARGOSHIP_HEAP_PROFILE set, the runner calls M.after_phase after every phase, which
-- collects fully and writes one line to stderr: the Lua heap, and the bytes only each host
-- holds (the mean over hosts) by the host's field, largest first. Sizes are estimates from
-- Lua 5.4's object layout (a string: 24 bytes + its length + 1; a table: 56 bytes + 16 per
-- array slot + 32 per hash slot; a closure: 32 + 8 per upvalue); what the C side holds
-- (sessions, channels, buffers) is not Lua heap and is not here. A value reachable from
-- the context without passing through a host is shared and counted for no host.
local loop = require "cargoship.loop"

local M = {}

M.out = io.stderr   -- where the lines go
M.enabled = os.getenv("CARGOSHIP_HEAP_PROFILE") ~= nil and os.getenv("CARGOSHIP_HEAP_PROFILE") ~= ""

local function slots(n)   -- Lua sizes a table's parts in powers of two
  local s = 1
  while s < n do s = s * 2 end
  return n == 0 and 0 or s
end

-- The bytes reachable from v not yet in seen (marks what it counts).
local function size(v, seen)
  local t = type(v)
  if t == "string" then
    if #v <= 40 or seen[v] then return 0 end   -- short strings are interned: shared
    seen[v] = true
    return 25 + #v
  elseif t == "table" then
    if seen[v] then return 0 end
    seen[v] = true
    local n, narr = 0, #v
    local total = 56 + 16 * slots(narr)
    for k, x in next, v do
      if not (math.type(k) == "integer" and k >= 1 and k <= narr) then n = n + 1 end
      total = total + size(k, seen) + size(x, seen)
    end
    return total + 32 * slots(n)
  elseif t == "function" then
    if seen[v] then return 0 end
    seen[v] = true
    local total, i = 32, 1
    while true do
      local name, x = debug.getupvalue(v, i)
      if not name then break end
      total = total + 8 + size(x, seen)
      i = i + 1
    end
    return total
  end
  return 0
end
M.size = size

local function kib(b) return string.format("%.1f", b / 1024) end

-- The largest the Lua heap was, garbage included, sampled every 5 ms by a task the runner
-- starts (M.sample) -> KiB since the last call
local peak = 0
function M.sample()
  return loop.spawn(function()
    while true do
      peak = math.max(peak, collectgarbage("count"))
      loop.sleep(0.005)
    end
  end)
end

-- The process's resident set now and its peak (/proc/self/status) -> "VmRSS KiB", "VmHWM KiB"
local function rss()
  local f = io.open("/proc/self/status")
  if not f then return "?", "?" end
  local text = f:read("a")
  f:close()
  return text:match("VmRSS:%s*(%d+)") or "?", text:match("VmHWM:%s*(%d+)") or "?"
end

-- One line on stderr: "heap after <phase>: RSS <KiB> KiB (peak <KiB>); Lua heap peak <KiB> KiB
-- (<KiB> per host), live <KiB> KiB; live per host <KiB>: field KiB, ..." (the Lua peak: the
-- sampler's, garbage included, since the last line; RSS: the process's, C side included)
-- extras: {name = root} held beside the context (the report, the plan): counted whole, after
-- the hosts, and divided among them
function M.after_phase(ctx, label, extras)
  local top = math.max(peak, collectgarbage("count"))
  peak = 0
  collectgarbage("collect")
  local total = collectgarbage("count") * 1024
  local hosts = ctx.hosts or {}
  local seen = {}
  for _, h in ipairs(hosts) do seen[h] = true end
  size(ctx, seen)   -- everything shared, hosts left out
  local fields, all = {}, 0
  for _, h in ipairs(hosts) do
    for k, x in pairs(h) do
      local b = size(x, seen)
      fields[k] = (fields[k] or 0) + b
      all = all + b
    end
  end
  for name, root in pairs(extras or {}) do
    local b = size(root, seen)
    fields["(" .. name .. ")"] = b
    all = all + b
  end
  local n = math.max(#hosts, 1)
  local order = {}
  for k in pairs(fields) do order[#order + 1] = k end
  table.sort(order, function(a, b) return fields[a] > fields[b] end)
  local parts = {}
  for i = 1, math.min(#order, 8) do
    if fields[order[i]] > 0 then parts[#parts + 1] = tostring(order[i]) .. " " .. kib(fields[order[i]] / n) end
  end
  local now, high = rss()
  M.out:write(string.format("heap after %s: RSS %s KiB (peak %s); Lua heap peak %s KiB (%s per host), live %s KiB;"
    .. " live per host %s KiB: %s\n", label, now, high, kib(top * 1024), kib(top * 1024 / n), kib(total), kib(all / n),
    table.concat(parts, ", ")))
end

return M
