-- cargoship.pipeline.context: the one table every phase of a run receives: cluster, hosts, options, shared state.
--
-- ctx = {
--   cluster   the normalized cluster (cargoship.config)
--   hosts     Host objects (cargoship.host) in config order; each with log = ctx.log:for_host(name)
--   options   the apply options (commands/apply.lua apply_options); concurrency defaults to 30
--   dry_run   true in a dry run (every Host refuses writes then)
--   log       the run's logger
--   transport nil until the connect phase creates it
--   state     a table the phases share (state.leader, ...)
--   run_id    a string naming this run (lock holder, temp file names)
--   distro    nil for now (the distro package is not loaded yet)
--   env       function(name) -> value: the environment the command runs in (os.getenv)
-- }
-- ctx:each(hosts, fn, opts), ctx:fail(host, msg), ctx:host_lost(host, msg), ctx:leader(): see below.
local host_mod = require "cargoship.host"
local pool = require "cargoship.pool"

local M = {}

M.DEFAULT_CONCURRENCY = 30

local Context = {}
Context.__index = Context

local function default_run_id(now)
  local util = require "cargoship.util"
  return string.format("%s-%d", os.date("!%Y%m%dT%H%M%SZ", math.floor(now())), util.getpid())
end

-- M.new{cluster =, options =, log =, dry_run =, run_id =, now =, env =, hosts =} -> ctx
-- `hosts` replaces the Host objects built from the cluster (specs hand in fakes).
function M.new(o)
  local options = {}
  for k, v in pairs(o.options or {}) do options[k] = v end
  options.concurrency = options.concurrency or M.DEFAULT_CONCURRENCY
  local dry_run = o.dry_run
  if dry_run == nil then dry_run = options.dry_run end
  local ctx = setmetatable({
    cluster = o.cluster,
    options = options,
    dry_run = dry_run and true or false,
    log = o.log,
    transport = nil,
    state = {},
    run_id = o.run_id or default_run_id(o.now or os.time),
    distro = nil,
    env = o.env or os.getenv,
    hosts = o.hosts,
    -- bookkeeping of the runner, not for phases
    _failures = nil,  -- failures ctx:fail recorded during the current phase
    _logged = setmetatable({}, { __mode = "k" }),
    _progress = nil,
  }, Context)
  if not ctx.hosts then
    ctx.hosts = {}
    for i, cfg in ipairs((o.cluster and o.cluster.hosts) or {}) do
      ctx.hosts[i] = host_mod.new { config = cfg, dry_run = ctx.dry_run }
    end
  end
  -- every child logger before the first line, so the host column never widens mid-run
  for _, h in ipairs(ctx.hosts) do
    if h.log == nil and ctx.log then h.log = ctx.log:for_host(h.name) end
  end
  return ctx
end

local function message(err)
  if type(err) == "table" and err.err then return tostring(err.err) end
  return tostring(err)
end

-- Logs msg on host's logger once: ctx:fail, ctx:each and the runner may all see one failure.
local function log_once(ctx, host, msg)
  local seen = ctx._logged[host]
  if not seen then
    seen = {}
    ctx._logged[host] = seen
  end
  if seen[msg] then return end
  seen[msg] = true
  local logger = host.log or ctx.log
  if logger then logger:error("%s", msg) end
end

-- For the runner: a host's failure reaches the log once, whoever reports it first.
function Context:_log_failure(host, msg)
  log_once(self, host, tostring(msg))
end

-- ctx:fail(host, msg) -> nil, msg. Fails host in the current phase without stopping the
-- others: the phase goes on, and the runner fails it when it returns.
function Context:fail(host, msg)
  msg = tostring(msg)
  local list = self._failures
  if list then list[#list + 1] = { host = host, err = msg } end
  log_once(self, host, msg)
  return nil, msg
end

-- ctx:host_lost(host, msg) -> nil, msg. The host's lock is lost (stolen, broken, or not
-- refreshed before its deadline): this run must stop working there. Called by the lock's
-- on_lost callback, from its heartbeat task. The host fails in the phase running now;
-- host.lock_lost keeps the message for the runner, which fails the host in the next phase
-- when the loss came between two.
function Context:host_lost(host, msg)
  msg = tostring(msg)
  host.lock_lost = msg
  if self._failures then return self:fail(host, msg) end
  log_once(self, host, msg)
  return nil, msg
end

-- ctx:each(hosts, fn, opts) -> true, values | nil, failures, values
-- fn(host) runs for every host, at most opts.concurrency (default ctx.options.concurrency)
-- at once. fn raising or returning nil, err is that host's failure; failures is a list of
-- {host = h, err = msg} in the order of `hosts`, each logged on its host. values[host] is
-- fn's first result. A cancelled run raises out of here; it is never a host's failure.
function Context:each(hosts, fn, opts)
  opts = opts or {}
  local limit = opts.concurrency or self.options.concurrency or M.DEFAULT_CONCURRENCY
  local progress = self._progress
  local done = 0
  if progress then progress(0, #hosts) end
  local results = pool.map(hosts, limit, function(h)
    local r = table.pack(fn(h))
    done = done + 1
    if progress then progress(done, #hosts) end
    return table.unpack(r, 1, r.n)
  end)
  local failures, values = {}, {}
  for i, r in ipairs(results) do
    local h = hosts[i]
    local err
    if not r.ok then
      if r.code == "cancelled" then error("cancelled", 0) end
      err = message(r.err)
    elseif r[1] == nil and r[2] ~= nil then
      err = message(r[2])
    else
      values[h] = r[1]
    end
    if err then
      failures[#failures + 1] = { host = h, err = err }
      log_once(self, h, err)
    end
  end
  if #failures > 0 then return nil, failures, values end
  return true, values
end

-- The host that leads the cluster: whatever a phase chose (state.leader), else the first
-- controller in config order.
function Context:leader()
  if self.state.leader then return self.state.leader end
  for _, h in ipairs(self.hosts) do
    if h.role == "controller" or (h.is_controller and h:is_controller()) then return h end
  end
  return nil
end

M.Context = Context
return M
