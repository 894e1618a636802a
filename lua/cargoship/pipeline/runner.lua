-- cargoship.pipeline.runner: walks a pipeline's phases over the hosts, for real or as a dry run, and reports.
--
-- Real run, per phase: prepare, assess every prepared host (concurrently): the action
-- records it returns are the plan of that host, made on the live host once earlier phases
-- (the lock among them) are done. Then the records are executed, exactly those: by the
-- runner through host:apply, hosts concurrently, for a phase without run; by the phase's
-- run (ctx:apply) for one that orders hosts itself. A read-only phase without assess runs
-- on every prepared host. Each record's outcome lands beside it in the report. A host failing
-- fails the phase: the phases whose run started are cleaned up in reverse order, the rest
-- are skipped. Dry run: pipeline/policy.lua says which phases run (with writes refused by
-- the hosts), which run their own dry-run path, which are only assessed and reported, and
-- on which hosts a phase is unassessed. Loading a pipeline is pipeline/load.lua's.
--
-- What a failure stops (docs/dry-run.md, "When a host fails"): in a real run, the run, after
-- the phase, since a later phase may need the whole cluster (a leader, a quorum, every node
-- in the config) and the contract does not say which ones do. In a dry run, only the host:
-- nothing is changed, so the other hosts go through every phase and the report is whole;
-- the failed host is taken out of every later phase (reported there as not reached) and the
-- dry run fails. A failure of a phase as a whole (no host named), or every host failed,
-- stops a dry run too.
--
-- The phases run in a task of their own, and cleanup runs in that task's destructor: a
-- cancelled task cannot wait, a destructor can, and cleanup (releasing locks) must reach
-- the hosts however the run ends. This file and the context's ctx:each (per-host tasks,
-- cancelled when a host is lost) are the only ones of the pipeline that touch the loop.
local action = require "cargoship.action"
local loop = require "cargoship.loop"
local contract = require "cargoship.pipeline.contract"
local heap = require "cargoship.pipeline.heap"
local prefetch = require "cargoship.facts.prefetch"
local load = require "cargoship.pipeline.load"
local policy = require "cargoship.pipeline.policy"
local report_mod = require "cargoship.pipeline.report"

local M = {}

-- Loading lives in pipeline/load.lua and the dry-run rules in pipeline/policy.lua; these
-- names stay here for the callers that know the runner as the pipeline's front door.
M.numbers, M.without, M.load, M.skipped_of = load.numbers, load.without, load.load, load.skipped_of

-- ---- small helpers ------------------------------------------------------------------------

local function message_of(e)
  if type(e) == "table" and e.err then return tostring(e.err) end
  return tostring(e)
end

