-- cargoship.pipeline.contract: what a phase module must look like; the runner refuses any other shape.
--
-- A phase is a table:
--   id       stable snake_case name ("gather_facts")
--   title    exactly the title in spec/apply-phases.txt ("Gather host facts")
--   dry_run  "read_only"  runs in a dry run, only reads
--            function(ctx, hosts) -> { {host = h, actions = {...}}, ... }
--                        its own dry-run path (policy "own"); it may read
--            nil         reported, not run (what a phase that declares nothing gets)
--   reads, creates      lists of names of host state ("facts", "engine_version", "lock")
--   prepare(ctx)        -> hosts the phase concerns (default: ctx.hosts). Reads only.
--   assess(ctx, host)   -> action records (cargoship.action) | nil/{}. Reads only. Required of
--                       every phase that is not read-only: it is the plan, and what runs.
--                       (Plain sentences still load, as kind "note"; docs/phases.md.)
--   run(ctx, hosts)     optional for a phase with assess: without it the runner executes the
--                       assessed records through host:apply on every host with work, hosts
--                       concurrently; with it, the phase orders them itself (ctx:apply).
--                       Required of a read-only phase (its reads are its work). Raises or
--                       returns nil, err (a string or the failure list ctx:each returns) to fail.
--   steps               {name = function(ctx, host, action) -> true | "skipped" | nil, err}:
--                       what the phase's step records do (drain, wait for Ready, take a lock)
--   around = true       the phase only serves the others (the host lock and its release): its
--                       pending work alone does not make a dry run "pending", since a real
--                       run with nothing else to do stops at the plan and takes no lock.
--   cleanup(ctx)        optional; runs, in reverse order, for every phase whose run started,
--                       when a later phase fails or the run is cancelled.
-- The own dry-run path is the function in `dry_run` itself: one field cannot be both the
-- string "own" and a function, and a declaration that is the code cannot drift from it.
local M = {}

-- The names the report uses for the three policies.
M.READ_ONLY, M.OWN, M.REPORTED = "read_only", "own", "reported"

local FUNCTIONS = { "prepare", "assess", "run", "cleanup" }
local KNOWN = { id = true, title = true, dry_run = true, reads = true, creates = true,
  prepare = true, assess = true, run = true, cleanup = true, steps = true, around = true }

-- The dry-run policy of a well-formed phase: "read_only", "own" or "reported".
function M.policy(phase)
  if phase.dry_run == "read_only" then return M.READ_ONLY end
  if type(phase.dry_run) == "function" then return M.OWN end
  return M.REPORTED
end

local function check_names(problems, phase, field)
  local list = phase[field]
  if list == nil then return end
  if type(list) ~= "table" then
    problems[#problems + 1] = string.format("`%s` must be a list of state names, not a %s", field, type(list))
    return
  end
  local n = 0
  for k in pairs(list) do
    n = n + 1
    if math.type(k) ~= "integer" or k < 1 or k > #list then
      problems[#problems + 1] = string.format("`%s` must be a list, it has the key %s", field, tostring(k))
      return
    end
  end
  if n ~= #list then problems[#problems + 1] = string.format("`%s` has holes", field) end
  for i, name in ipairs(list) do
    if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
      problems[#problems + 1] = string.format("`%s`[%d] must be a state name (a word), not %s", field, i,
        type(name) == "string" and string.format("%q", name) or ("a " .. type(name)))
    end
  end
end

-- Near-misses of the contract's names ("Run", "cleanUp", "dryrun"): a misspelt function is
-- never called, which would pass silently.
local function check_spelling(problems, phase)
  local folded = {}
  for name in pairs(KNOWN) do folded[name:gsub("_", "")] = name end
  for key in pairs(phase) do
    if type(key) == "string" and not KNOWN[key] then
      local want = folded[key:lower():gsub("_", "")]
      if want then
        problems[#problems + 1] = string.format("`%s` is not a phase field; did you mean `%s`?", key, want)
      end
    end
  end
end

-- M.check(phase) -> true | nil, problems (a list of sentences)
function M.check(phase)
  if type(phase) ~= "table" then return nil, { "a phase must be a table, not a " .. type(phase) } end
  local problems = {}
  if type(phase.id) ~= "string" or not phase.id:match("^[a-z][a-z0-9_]*$") then
    problems[#problems + 1] = "`id` must be a snake_case string, not " .. (type(phase.id) == "string"
      and string.format("%q", phase.id) or type(phase.id))
  end
  if type(phase.title) ~= "string" or not phase.title:match("%S") then
    problems[#problems + 1] = "`title` must be a non-empty string (the title in apply-phases.txt)"
  end
  local dr = phase.dry_run
  if dr == "own" then
    problems[#problems + 1] = '`dry_run` = "own" declares nothing to run: an own dry-run path is '
      .. "declared by making `dry_run` the function itself, function M.dry_run(ctx, hosts)"
  elseif dr ~= nil and dr ~= "read_only" and type(dr) ~= "function" then
    problems[#problems + 1] = '`dry_run` must be "read_only", a function (its own dry-run path) or absent, not '
      .. (type(dr) == "string" and string.format("%q", dr) or ("a " .. type(dr)))
  end
  for _, name in ipairs(FUNCTIONS) do
    local f = phase[name]
    if f ~= nil and type(f) ~= "function" then
      problems[#problems + 1] = string.format("`%s` must be a function, not a %s", name, type(f))
    end
  end
  if dr == "read_only" then
    if phase.run == nil then
      problems[#problems + 1] = "`run` is missing (a function): a read-only phase does its reads in run"
    end
  elseif phase.assess == nil then
    problems[#problems + 1] = "`assess` is missing (a function): a phase that is not read-only says what it"
      .. " would do, as action records, and the run executes exactly those"
  end
  if phase.steps ~= nil then
    if type(phase.steps) ~= "table" then
      problems[#problems + 1] = "`steps` must be a table of functions, not a " .. type(phase.steps)
    else
      for k, f in pairs(phase.steps) do
        if type(k) ~= "string" or type(f) ~= "function" then
          problems[#problems + 1] = string.format("`steps`.%s must be a function, not a %s", tostring(k), type(f))
        end
      end
    end
  end
  check_names(problems, phase, "reads")
  check_names(problems, phase, "creates")
  check_spelling(problems, phase)
  if #problems > 0 then return nil, problems end
  return true
end

-- M.check_all(phases) -> true | nil, problems: every phase, each problem named by position
-- and id, plus ids used twice (the report and the lock key phases by id).
function M.check_all(phases)
  local problems, seen = {}, {}
  for i, phase in ipairs(phases) do
    local ok, list = M.check(phase)
    local label = string.format("phase %d (%s)", i, type(phase) == "table" and tostring(phase.id) or "?")
    if not ok then
      for _, p in ipairs(list) do problems[#problems + 1] = label .. ": " .. p end
    elseif seen[phase.id] then
      problems[#problems + 1] = string.format("%s: id already used by phase %d", label, seen[phase.id])
    else
      seen[phase.id] = i
    end
  end
  if #problems > 0 then return nil, problems end
  return true
end

return M
