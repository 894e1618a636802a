-- cargoship.pipeline.load: reads a pipeline module (its phases, spec numbers, required phases) and loads its phases.
--
-- A pipeline module (lua/cargoship/pipelines/<name>.lua) is data:
--   name          "apply": the report's "(apply pipeline, ...)"
--   command       the command that walks it ("apply"): the host lock's record names it
--   phases        { {number, module name}, ... } in the order they run; number is the phase's
--                 number in the pipeline's spec, whatever is missing in between
--   required      numbers --skip-phases may not leave out (absent: any phase may be skipped)
--   required_why  what those phases do, for the refusal ("connect, check, lock, ...")
--   not_in_build  {first, last, text}: the gap the report names instead of pretending
-- Nothing here knows any pipeline's numbers: they all come from the module.
local contract = require "cargoship.pipeline.contract"

local M = {}

local function module_exists(name)
  return package.loaded[name] ~= nil or package.preload[name] ~= nil
    or package.searchpath(name, package.path) ~= nil
end

-- M.numbers(pipeline) -> the spec number of each of its phases, in order.
function M.numbers(pipeline)
  local out = {}
  for i, entry in ipairs(pipeline.phases) do
    if type(entry) ~= "table" or math.type(entry[1]) ~= "integer" or entry[2] == nil then
      error(string.format("pipeline %s: entry %d must be {number, module}", tostring(pipeline.name), i), 2)
    end
    out[i] = entry[1]
  end
  return out
end

-- M.ranges{1, 2, 3, 7, 30, 31} -> "1-3, 7, 30 and 31"
function M.ranges(numbers)
  local sorted = {}
  for i, n in ipairs(numbers or {}) do sorted[i] = n end
  table.sort(sorted)
  local parts, i = {}, 1
  while i <= #sorted do
    local j = i
    while sorted[j + 1] == sorted[j] + 1 do j = j + 1 end
    parts[#parts + 1] = j > i and (sorted[i] .. "-" .. sorted[j]) or tostring(sorted[i])
    i = j + 1
  end
  if #parts <= 1 then return parts[1] or "" end
  return table.concat(parts, ", ", 1, #parts - 1) .. " and " .. parts[#parts]
end

-- A copy of pipeline with other phases (and whatever else `changes` sets): every declared
-- field (command, required, not_in_build, ...) travels with it.
function M.derive(pipeline, changes)
  local out = {}
  for k, v in pairs(pipeline) do out[k] = v end
  for k, v in pairs(changes) do out[k] = v end
  return out
end

-- M.without(pipeline, numbers) -> a new pipeline without the phases of those spec numbers,
-- its `skipped` listing them ({number, module}) | nil, message (a required or unknown number)
function M.without(pipeline, numbers)
  if not numbers or #numbers == 0 then return pipeline end
  local required = {}
  for _, n in ipairs(pipeline.required or {}) do required[n] = true end
  local drop, have = {}, {}
  for _, entry in ipairs(pipeline.phases) do have[entry[1]] = true end
  for _, n in ipairs(numbers) do
    if required[n] then
      local why = pipeline.required_why and (" " .. pipeline.required_why) or " are required"
      return nil, string.format("phase %d cannot be skipped (phases %s%s)", n, M.ranges(pipeline.required), why)
    end
    if not have[n] then return nil, string.format("the %s pipeline has no phase %d in this build",
      tostring(pipeline.name), n) end
    drop[n] = true
  end
  local phases, skipped = {}, {}
  for _, entry in ipairs(pipeline.phases) do
    table.insert(drop[entry[1]] and skipped or phases, entry)
  end
  return M.derive(pipeline, { phases = phases, skipped = skipped })
end

-- M.load(pipeline) -> phases | nil, message, {missing = {...}} | {problems = {...}}
-- pipeline: a pipeline module or its name. Modules missing from the build are listed
-- together (not a Lua "module not found" for the first); a module that exists and fails to
-- load raises, since that is a bug.
function M.load(pipeline)
  if type(pipeline) == "string" then pipeline = require(pipeline) end
  local name = pipeline.name or "this"
  M.numbers(pipeline)
  local missing, modules = {}, {}
  for i, entry in ipairs(pipeline.phases) do
    modules[i] = entry[2]
    if not module_exists(entry[2]) then missing[#missing + 1] = entry[2] end
  end
  if #missing > 0 then
    return nil, string.format("the %s pipeline needs phase modules this build does not have yet: %s",
      name, table.concat(missing, ", ")), { missing = missing }
  end
  local phases = {}
  for i, mod in ipairs(modules) do phases[i] = require(mod) end
  local ok, problems = contract.check_all(phases)
  if not ok then
    for i, p in ipairs(problems) do
      local n = tonumber(p:match("^phase (%d+)"))
      if n then problems[i] = modules[n] .. ": " .. p end
    end
    return nil, string.format("the %s pipeline has phases that break the phase contract:\n  %s", name,
      table.concat(problems, "\n  ")), { problems = problems }
  end
  return phases
end

-- The phases the operator left out, as {number, id, title}, for the report (nil: none).
function M.skipped_of(pipeline)
  if not (pipeline and pipeline.skipped and #pipeline.skipped > 0) then return nil end
  local out = {}
  for i, entry in ipairs(pipeline.skipped) do
    local phase = type(entry[2]) == "table" and entry[2] or require(entry[2])
    out[i] = { number = entry[1], id = phase.id, title = phase.title }
  end
  return out
end

return M