-- "<host>: dry run: refused to ..." -> "dry run: refused to ...": the report names the host.
local function strip_host(name, msg)
  if msg:sub(1, #name + 2) == name .. ": " then return msg:sub(#name + 3) end
  return msg
end

-- Actions as the runner keeps them: action records. A sentence (the old contract, a string
-- or {action = "sentence"}) becomes a record of kind "note". nil or {} means nothing to do.
local function normalize_actions(list)
  if list == nil then return {} end
  if type(list) ~= "table" then
    error("assess must return a list of action records or nothing, not a " .. type(list), 0)
  end
  local out = {}
  for i, a in ipairs(list) do
    if type(a) == "string" then out[#out + 1] = action.note { say = a }
    elseif type(a) == "table" and a.kind == nil and type(a.action) == "string" then
      out[#out + 1] = action.note { say = a.action }
    elseif type(a) == "table" and action.KINDS[a.kind] then
      local ok, err = pcall(action.check, a)
      if not ok then error(string.format("action %d: %s", i, tostring(err)), 0) end
      out[#out + 1] = a
    else
      error(string.format("action %d must be a record made by cargoship.action (or a sentence), not %s", i,
        type(a) == "table" and ("a table of kind " .. tostring(a.kind)) or ("a " .. type(a))), 0)
    end
  end
  return out
end

-- ---- one phase ------------------------------------------------------------------------------

local Run = {}
Run.__index = Run

function Run:entry_for(entry, h)
  local e = entry.by_host[h]
  if not e then
    e = { host = h.name, actions = {}, _pos = self.position[h] or math.huge, _host = h }
    entry.by_host[h] = e
    entry.hosts[#entry.hosts + 1] = e
  end
  return e
end

function Run:host_failure(entry, h, msg)
  local e = self:entry_for(entry, h)
  msg = message_of(msg)
  if self.ctx._log_failure then self.ctx:_log_failure(h, msg) end
  msg = strip_host(h.name or "", msg)
  if e.error == nil then e.error = msg
  elseif not e.error:find(msg, 1, true) then e.error = e.error .. "; " .. msg end
  entry.failed = true
end

-- err from run or dry_run: the failure list ctx:each returns, or one message.
function Run:phase_failure(entry, err)
  if type(err) == "table" and err.err == nil and getmetatable(err) == nil then
    for _, f in ipairs(err) do
      if type(f) == "table" and type(f.host) == "table" then self:host_failure(entry, f.host, f.err)
      else self:phase_error(entry, message_of(f)) end
    end
    if #err == 0 then self:phase_error(entry, "failed, naming no host and no reason") end
  else
    self:phase_error(entry, message_of(err))
  end
end

function Run:phase_error(entry, msg)
  entry.error = entry.error and (entry.error .. "; " .. msg) or msg
  entry.failed = true
  if self.ctx.log then self.ctx.log:error("%s: %s", entry.title, msg) end
end

function Run:prepare(phase)
  if not phase.prepare then return self.ctx.hosts end
  local hosts, err = phase.prepare(self.ctx)
  if hosts == nil and err ~= nil then error(message_of(err), 0) end
  if type(hosts) ~= "table" then
    error("prepare must return a list of hosts (an empty list when none), not " .. type(hosts), 0)
  end
  for i, h in ipairs(hosts) do
    if type(h) ~= "table" or self.position[h] == nil then
      error(string.format("prepare returned something that is not one of ctx.hosts at %d", i), 0)
    end
  end
  return hosts
end

-- Assesses hosts concurrently; -> the hosts with work (actions recorded on their entries).
function Run:assess(phase, entry, hosts)
  local ctx = self.ctx
  ctx._left = {}
  local ok, a, b = ctx:each(hosts, function(h)
    return normalize_actions(phase.assess(ctx, h))
  end)
  for h, why in pairs(ctx._left) do self:entry_for(entry, h).left_alone = why end
  ctx._left = nil
  local values = a
  if not ok then
    values = b
    for _, f in ipairs(a) do self:host_failure(entry, f.host, f.err) end
  end
  local work = {}
  for _, h in ipairs(hosts) do
    local e = self:entry_for(entry, h)
    local actions = values and values[h]
    if actions and #actions > 0 then
      e.actions = actions
      work[#work + 1] = h
    end
  end
  return work
end

-- Each assessed record's outcome, for the report: what ctx:apply recorded; a note (a
-- sentence of the old contract, done by the phase's own run) follows its host; a record the
-- run never executed is "not_run".
function Run:collect_outcomes(entry, work)
  local ctx = self.ctx
  for _, h in ipairs(work) do
    local e = self:entry_for(entry, h)
    local by = ctx._outcomes[h] or {}
    local failed = e.error ~= nil or (ctx._lost[h] ~= nil)
    for _, f in ipairs(ctx._failures or {}) do
      if f.host == h then failed = true end
    end
    e.outcomes = {}
    for i, a in ipairs(e.actions) do
      local o = by[a]
      if not o and a.kind == "note" then o = { status = failed and "failed" or "done" } end
      e.outcomes[i] = o or { status = "not_run" }
    end
  end
end

local function plan_has(plan, name)
  for _, h in ipairs(plan.hosts) do
    if h.host == name then return true end
  end
  return false
end

-- A real run's fresh assessment against the plan the operator was shown: where the hosts
-- moved in between, the run does what it found now, and says so in the log.
function Run:note_drift(entry, hosts)
  local plan = self.plan and self.plan.phases and self.plan.phases[entry.index]
  if not plan or plan.id ~= entry.id or not self.ctx.log then return end
  local shown = {}
  for _, h in ipairs(plan.hosts) do
    local says = {}
    for i, a in ipairs(h.actions or {}) do says[i] = type(a) == "table" and a.say or tostring(a) end
    -- a host the plan could not assess has nothing to have moved from
    shown[h.host] = not h.reason and table.concat(says, "; ") or nil
  end
  for _, h in ipairs(hosts) do
    local e = entry.by_host[h]
    local says = {}
    for i, a in ipairs(e and e.actions or {}) do says[i] = a.say end
    local now = table.concat(says, "; ")
    local before = shown[h.name]
    if before == nil and not plan_has(plan, h.name) then before = "" end
    if before ~= nil and before ~= now and not (e and e.error) then
      self.ctx.log:warn("%s: %s moved since the plan: planned [%s], assessed now [%s]; doing what was assessed now",
        entry.title, h.name, before, now)
    end
  end
end

-- The phase does its work (real run, or read_only in a dry run).
function Run:run_phase(phase, entry, hosts)
  local ctx = self.ctx
  local work = hosts
  if phase.assess then
    work = self:assess(phase, entry, hosts)
    if not ctx.dry_run then self:note_drift(entry, hosts) end
    -- a dry run goes on with the hosts that were assessed (the failed have no work)
    if entry.failed and not ctx.dry_run then return end
    if #work == 0 then
      entry.verdict = "nothing_to_do"
      return
    end
  end
  self.started[#self.started + 1] = { phase = phase, entry = entry }
  ctx._planned, ctx._outcomes, ctx._steps = {}, {}, phase.steps
  for _, h in ipairs(work) do ctx._planned[h] = self:entry_for(entry, h).actions end
  local r, err
  if phase.run then
    r, err = phase.run(ctx, work)
  else
    local ok, failures = ctx:each(work, function(h) return ctx:apply(h) end)
    if not ok then r, err = nil, failures end
  end
  if r == nil and err ~= nil then self:phase_failure(entry, err) end
  if phase.assess and not ctx.dry_run then self:collect_outcomes(entry, work) end
  -- a phase may sum up what it found ("all 5 nodes are in the config") for the report
  if type(r) == "table" and type(r.summary) == "string" then entry.summary = r.summary end
  entry.verdict = "ran"
end

function Run:own_dry_run(phase, entry, hosts)
  self.started[#self.started + 1] = { phase = phase, entry = entry }
  local results, err = phase.dry_run(self.ctx, hosts)
  if results == nil and err ~= nil then
    self:phase_failure(entry, err)
    return
  end
  if type(results) ~= "table" then error("dry_run must return a list of {host =, actions =}", 0) end
  local by_name = {}
  for _, h in ipairs(self.ctx.hosts) do by_name[h.name] = h end
  for i, r in ipairs(results) do
    local h = type(r) == "table" and r.host
    if type(h) == "string" then h = by_name[h] end
    if type(h) ~= "table" or not self.position[h] then
      error(string.format("dry_run result %d names no host of this run", i), 0)
    end
    local e = self:entry_for(entry, h)
    local actions = normalize_actions(r.actions)
    for _, a in ipairs(actions) do e.actions[#e.actions + 1] = a end
  end
  entry.verdict = "own"
end

function Run:report_only(phase, entry, hosts)
  local work = self:assess(phase, entry, hosts)
  if entry.failed then return end
  entry.verdict = policy.report_verdict(#work, next(entry.unassessed) ~= nil)
end

-- In a dry run: the hosts the phase cannot be assessed on get their reason (policy.lua).
function Run:split_unassessed(phase, entry, hosts)
  local rest = {}
  for _, h in ipairs(hosts) do
    local reason = self.pending:reason(phase, h)
    if reason then
      self:entry_for(entry, h).reason = reason
      entry.unassessed[h] = true
    else
      rest[#rest + 1] = h
    end
  end
  return rest
end

local function counters(hosts)
  local snap = {}
  for _, h in ipairs(hosts) do
    snap[h] = { probes = h.probes_sent or 0, writes = h.writes_sent or 0, refused = #(h.refused or {}),
      round_trips = h.round_trips and h:round_trips() or 0 }
  end
  return snap
end

-- Round trips per host, and the writes a dry run refused even if the phase swallowed the error.
function Run:account(entry, before)
  local probes, writes, trips = 0, 0, 0
  for _, h in ipairs(self.ctx.hosts) do
    local b = before[h]
    local dp, dw = (h.probes_sent or 0) - b.probes, (h.writes_sent or 0) - b.writes
    local dr = (h.round_trips and h:round_trips() or 0) - b.round_trips
    probes, writes, trips = probes + dp, writes + dw, trips + dr
    local e = entry.by_host[h]
    if not e and (dp > 0 or dw > 0 or dr > 0) then e = self:entry_for(entry, h) end
    if e then e.probes, e.writes, e.round_trips = dp, dw, dr end
    if self.ctx.dry_run then
      for i = b.refused + 1, #(h.refused or {}) do
        local msg = "dry run: refused to " .. h.refused[i]
        -- already failed with this refusal (ctx:each saw it raise): say it once
        if not (e and e.error and e.error:find(msg, 1, true)) then self:host_failure(entry, h, msg) end
      end
    end
  end
  entry.probes, entry.writes, entry.round_trips = probes, writes, trips
  if self.ctx.log and trips > 0 then
    self.ctx.log:debug("phase %s %s: %d round trip(s) to %d host(s)", tostring(entry.number), entry.id, trips,
      #self.ctx.hosts)
  end
end

-- In a dry run, hosts that failed in an earlier phase are out of this one: each gets an
-- entry saying why it was not reached, and is not handed to the phase. -> the rest
function Run:without_out(entry, hosts)
  local rest = {}
  for _, h in ipairs(hosts) do
    local why = self.out[h]
    if why then
      self:entry_for(entry, h).not_reached = why
    else
      rest[#rest + 1] = h
    end
  end
  return rest
end

-- A dry run after a failed phase: its failed hosts are out of the later phases; -> whether
-- the dry run goes on (some host is left, and the failure named hosts, not the phase).
function Run:take_out(entry)
  if entry.error then return false end
  for _, e in ipairs(entry.hosts) do
    if e.error and not self.out[e._host] then
      self.out[e._host] = string.format("failed in phase %s (%s)", tostring(entry.number), entry.title)
    end
  end
  for _, h in ipairs(self.ctx.hosts) do
    if not self.out[h] then return true end
  end
  return false
end

-- -> whether the run goes on after this phase
function Run:phase(i, phase)
  local ctx = self.ctx
  local entry = self.report.phases[i]
  entry.by_host, entry.unassessed = {}, {}
  local total = #self.phases
  self.progress:start(i, total, entry.title)
  if ctx.log then ctx.log:debug("phase %d/%d %s: start (%s)", i, total, entry.id, entry.dry_run_policy) end
  local t0 = loop.now()
  local before = counters(ctx.hosts)
  ctx._failures = {}
  ctx._progress = function(done, n, detail) self.progress:hosts(done, n, detail) end
  local trace
  local ok, err = xpcall(function()
    local hosts = self:prepare(phase)
    local prepared = #hosts
    hosts = self:without_out(entry, hosts)
    for _, h in ipairs(hosts) do self:entry_for(entry, h) end
    -- every host it concerns failed earlier: not reached, like a phase after a real run's failure
    if prepared > 0 and #hosts == 0 then return end
    if ctx.dry_run then
      hosts = self:split_unassessed(phase, entry, hosts)
    end
    -- the reads of this phase and those ahead, in one round trip per host (facts/prefetch.lua)
    prefetch.before_phase(ctx, self.phases, i, hosts)
    local mode = policy.mode(ctx.dry_run, phase)
    if mode == "run" then self:run_phase(phase, entry, hosts)
    elseif mode == "own" then self:own_dry_run(phase, entry, hosts)
    else self:report_only(phase, entry, hosts) end
  end, function(e)
    trace = debug.traceback(message_of(e), 2)
    return e
  end)
  ctx._progress = nil
  local cancelled = self.task:cancelled()
  if not ok and not cancelled then
    if ctx.log and trace then ctx.log:debug("%s", trace) end
    self:phase_failure(entry, err)
  end
  -- a host lost for the run (ctx:host_lost: its lock was lost or stolen, between phases
  -- too) fails the phase running then (a real run stops there; a dry run takes it out)
  local failing = {}
  for _, f in ipairs(ctx._failures) do failing[f.host] = true end
  for _, h in ipairs(ctx.hosts or {}) do
    if ctx._lost[h] and not failing[h] and not self.out[h] then
      ctx._failures[#ctx._failures + 1] = { host = h, err = ctx._lost[h] }
    end
  end
  for _, f in ipairs(ctx._failures) do
    if not self.out[f.host] then self:host_failure(entry, f.host, f.err) end
  end
  ctx._failures, ctx._planned, ctx._outcomes, ctx._steps = nil, nil, nil, nil
  for h, list in pairs(ctx._predicted or {}) do self:entry_for(entry, h).predicted = list end
  ctx._predicted = nil
  self:account(entry, before)
  entry.elapsed = loop.now() - t0
  if cancelled then
    entry.verdict = "interrupted"
    if self.timed_out then
      entry.verdict = "failed"
      entry.error = self.timed_out
      if ctx.log then ctx.log:error("%s: %s", entry.title, self.timed_out) end
    end
  elseif entry.failed then
    entry.verdict = "failed"
  end
  -- a failed phase's healthy hosts were assessed too: what they would create is pending
  if ctx.dry_run and not cancelled then self.pending:note(phase, entry.title, entry.hosts) end
  report_mod.sort_hosts(entry)
  if heap.enabled then heap.after_phase(ctx, entry.id, { report = self.report, plan = self.plan }) end
  self.progress:finish(i, total, entry.title, report_mod.summary(entry))
  if entry.verdict == "interrupted" or cancelled then return false end
  if entry.verdict == "failed" then
    self.failed = true
    return ctx.dry_run and self:take_out(entry)
  end
  return true
end

-- Runs in the destructor of the phases' task, where waiting still works after a cancel.
function Run:cleanup()
  local ctx = self.ctx
  -- a lost host's lock may still be ours (its host went silent): the release is still sent
  ctx._cleanup = true
  for i = #self.started, 1, -1 do
    local s = self.started[i]
    if s.phase.cleanup then
      local rec = { index = s.entry.index, id = s.entry.id, title = s.entry.title, ok = true }
      if ctx.log then ctx.log:verbose("cleaning up after %s", s.entry.title) end
      local ok, err = pcall(s.phase.cleanup, ctx)
      if not ok then
        rec.ok, rec.error = false, message_of(err)
        if ctx.log then ctx.log:error("cleanup of %s failed: %s", s.entry.title, rec.error) end
      end
      -- a cleanup that found nothing to do (it says "skipped") is no line of the report
      if not (ok and err == "skipped") then self.report.cleanup[#self.report.cleanup + 1] = rec end
    end
  end
end

function Run:body()
  for i, phase in ipairs(self.phases) do
    if not self:phase(i, phase) then return end
  end
  self.completed = true
end

-- ---- the run ----------------------------------------------------------------------------------

local function new_report(ctx, phases, pipeline)
  local numbers = pipeline and pipeline.phases and load.numbers(pipeline)
  if numbers and #numbers ~= #phases then
    error(string.format("pipeline %s: %d phases but %d entries", tostring(pipeline.name), #phases, #numbers), 2)
  end
  local names = {}
  for i, h in ipairs(ctx.hosts) do names[i] = h.name end
  local report = {
    pipeline = pipeline and pipeline.name or nil,
    dry_run = ctx.dry_run,
    cluster = ctx.cluster and ctx.cluster.name or nil,
    run_id = ctx.run_id,
    hosts = names,
    phases = {},
    cleanup = {},
    not_in_build = pipeline and pipeline.not_in_build or nil,
    skipped = load.skipped_of(pipeline),
  }
  for i, phase in ipairs(phases) do
    report.phases[i] = {
      index = i, number = numbers and numbers[i] or i, id = phase.id, title = phase.title,
      dry_run_policy = contract.policy(phase), verdict = "skipped", hosts = {}, around = phase.around or nil,
    }
  end
  return report
end

local NO_PROGRESS = { start = function() end, hosts = function() end, finish = function() end,
  close = function() end }

-- M.run(ctx, phases, opts) -> report (see report.lua for its shape)
-- opts (all optional):
--   pipeline   the pipeline module: name, phases ({number, module} per phase), not_in_build
--   progress   a cargoship.pipeline.progress object
--   deadline   loop.now() time after which the run gives up (--timeout); a failure
--   on_late_report(report)  see below
--   plan       the dry-run report shown before a real run: where a phase assesses otherwise
--              now, the run logs the difference (and does what it assessed now)
-- Refuses (raises) phases that break the contract, before anything runs. When the calling
-- task is cancelled (Ctrl-C), run returns at once with report.final = false: the phases'
-- cleanup goes on in destructors, and on_late_report gets the finished report after it.
function M.run(ctx, phases, opts)
  opts = opts or {}
  local ok, problems = contract.check_all(phases)
  if not ok then error("pipeline refused before it ran:\n  " .. table.concat(problems, "\n  "), 0) end
  local position = {}
  for i, h in ipairs(ctx.hosts) do position[h] = i end
  -- which phases this pass walks (--skip-phases leaves some out): ctx:runs(id) answers phases
  -- that leave work to a later one
  ctx.phase_ids = {}
  for _, phase in ipairs(phases) do ctx.phase_ids[phase.id] = true end
  local report = new_report(ctx, phases, opts.pipeline)
  local run = setmetatable({
    ctx = ctx, phases = phases, report = report, position = position,
    progress = opts.progress or NO_PROGRESS, started = {}, pending = policy.pending(), plan = opts.plan,
    completed = false,
    failed = false,  -- some phase failed (a dry run may have gone on past it)
    out = {},  -- dry run: [host] = why it is out of the later phases ("failed in phase 3 (...)")
  }, Run)
  local t0 = loop.now()
  local late = false
  local function finish()
    report.elapsed = loop.now() - t0
    report_mod.finalize(report, { completed = run.completed, timed_out = run.timed_out })
    run.progress:close()
    report.final = true
    if late and opts.on_late_report then opts.on_late_report(report) end
  end
  local sampler = heap.enabled and heap.sample()
  local task = loop.spawn(function()
    run.task = loop.current()
    local timer
    loop.defer(function()
      if timer then timer:cancel() end
      if sampler then sampler:cancel() end
      -- a dry run that went on past a failure cleans up too, as the contract says
      if not run.completed or run.failed then run:cleanup() end
      finish()
    end)
    if opts.deadline then
      local seconds = opts.deadline - loop.now()
      timer = loop.spawn(function()
        loop.sleep(math.max(seconds, 0))
        run.timed_out = string.format("gave up: the run took longer than --timeout (%s)",
          report_mod.duration(opts.timeout or math.max(seconds, 0)))
        run.task:cancel()
      end)
    end
    run:body()
  end)
  local jok, tok, terr = pcall(task.join, task)
  if not jok then
    if task:status() ~= "done" then
      -- our own task was cancelled: stop the phases, and keep the loop alive until their
      -- cleanup has reached the hosts (a destructor of ours can wait; we no longer can)
      task:cancel()
      late = true
      loop.defer(function() task:join() end)
      report.final = false
      report.outcome, report.interrupted, report.ok, report.pending = "interrupted", true, false, false
      return report
    end
    tok, terr = task:join() -- a task that is done answers at once, cancelled or not
  end
  -- a phase's failure is in the report; only the runner's own bugs end up here
  if not tok and terr ~= "cancelled" then error(terr, 0) end
  if not report.final then error("the pipeline task ended without a report: " .. tostring(terr), 0) end
  return report
end

return M
