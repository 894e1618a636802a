-- cargoship.pipeline.context: the one table every phase of a run receives: cluster, hosts, options, shared state.
--
-- ctx = {
--   cluster   the normalized cluster (cargoship.config)
--   hosts     Host objects (cargoship.host) in config order; each with log = ctx.log:for_host(name)
--   options   the apply options (commands/apply.lua apply_options); concurrency defaults to 30
--   dry_run   true in a dry run (every Host refuses writes then)
--   log       the run's logger
--   transport the run's transport, built by the command and given to every host; phases
--             never use it (host:connect does)
--   run_id    a string naming this run (lock holder, temp file names)
--   distro    the distro package (cargoship.package) or nil
--   env       function(name) -> value: the environment the command runs in (os.getenv)
--   -- what phases learn and hand on, declared here so none is a string key of a bag:
--   leader          the Host leading the cluster: the first controller until "Gathering facts
--                   about the distro installed" picks the one whose service runs
--   engine          the engine configurer of the run (distros.engine), from the package's
--                   type, else the leader's engine; nil when neither is known
--   engine_type     its type (one of distros.engine.TYPES), engine_running: some controller's service runs
--   nodes           the cluster's nodes as "Checking for nodes no longer in the config" listed them
--   join_secret     the join tokens "Configure engine" read from the leader or made
--                   (engine:new_secret's shape); the Initialize phases use them
--   locks           {[host name] = lock handle} this run holds (phase 7 takes, 30 releases)
--   lock_conflicts  messages naming the other holders a lock attempt met
--   validation      the problems "Validate hosts" found ({host =, message =})
--   local_target    the operator's machine (cargoship.local_target): a phase reads the
--                   operator's files there; ctx:apply runs a record marked on = "local" there
--   kubeconfig      what "Updating kubeconfig" rendered: {name, text (the cluster's own
--                   kubeconfig, a secret), path} (`cargoship kubeconfig -` prints text)
--   state           a table custom phases share among themselves; built-in phases use the fields
-- }
-- ctx:each(hosts, fn, opts), ctx:fail(host, msg), ctx:host_lost(host, msg), ctx:leave(host, why),
-- ctx:planned(host), ctx:apply(host, actions): see below.
-- Waiting and randomness are the context's, so no phase requires the runtime:
-- ctx:now(), ctx:sleep(s), ctx:wait_until(check, {timeout, interval}), ctx:random(n),
-- ctx:leader_listing(cmd, since) (one shared run of a listing on the leader for every
-- waiter) and ctx:leader_nodes() (the cluster's nodes, parsed from the leader's kubectl).
local cjson = require "cjson"
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"
local pool = require "cargoship.pool"

local M = {}

M.DEFAULT_CONCURRENCY = 30

local Context = {}
Context.__index = Context

local function default_run_id(now)
  local util = require "cargoship.util"
  return string.format("%s-%d", os.date("!%Y%m%dT%H%M%SZ", math.floor(now())), util.getpid())
end

-- M.new{cluster =, options =, log =, dry_run =, run_id =, now =, env =, hosts =, random =} -> ctx
-- `hosts` replaces the Host objects built from the cluster (specs hand in fakes); `random`
-- (function(n) -> n bytes) replaces the CSPRNG behind ctx:random (specs pin it).
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
    transport = o.transport,
    state = {},
    run_id = o.run_id or default_run_id(o.now or os.time),
    distro = o.distro,
    env = o.env or os.getenv,
    hosts = o.hosts,
    leader = nil,
    -- the engine is the package's, set once here; without a package distro_facts picks the
    -- leader's
    engine = o.distro and require("distros.engine").for_package(o.distro) or nil,
    engine_type = o.distro and o.distro.type or nil,
    engine_running = false,
    nodes = nil,
    join_secret = nil,
    locks = {},
    lock_conflicts = {},
    validation = nil,
    local_target = o.local_target or require("cargoship.local_target").new { dry_run = dry_run, log = o.log },
    kubeconfig = nil,
    -- bookkeeping of the runner, not for phases
    _failures = nil,  -- failures ctx:fail recorded during the current phase
    _lost = {},       -- [host] = message: hosts lost for the rest of the run (ctx:host_lost)
    _tasks = {},      -- [host] = {[task] = true}: ctx:each's tasks working on host right now
    _cleanup = false, -- true while the runner cleans up: a lost host's lock may still be released
    _planned = nil,   -- [host] = the action records the current phase assessed
    _outcomes = nil,  -- [host] = {[record] = outcome} of what ctx:apply executed
    _steps = nil,     -- the current phase's steps
    _logged = setmetatable({}, { __mode = "k" }),
    _progress = nil,
    _random = o.random,
    _listings = {},   -- [cmd] = {lock, at, out, err, code}: ctx:leader_listing's shared runs
  }, Context)
  if not ctx.hosts then
    ctx.hosts = {}
    for i, cfg in ipairs((o.cluster and o.cluster.hosts) or {}) do
      ctx.hosts[i] = host_mod.new { config = cfg, dry_run = ctx.dry_run, transport = ctx.transport }
    end
  end
  for _, h in ipairs(ctx.hosts) do
    if h.role == "controller" then
      ctx.leader = h
      break
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

