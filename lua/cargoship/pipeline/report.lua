-- cargoship.pipeline.report: the run's report: its final shape, text for people, JSON for machines, exit code.
--
-- report = {
--   pipeline = "apply", dry_run = bool, cluster = name, run_id = string,
--   hosts = {names in config order},
--   outcome = "ok" | "pending" | "failed" | "interrupted"      (a run)
--           | "not_confirmed" | "declined" | "refused"         (a real run stopped before it began;
--                                                                refused: its plan foretold a failure)
--   ok = bool (no phase failed, not interrupted), pending = bool (dry run: work is pending),
--   predicted = number of hosts with a foretold failure (0 when none),
--   interrupted = bool, error = nil | string, elapsed = seconds,
--   not_in_build = nil | {first = 14, last = 29, text = "phases 14-29 (...) are not in this build"},
--   skipped = nil | { {number, id, title} }: the phases the operator left out (--skip-phases),
--   phases = { {index, number, id, title, dry_run_policy = "read_only"|"own"|"reported",
--       verdict = "ran"|"own"|"would_act"|"nothing_to_do"|"unassessed"|"failed"|"skipped"|"interrupted",
--       elapsed, probes, writes (every executed record but a step or note, kube ones included:
--       host.writes_sent), round_trips (commands and files the transport sent: host:round_trips,
--       prefetch batches, sudo checks and lock beats included), error = nil | string, summary = nil | string,
--       hosts = { {host = name, actions = {action}, reason = nil | string,
--                  left_alone = nil | string (why the phase leaves the host alone: ctx:leave),
--                  error = nil | string, probes, writes, round_trips,
--                  predicted = nil | {sentence, ...}: failures a later phase would meet there
--                  (ctx:predict; a real run refuses a plan that has any),
--                  not_reached = nil | "failed in phase 3 (...)": a dry run took this host out
--                  of the phases after its failure} }   -- config order
--   } },
--   where action = the public part of an action record (cargoship.action.public: kind, say,
--   and path, mode, owner, group, sha256, size, verb, service, name, node, cmd where they apply;
--   never a file's content, stdin or a secret command) plus
--       outcome = nil (a dry run: planned, not run) | "done" | "skipped" (already in place)
--               | "failed" | "not_run" (after an earlier failure on that host),
--       error = nil | string (with "failed")
--   A dry run and a real run share this shape: a real run's actions are those it assessed on
--   the live hosts just before it executed them, each with its outcome.
--   cleanup = { {index, id, title, ok, error} },   -- in the order cleanup ran
--   plan = nil | the dry-run report a real run showed before it began
-- }
-- docs/dry-run.md documents the JSON form; change both together.
local action = require "cargoship.action"
local json = require "cargoship.json"

local M = {}

M.SCHEMA = "cargoship.report/v2"

local function plural(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

local function count(entry, pred)
  local n = 0
  for _, h in ipairs(entry.hosts) do
    if pred(h) then n = n + 1 end
  end
  return n
end

local function has_actions(h) return #h.actions > 0 end
local function has_reason(h) return h.reason ~= nil end
local function has_error(h) return h.error ~= nil end
local function is_out(h) return h.not_reached ~= nil end
local function has_predicted(h) return h.predicted ~= nil and #h.predicted > 0 end

-- "5m", "1m30s", "45s", "0.5s": how --timeout reads back.
function M.duration(seconds)
  if seconds < 60 and seconds ~= math.floor(seconds) then return string.format("%gs", seconds) end
  seconds = math.floor(seconds)
  local h, m, s = seconds // 3600, seconds % 3600 // 60, seconds % 60
  local out = ""
  if h > 0 then out = out .. h .. "h" end
  if m > 0 then out = out .. m .. "m" end
  if s > 0 or out == "" then out = out .. s .. "s" end
  return out
end

-- The verdict of one phase in a few words; with timing for the progress lines.
function M.summary(entry, with_time)
  if with_time == nil then with_time = true end
  local t = with_time and entry.elapsed and string.format("%.2f s", entry.elapsed) or nil
  -- hosts taken out after an earlier failure are not among those the phase reached
  local out = count(entry, is_out)
  local n = #entry.hosts - out
  local function paren(...)
    local parts = {}
    for _, x in ipairs({ ... }) do parts[#parts + 1] = x end
    if out > 0 and entry.verdict ~= "skipped" then parts[#parts + 1] = out .. " not reached" end
    if t then parts[#parts + 1] = t end
    return #parts > 0 and (" (" .. table.concat(parts, ", ") .. ")") or ""
  end
  local v = entry.verdict
  if v == "ran" then return "ran" .. paren(plural(n, "host"))
  elseif v == "own" then return "own dry run" .. paren(plural(n, "host"))
  elseif v == "nothing_to_do" then return "nothing to do" .. paren(plural(n, "host"))
  elseif v == "would_act" then
    return string.format("would act on %d of %s", count(entry, has_actions), plural(n, "host")) .. paren()
  elseif v == "unassessed" then
    return string.format("unassessed on %d of %s", count(entry, has_reason), plural(n, "host")) .. paren()
  elseif v == "failed" then
    local k = count(entry, has_error)
    if k > 0 then return string.format("FAILED on %d of %s", k, plural(n, "host")) .. paren() end
    return "FAILED" .. paren()
  elseif v == "interrupted" then return "interrupted" .. paren()
  elseif v == "skipped" then
    if out > 0 then return "skipped (not reached: " .. plural(out, "host") .. " failed earlier)" end
    return "skipped (not reached)"
  end
  return tostring(v)
end

-- Hosts in config order: the order of the cluster file, whatever order they finished in.
function M.sort_hosts(entry)
  table.sort(entry.hosts, function(a, b)
    if a._pos ~= b._pos then return a._pos < b._pos end
    return a.host < b.host
  end)
end

local PENDING = { would_act = true, unassessed = true }

-- A host entry's action records -> their public part with outcome and error (in place,
-- once, when the report is settled).
function M.public_actions(h)
  local out = {}
  for i, a in ipairs(h.actions or {}) do
    if type(a) == "table" then
      local p = action.public(a)
      local o = h.outcomes and h.outcomes[i]
      p.outcome, p.error = o and o.status, o and o.error
      out[i] = p
    else
      out[i] = a
    end
  end
  h.actions, h.outcomes = out, nil
  return h
end

-- Settles outcome, ok, pending and error, and drops the runner's bookkeeping.
-- info = {completed = bool (every phase ended), timed_out = nil | message}
function M.finalize(report, info)
  info = info or {}
  local failed, interrupted, pending
  local predicted = {}
  for _, p in ipairs(report.phases) do
    p.by_host, p.unassessed, p.failed = nil, nil, nil
    for _, h in ipairs(p.hosts) do
      h._pos, h._host = nil, nil
      if has_predicted(h) then predicted[h.host], pending = true, true end
      if h.reason and not p.around then pending = true end
      M.public_actions(h)
    end
    if p.verdict == "failed" and not failed then failed = p end
    if p.verdict == "interrupted" then interrupted = true end
    -- the lock alone is no work: a real run with nothing else to do takes none
    if PENDING[p.verdict] and not p.around then pending = true end
  end
  if not info.completed and not failed then interrupted = true end
  if interrupted then report.outcome = "interrupted"
  elseif failed then report.outcome = "failed"
  elseif report.dry_run and pending then report.outcome = "pending"
  else report.outcome = "ok" end
  report.ok = report.outcome == "ok" or report.outcome == "pending"
  report.pending = report.outcome == "pending"
  report.interrupted = report.outcome == "interrupted"
  report.predicted = 0
  for _ in pairs(predicted) do report.predicted = report.predicted + 1 end
  if info.timed_out then report.error = info.timed_out
  elseif failed then
    report.error = string.format("phase %d (%s) failed", failed.number, failed.title)
  end
  return report
end

-- A real run that stopped before its first phase: the plan it showed, and why it stopped.
function M.stopped(plan, outcome, message)
  local phases = {}
  for i, p in ipairs(plan.phases) do
    phases[i] = { index = p.index, number = p.number, id = p.id, title = p.title,
      dry_run_policy = p.dry_run_policy, verdict = "skipped", hosts = {} }
  end
  return {
    pipeline = plan.pipeline, dry_run = false, cluster = plan.cluster, run_id = nil, hosts = plan.hosts,
    outcome = outcome, ok = false, pending = false, interrupted = outcome == "interrupted",
    error = message, elapsed = 0, not_in_build = plan.not_in_build, skipped = plan.skipped, phases = phases,
    cleanup = {},
    plan = plan, final = true,
  }
end

-- The exit code a report stands for; codes is cli.EXIT.
function M.exit_code(report, codes)
  local o = report.outcome
  if o == "ok" then return codes.ok end
  if o == "pending" then return report.dry_run and codes.pending or codes.ok end
  if o == "interrupted" then return codes.interrupted end
  return codes.failure
end

-- ---- text -----------------------------------------------------------------------------------

local VERB = { ran = "ran", own = "own dry run", nothing_to_do = "nothing to do", skipped = "skipped (not reached)",
  interrupted = "interrupted" }

local function verdict_words(p, dry_run)
  if VERB[p.verdict] then
    if p.verdict == "ran" and dry_run then return "ran, reads only" end
    return VERB[p.verdict]
  end
  return M.summary(p, false)
end

local OUTCOME_WORDS = { done = "done", skipped = "already in place", not_run = "not run" }

-- One action as people read it: its sentence, and in a real run what became of it.
local function action_line(a)
  if type(a) ~= "table" then return tostring(a) end
  if a.outcome == nil then return a.say end
  if a.outcome == "failed" then return a.say .. ": FAILED" .. (a.error and (": " .. a.error) or "") end
  return a.say .. ": " .. (OUTCOME_WORDS[a.outcome] or a.outcome)
end
M.action_line = action_line

local function lines_key(h)
  local parts = {}
  for i, a in ipairs(h.actions) do parts[i] = action_line(a) end
  return table.concat(parts, "\0")
end

local function same_lines(a, b)
  if a.error or b.error or a.reason ~= b.reason or a.left_alone ~= b.left_alone or a.not_reached ~= b.not_reached
    or #a.actions ~= #b.actions then
    return false
  end
  return lines_key(a) == lines_key(b)
end

-- Every host saying the same ("take the lock at ..." on 500 hosts) is said once.
local function all_alike(p)
  local first = p.hosts[1]
  if #p.hosts < 2 or not (has_actions(first) or first.reason or first.not_reached) then return false end
  for i = 2, #p.hosts do
    if not same_lines(first, p.hosts[i]) then return false end
  end
  return true
end

-- "h2, h3, h7 and 22 more": a group of hosts named briefly, in config order.
local function group_label(names)
  if #names <= 6 then return table.concat(names, ", ") end
  return string.format("%s, %s, %s and %d more", names[1], names[2], names[3], #names - 3)
end

-- Hosts that would do exactly the same, three or more of them, are said once as a group
-- (50 hosts each "take the lock at /run/lock/..." read as one line, not fifty).
local function groups_of(p)
  local groups, by_key = {}, {}
  for _, h in ipairs(p.hosts) do
    if not h.error and (has_actions(h) or h.reason or h.not_reached) then
      local key = (h.reason or "") .. "\0" .. (h.not_reached or "") .. "\0" .. lines_key(h)
      local g = by_key[key]
      if not g then
        g = { first = h, names = {} }
        by_key[key] = g
        groups[#groups + 1] = g
      end
      g.names[#g.names + 1] = h.host
    end
  end
  local grouped = {}
  for _, g in ipairs(groups) do
    if #g.names >= 3 then grouped[g.first] = g end
  end
  return grouped
end

local function host_lines(out, p)
  if all_alike(p) then
    local label = "all " .. #p.hosts .. " hosts"
    for _, a in ipairs(p.hosts[1].actions) do out[#out + 1] = "       " .. label .. "  " .. action_line(a) end
    if p.hosts[1].reason then out[#out + 1] = "       " .. label .. "  unassessed: " .. p.hosts[1].reason end
    if p.hosts[1].not_reached then
      out[#out + 1] = "       " .. label .. "  not reached: " .. p.hosts[1].not_reached
    end
    return
  end
  local grouped, in_group = groups_of(p), {}
  for _, g in pairs(grouped) do
    for _, n in ipairs(g.names) do in_group[n] = true end
  end
  local width = 0
  for _, h in ipairs(p.hosts) do
    if (has_actions(h) or h.reason or h.error or h.left_alone or h.not_reached or has_predicted(h))
      and not in_group[h.host] then
      width = math.max(width, #h.host)
    end
  end
  local quiet = 0
  for _, h in ipairs(p.hosts) do
    local g = grouped[h]
    local name = g and group_label(g.names) or (h.host .. string.rep(" ", width - #h.host))
    local said = in_group[h.host] and not g
    if not said then
      for _, a in ipairs(h.actions) do
        out[#out + 1] = "       " .. name .. "  " .. action_line(a)
        said = true
      end
      if h.reason then
        out[#out + 1] = "       " .. name .. "  unassessed: " .. h.reason
        said = true
      end
      if h.left_alone then
        out[#out + 1] = "       " .. name .. "  left alone: " .. h.left_alone
        said = true
      end
      if h.error then
        out[#out + 1] = "       " .. name .. "  error: " .. h.error
        said = true
      end
      for _, why in ipairs(h.predicted or {}) do
        out[#out + 1] = "       " .. name .. "  would fail: " .. why
        said = true
      end
      if h.not_reached then
        out[#out + 1] = "       " .. name .. "  not reached: " .. h.not_reached
        said = true
      end
    end
    if not said then quiet = quiet + 1 end
  end
  if quiet > 0 and quiet < #p.hosts - count(p, is_out) and (p.verdict == "would_act" or p.verdict == "unassessed") then
    out[#out + 1] = string.format("       (nothing to do on %s)", plural(quiet, "other host"))
  end
end

-- " h2 and h5 were left out of the phases after they failed.": a dry run that went on.
local function left_out(report)
  local seen = {}
  for _, p in ipairs(report.phases) do
    for _, h in ipairs(p.hosts) do
      if h.not_reached then seen[h.host] = true end
    end
  end
  local names = {}
  for _, n in ipairs(report.hosts or {}) do
    if seen[n] then names[#names + 1] = n end
  end
  if #names == 0 then return "" end
  local list = #names == 1 and names[1]
    or (table.concat(names, ", ", 1, #names - 1) .. " and " .. names[#names])
  return string.format(" %s %s left out of the phases after %s failed.", list, #names == 1 and "was" or "were",
    #names == 1 and "it" or "they")
end

local function footer(report, heading)
  local o = report.outcome
  local changed = report.dry_run and " Nothing was changed." or ""
  if o == "pending" then
    local act, un = 0, 0
    for _, p in ipairs(report.phases) do
      if p.verdict == "would_act" then act = act + 1 end
      if p.verdict == "unassessed" or (p.verdict ~= "would_act" and count(p, has_reason) > 0) then un = un + 1 end
    end
    return string.format("Work is pending: %s would act, %d unassessed.%s", plural(act, "phase"), un, changed)
  elseif o == "ok" then
    if report.dry_run then
      for _, p in ipairs(report.phases) do
        if p.around and p.verdict == "would_act" then
          return "Nothing to do (no phase needs the host lock, so a real run takes none)." .. changed
        end
      end
      return "Nothing to do." .. changed
    end
    -- apply's own word; another pipeline command says its heading (a kubeconfig run applied nothing)
    return (heading == "Apply" and "Applied" or heading) .. ": every phase finished."
  elseif o == "interrupted" then
    return "Interrupted." .. (report.dry_run and changed or "")
  elseif o == "failed" then
    return heading .. " failed: " .. tostring(report.error) .. "." .. left_out(report) .. changed
  end
  return "Not applied: " .. tostring(report.error)
end

-- M.text(report, {heading = "Dry run"}) -> the report for people, stable for the same run.
function M.text(report, opts)
  opts = opts or {}
  local out = {}
  local heading = opts.heading or (report.dry_run and "Dry run" or "Apply")
  out[1] = string.format("%s of cluster %s on %s (%s pipeline, %s)", heading,
    report.cluster and string.format("%q", report.cluster) or "(unnamed)", plural(#report.hosts, "host"),
    report.pipeline or "a", plural(#report.phases, "phase"))
  local gap = report.not_in_build
  local function skipped_between(lo, hi)
    local names = {}
    for _, s in ipairs(report.skipped or {}) do
      if s.number > lo and s.number <= hi then names[#names + 1] = string.format("%d. %s", s.number, s.title) end
    end
    if #names > 0 then out[#out + 1] = "     skipped (--skip-phases): " .. table.concat(names, ", ") end
  end
  for i, p in ipairs(report.phases) do
    skipped_between(i == 1 and -1 or report.phases[i - 1].number, p.number)
    out[#out + 1] = string.format("%3d. %s: %s", p.number, p.title, verdict_words(p, report.dry_run))
    if p.summary then out[#out + 1] = "       " .. p.summary end
    if p.error then out[#out + 1] = "       error: " .. p.error end
    host_lines(out, p)
    local next_p = report.phases[i + 1]
    -- where the first missing number falls (the gap may have built phases inside it)
    if gap and next_p and p.number < gap.first and next_p.number > gap.first then
      out[#out + 1] = "     " .. gap.text
    end
  end
  if #report.phases > 0 then skipped_between(report.phases[#report.phases].number, math.huge) end
  for _, c in ipairs(report.cleanup or {}) do
    out[#out + 1] = string.format("Cleanup after %d. %s: %s", c.index and report.phases[c.index].number or 0,
      c.title, c.ok and "done" or ("FAILED: " .. tostring(c.error)))
  end
  out[#out + 1] = footer(report, heading)
  if (report.predicted or 0) > 0 then
    out[#out + 1] = string.format("Foretold: %s would fail later (\"would fail\" above); a real run refuses this plan.",
      plural(report.predicted, "host"))
  end
  if gap then
    out[#out + 1] = string.format("Note: %s; this report covers only the phases above.", gap.text)
  end
  return table.concat(out, "\n") .. "\n"
end

-- ---- JSON -----------------------------------------------------------------------------------

-- Seconds to the millisecond: more digits would be noise, not precision.
local function seconds(v)
  return math.floor((v or 0) * 1000 + 0.5) / 1000
end

local function or_null(v)
  if v == nil then return json.null end
  return v
end

local function strings(list)
  local out = json.array({})
  for i, s in ipairs(list or {}) do out[i] = s end
  return out
end

-- An action in the JSON: every public field it has, kind, say, outcome and error always.
local function json_actions(list)
  local out = json.array({})
  for i, a in ipairs(list or {}) do
    local o = {}
    if type(a) == "table" then
      for k, v in pairs(a) do o[k] = v end
    else
      o.kind, o.say = "note", tostring(a)
    end
    o.outcome, o.error = or_null(o.outcome), or_null(o.error)
    out[i] = o
  end
  return out
end

local function json_phase(p)
  local hosts = json.array({})
  for i, h in ipairs(p.hosts) do
    hosts[i] = { host = h.host, actions = json_actions(h.actions), reason = or_null(h.reason),
      left_alone = or_null(h.left_alone), predicted = json.array(h.predicted or {}),
      error = or_null(h.error), not_reached = or_null(h.not_reached), probes = h.probes or 0,
      writes = h.writes or 0, round_trips = h.round_trips or 0 }
  end
  return { index = p.index, number = p.number, id = p.id, title = p.title,
    dry_run_policy = p.dry_run_policy, verdict = p.verdict, elapsed = seconds(p.elapsed),
    probes = p.probes or 0, writes = p.writes or 0, round_trips = p.round_trips or 0,
    error = or_null(p.error), summary = or_null(p.summary), hosts = hosts }
end

local function json_doc(report)
  local phases = json.array({})
  for i, p in ipairs(report.phases) do phases[i] = json_phase(p) end
  local cleanup = json.array({})
  for i, c in ipairs(report.cleanup or {}) do
    cleanup[i] = { index = c.index, id = c.id, title = c.title, ok = c.ok, error = or_null(c.error) }
  end
  local gap = report.not_in_build
  local skipped = json.array({})
  for i, sk in ipairs(report.skipped or {}) do skipped[i] = { number = sk.number, id = sk.id, title = sk.title } end
  return {
    schema = M.SCHEMA, pipeline = or_null(report.pipeline), dry_run = report.dry_run,
    cluster = or_null(report.cluster), run_id = or_null(report.run_id), hosts = strings(report.hosts),
    outcome = report.outcome, ok = report.ok, pending = report.pending, predicted = report.predicted or 0,
    interrupted = report.interrupted and true or false, error = or_null(report.error),
    elapsed = seconds(report.elapsed),
    not_in_build = gap and { first = gap.first, last = gap.last, text = gap.text } or json.null,
    skipped_phases = skipped,
    phases = phases, cleanup = cleanup,
    plan = report.plan and json_doc(report.plan) or json.null,
  }
end

-- M.json(report) -> one line of JSON and a newline (docs/dry-run.md).
function M.json(report)
  return json.encode(json_doc(report)) .. "\n"
end

-- M.write_json(report, file): the same line, written to file as it is made (a report of
-- 1,000 hosts and two passes is megabytes: its text is never held whole).
function M.write_json(report, file)
  json.write(file, json_doc(report))
  file:write("\n")
end

return M
