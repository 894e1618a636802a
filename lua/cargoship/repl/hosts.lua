-- cargoship.repl.hosts: the hosts as the repl shows them: one host, a group fanning out concurrently, results.
--
-- A repl host wraps a Host object (cargoship.host): fields name, role, index, address,
-- facts, config, os; :run and :probe print what the command prints and return stdout,
-- stderr, exit code; the other Host methods pass through. Every write still goes through
-- the Host, which refuses it while its dry_run flag is up (the repl's read-only mode).
local lines = require "cargoship.lines"
local pool = require "cargoship.pool"

local M = {}

-- repl host -> its Host; kept out of the table so no completion or print shows the gate's
-- other side (the raw connection).
local real = setmetatable({}, { __mode = "k" })

local ReplHost = {}
ReplHost.__index = ReplHost
ReplHost.__name = "cargoship.repl.host"

function ReplHost.__tostring(h)
  return string.format("<host %s%s%s>", h.name, h.role and (" " .. h.role) or "",
    h.address and (" " .. h.address) or "")
end

local function host_of(self, method)
  local h = real[self]
  if not h then error("call it on a host: host:" .. method .. "(...)", 3) end
  return h
end

-- Runs cmd through the Host's `method` with its output printed as it comes.
local function exec(self, method, cmd, opts, prefix)
  local h = host_of(self, method)
  if type(cmd) ~= "string" then error("host:" .. method .. ": expected a command string, got " .. type(cmd), 3) end
  local io_ = M.io[self]
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  local out, err = lines.writer(io_.stdout, prefix or ""), lines.writer(io_.stderr, prefix or "")
  -- what streams to a callback is not returned as well: keep our own copy
  local got_out, got_err = {}, {}
  o.on_stdout = function(chunk) got_out[#got_out + 1] = chunk; out.feed(chunk) end
  o.on_stderr = function(chunk) got_err[#got_err + 1] = chunk; err.feed(chunk) end
  local stdout, stderr, code = h[method](h, cmd, o)
  if stdout == nil then
    out.flush()
    err.flush()
    error(stderr, 0)
  end
  -- a connection that answers at once, without streaming, is printed all the same
  if #got_out == 0 and stdout ~= "" then got_out[1] = stdout; out.feed(stdout) end
  if #got_err == 0 and stderr ~= "" then got_err[1] = stderr; err.feed(stderr) end
  out.flush()
  err.flush()
  return table.concat(got_out), table.concat(got_err), code
end

-- host:run(cmd, opts) -> stdout, stderr, code. A write: refused in read-only mode.
function ReplHost:run(cmd, opts) return exec(self, "run", cmd, opts) end
-- host:probe(cmd, opts) -> stdout, stderr, code. A read: allowed in read-only mode.
function ReplHost:probe(cmd, opts) return exec(self, "probe", cmd, opts) end

for _, name in ipairs { "probes", "read_file", "exists", "check", "write_file", "upload", "remove", "download" } do
  ReplHost[name] = function(self, ...)
    local h = host_of(self, name)
    return h[name](h, ...)
  end
end

function ReplHost:is_controller() return self.role == "controller" end

-- io: which streams a host's output goes to ({stdout =, stderr =}), per repl host.
M.io = setmetatable({}, { __mode = "k" })

-- M.wrap(host, {stdout =, stderr =}) -> repl host
function M.wrap(host, streams)
  local c = host.config and host.config.connection or {}
  local h = setmetatable({
    name = host.name, role = host.role, index = host.index, address = c.address,
    facts = host.facts, config = host.config, os = host.os,
  }, ReplHost)
  real[h] = host
  M.io[h] = streams
  return h
end

function M.unwrap(h) return real[h] end

-- ---- results of a fan-out ------------------------------------------------------------------

local Results = {}
Results.__name = "cargoship.repl.results"

-- "3 hosts: 2 exit 0, 1 exit 1; 1 failed" -- the return value shows as this line.
function Results.__tostring(r)
  local codes, failed, n = {}, 0, 0
  for _, v in pairs(r) do
    n = n + 1
    if v.error then failed = failed + 1 else codes[v.code] = (codes[v.code] or 0) + 1 end
  end
  local parts = {}
  local list = {}
  for code in pairs(codes) do list[#list + 1] = code end
  table.sort(list)
  for _, code in ipairs(list) do parts[#parts + 1] = string.format("%d exit %d", codes[code], code) end
  if failed > 0 then parts[#parts + 1] = string.format("%d failed", failed) end
  return string.format("<%d host%s: %s>", n, n == 1 and "" or "s", table.concat(parts, ", "))
end

-- ---- a group of hosts ----------------------------------------------------------------------

local Group = {}
Group.__index = Group
Group.__name = "cargoship.repl.group"

function Group.__tostring(g)
  local names = {}
  for i, h in ipairs(g.hosts) do names[i] = h.name end
  return string.format("<%d host%s: %s>", #names, #names == 1 and "" or "s", table.concat(names, ", "))
end

function Group.__len(g) return #g.hosts end

-- M.group(repl hosts, concurrency) -> group
function M.group(hosts, concurrency)
  return setmetatable({ hosts = hosts, concurrency = concurrency or 30 }, Group)
end

local function fan_out(g, method, cmd, opts)
  local width = 0
  for _, h in ipairs(g.hosts) do width = math.max(width, #h.name) end
  local results = pool.map(g.hosts, g.concurrency, function(h)
    return table.pack(exec(h, method, cmd, opts, lines.prefix(h.name, width)))
  end)
  local out = setmetatable({}, Results)
  for i, r in ipairs(results) do
    local h = g.hosts[i]
    if r.ok then
      local v = r[1]
      out[h.name] = { stdout = v[1], stderr = v[2], code = v[3] }
    else
      if r.code == "cancelled" then error("cancelled", 0) end
      local msg = tostring(r.err)
      out[h.name] = { error = msg }
      M.io[h].stderr:write(lines.prefix(h.name, width) .. "error: " .. msg .. "\n")
    end
  end
  return out
end

-- group:run(cmd, opts) -> results by host name ({stdout, stderr, code} or {error}); a write.
function Group:run(cmd, opts) return fan_out(self, "run", cmd, opts) end
-- group:probe(cmd, opts) -> the same, as a read.
function Group:probe(cmd, opts) return fan_out(self, "probe", cmd, opts) end

-- group:each(fn) -> {name = fn(host) first value | {error = msg}}, fn on every host at once.
function Group:each(fn)
  local results = pool.map(self.hosts, self.concurrency, function(h) return fn(h) end)
  local out = {}
  for i, r in ipairs(results) do
    if not r.ok and r.code == "cancelled" then error("cancelled", 0) end
    out[self.hosts[i].name] = r.ok and r[1] or { error = tostring(r.err) }
  end
  return out
end

function Group:names()
  local names = {}
  for i, h in ipairs(self.hosts) do names[i] = h.name end
  return names
end

M.ReplHost, M.Group, M.Results = ReplHost, Group, Results
return M