-- ctx:each(hosts, fn, opts) -> true, values | nil, failures, values
-- fn(host) runs for every host, at most opts.concurrency (default ctx.options.concurrency)
-- at once. fn raising or returning nil, err is that host's failure; failures is a list of
-- {host = h, err = msg} in the order of `hosts`, each logged on its host. values[host] is
-- fn's first result. A cancelled run raises out of here; it is never a host's failure.
-- A host lost for the run (ctx:host_lost) fails with its loss: fn is not called for it
-- once it is lost, and its task is cancelled when it is lost while fn runs (the transport
-- ends the task's remote commands before the task ends), so nothing more is sent to it;
-- only the runner's cleanup (releasing locks) still reaches it.
function Context:each(hosts, fn, opts)
  opts = opts or {}
  local limit = opts.concurrency or self.options.concurrency or M.DEFAULT_CONCURRENCY
  local progress = self._progress
  local done = 0
  if progress then progress(0, #hosts) end
  local results = pool.map(hosts, limit, function(h)
    if self._lost[h] and not self._cleanup then return nil, self._lost[h] end
    local me = loop.current()
    local mine = self._tasks[h] or {}
    self._tasks[h] = mine
    mine[me] = true
    loop.defer(function() mine[me] = nil end)
    local r = table.pack(fn(h))
    done = done + 1
    if progress then progress(done, #hosts) end
    return table.unpack(r, 1, r.n)
  end)
  local caller = loop.current()
  local failures, values = {}, {}
  for i, r in ipairs(results) do
    local h = hosts[i]
    local lost = self._lost[h]
    local err
    if not r.ok then
      -- a task cancelled because its host was lost is that host's failure; any other
      -- cancellation is the run's
      if r.code == "cancelled" and not (lost and not caller:cancelled()) then error("cancelled", 0) end
      err = lost or message(r.err)
    elseif r[1] == nil and r[2] ~= nil then
      err = lost or message(r[2])
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

-- ctx:host_lost(host, msg): host is gone for the rest of the run (its lock was lost or
-- stolen, say): it fails in the phase running now, or in the next one when none runs, and
-- in every phase after. Its tasks in ctx:each are cancelled now (unless the runner is
-- cleaning up), so the run stops working there at once: the holder of a lost lock must not
-- go on. The lock's loss callback calls it; nothing else needs to know why.
function Context:host_lost(host, msg)
  msg = tostring(msg or (host.name .. ": lost"))
  if self._lost[host] then return end
  self._lost[host] = msg
  if self._failures then self:fail(host, msg) end
  if self._cleanup then return end
  local tasks = {}
  for t in pairs(self._tasks[host] or {}) do tasks[#tasks + 1] = t end
  for _, t in ipairs(tasks) do t:cancel() end
end

-- ctx:leave(host, why): in assess, says why the phase leaves host alone although it would
-- otherwise act there (a firewall front end installed but stopped, say). Not a failure and
-- not work: the host has nothing to do, and the report shows the sentence under it.
function Context:leave(host, why)
  self._left = self._left or {}
  self._left[host] = tostring(why)
  if host.log then host.log:info("left alone: %s", tostring(why)) end
end

-- ctx:predict(host, why): a failure a later phase would meet on host, found while it is
-- still cheap (a missing package dependency, a full disk, an unresolvable join address).
-- Not this phase's failure: the report lists it under the host ("would fail: ..."), the dry
-- run goes on (exit 3), and a real run refuses its plan (cargoship.cli.pipeline).
function Context:predict(host, why)
  self._predicted = self._predicted or {}
  local list = self._predicted[host] or {}
  self._predicted[host] = list
  list[#list + 1] = tostring(why)
  if host.log then host.log:warn("would fail: %s", tostring(why)) end
end

-- ctx:planned(host) -> the action records the running phase assessed on host ({} for none).
-- A phase's run executes them, in the order it chooses, with ctx:apply.
function Context:planned(host)
  return (self._planned and self._planned[host]) or {}
end

-- ctx:apply(host, actions) -> true | nil, err: executes actions (default: all of
-- ctx:planned(host)) through host:apply with the running phase's steps, and records each
-- record's outcome for the report. actions must be records of ctx:planned(host): the run
-- does what the plan said, nothing it did not. On a host lost for the run it fails at
-- once, sending nothing (outside the runner's cleanup).
function Context:apply(host, actions)
  if self._lost[host] and not self._cleanup then return nil, self._lost[host] end
  local planned = self:planned(host)
  actions = actions or planned
  local known = {}
  for _, a in ipairs(planned) do known[a] = true end
  for i, a in ipairs(actions) do
    if not known[a] then
      error(string.format("ctx:apply: action %d (%s) is not one this phase assessed on %s", i,
        type(a) == "table" and tostring(a.say) or type(a), host.name), 2)
    end
  end
  local outcomes, err = self:_execute(host, actions)
  if self._outcomes then
    local by = self._outcomes[host] or {}
    self._outcomes[host] = by
    for i, a in ipairs(actions) do by[a] = outcomes[i] end
  end
  if err then return nil, err end
  return true
end

-- Runs actions in order, each run of records marked on = "local" on the operator's machine
-- (ctx.local_target) and the others on host; the first failure stops the rest ("not_run").
function Context:_execute(host, actions)
  local outcomes, i = {}, 1
  while i <= #actions do
    local is_local = actions[i].on == "local"
    local j = i
    while j + 1 <= #actions and (actions[j + 1].on == "local") == is_local do j = j + 1 end
    local group = table.move(actions, i, j, 1, {})
    local got, err
    if is_local then got, err = self.local_target:apply(group)
    else got, err = host:apply(group, { ctx = self, steps = self._steps }) end
    for k = 1, #group do outcomes[i + k - 1] = got[k] end
    if err then
      for k = j + 1, #actions do outcomes[k] = { status = "not_run" } end
      return outcomes, err
    end
    i = j + 1
  end
  return outcomes
end

-- ctx:progress(done, n, detail): a phase's own progress (the upload phases' bytes): on a
-- terminal the phase's line reads "... done/n hosts, detail". Nothing elsewhere.
function Context:progress(done, n, detail)
  if self._progress then self._progress(done, n, detail) end
end

-- ---- waiting and randomness (phases never require the loop or the crypto module) ------

function Context.now() return loop.now() end

-- ctx:sleep(seconds): this task waits; raises "cancelled" when the run is cancelled.
function Context.sleep(_, seconds) loop.sleep(seconds) end

-- ctx:wait_until(check, {timeout, interval}) -> the values of check | nil, why, "timeout"
-- check() -> value.. when done | nil, why-not-yet; it runs at once and then every
-- `interval` seconds (default 1) until done or `timeout` seconds (default 300) have passed;
-- then why is check's last why-not-yet. check may raise.
-- ctx:runs(id) -> whether this pass walks the phase `id` (the runner sets ctx.phase_ids; a
-- context no runner drives, as the repl's, walks every phase).
function Context:runs(id)
  return self.phase_ids == nil or self.phase_ids[id] == true
end

function Context:wait_until(check, o)
  o = o or {}
  local limit, interval = o.timeout or 300, o.interval or 1
  local deadline = self:now() + limit
  while true do
    local r = table.pack(check())
    if r[1] ~= nil and r[1] ~= false then return table.unpack(r, 1, r.n) end
    if self:now() >= deadline then
      return nil, r[2] == nil and "no answer" or tostring(r[2]), "timeout"
    end
    self:sleep(interval)
  end
end

-- ctx:random(n) -> n random bytes (the CSPRNG, or the function M.new was given).
function Context:random(n)
  if self._random then return self._random(n) end
  return require("cargoship.crypto").random(n)
end

-- ctx:leader_listing(cmd, since) -> at, out, err, code: cmd's answer on the leader, run at
-- `at` (ctx:now()). Waiters share runs: a caller takes the listing's lock and reuses the
-- last answer if that run began after `since` (its own previous one, or when its wait
-- began), else runs cmd itself. With 49 workers waiting for Ready at once that is one
-- kubectl a round on the leader, not 49.
function Context:leader_listing(cmd, since)
  local p = self._listings[cmd]
  if not p then p = { lock = loop.semaphore(1), at = -math.huge }; self._listings[cmd] = p end
  p.lock:acquire()
  if p.at <= since then
    local started = self:now()
    local ok, out, err, code = pcall(self.leader.probe, self.leader, cmd, { timeout = 30 })
    if not ok then
      p.lock:release()
      error(out, 0)
    end
    p.at, p.out, p.err, p.code = started, out, err, code
  end
  p.lock:release()
  return p.at, p.out, p.err, p.code
end

M.CONTROLLER_ROLES = { "control-plane", "master", "etcd" }

-- `kubectl get nodes -o json` -> list of {name, addresses, role, ready = "True"|"False"|
-- "Unknown"|nil, heartbeat = the Ready condition's lastHeartbeatTime} | nil, why. Pure.
function M.parse_nodes(text)
  local ok, doc = pcall(cjson.decode, text or "")
  if not ok or type(doc) ~= "table" or type(doc.items) ~= "table" then
    return nil, "kubectl printed no node list"
  end
  local nodes = {}
  -- JSON null (cjson.null) and other non-objects read as empty: no field of kubectl's output is
  -- trusted (fuzz/kube found `items: [null]` and `status: 7` raising here)
  local function obj(v) return type(v) == "table" and v or {} end
  for _, item in ipairs(doc.items) do
    local md, st = obj(obj(item).metadata), obj(obj(item).status)
    local n = { name = md.name, addresses = {}, role = "worker" }
    for _, c in ipairs(type(st.conditions) == "table" and st.conditions or {}) do
      if type(c) == "table" and c.type == "Ready" then
        n.ready = c.status
        n.heartbeat = type(c.lastHeartbeatTime) == "string" and c.lastHeartbeatTime or nil
      end
    end
    for _, a in ipairs(type(st.addresses) == "table" and st.addresses or {}) do
      if type(a) == "table" and type(a.address) == "string" then n.addresses[#n.addresses + 1] = a.address end
    end
    local labels = type(md.labels) == "table" and md.labels or {}
    for _, r in ipairs(M.CONTROLLER_ROLES) do
      if labels["node-role.kubernetes.io/" .. r] ~= nil then n.role = "controller" end
    end
    if type(n.name) == "string" then nodes[#nodes + 1] = n end
  end
  return nodes
end

-- ctx:leader_nodes() -> nodes (M.parse_nodes) | nil, why: the cluster's nodes as the run's
-- engine lists them on the leader.
function Context:leader_nodes()
  local eng = self.engine
  if not (eng and self.leader) then return nil, "no engine or no leader known" end
  local _, out, err, code = self:leader_listing(eng:get_nodes(), self:now())
  if not out then return nil, tostring(err) end
  if code ~= 0 then return nil, string.format("kubectl exited %d: %s", code, (err or ""):match("[^\n]*")) end
  return M.parse_nodes(out)
end

M.Context = Context
return M
