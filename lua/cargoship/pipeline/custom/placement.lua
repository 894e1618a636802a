-- cargoship.pipeline.custom.placement: where custom phases go in a pipeline: their declaration, --phases DIR, assembly.
--
-- A file found through `apply --phases DIR` says where it goes: exactly one of before/after/
-- replace = "<phase id>" in its phase table. Entries of the cluster file's spec.phases carry
-- their placement in the entry (config/phases.lua), which wins over the file's own.
local contract = require "cargoship.pipeline.contract"
local errors = require "cargoship.config.errors"
local load = require "cargoship.pipeline.load"
local shell = require "cargoship.shell"

local M = {}

M.PLACEMENTS = { "before", "after", "replace" }

-- M.split(phase, path) -> the phase without its placement, placement ({placement =, anchor =}
-- or nil when it declares none) | nil, message naming the file
function M.split(phase, path)
  local found, placement, plain = {}, nil, {}
  for k, v in pairs(phase) do
    local is_place = false
    for _, p in ipairs(M.PLACEMENTS) do
      if k == p then
        is_place = true
        found[#found + 1] = p
        if type(v) ~= "string" or not v:match("^[a-z][a-z0-9_]*$") then
          return nil, string.format("%s: `%s` must name a phase by its id (like \"validate_hosts\"), not %s",
            path, p, type(v) == "string" and errors.quote(v) or ("a " .. type(v)))
        end
        placement = { placement = p, anchor = v }
      end
    end
    if not is_place then plain[k] = v end
  end
  if #found > 1 then
    table.sort(found)
    return nil, string.format("%s: a phase has one placement, this one declares %s", path, table.concat(found, ", "))
  end
  return plain, placement
end

-- "cluster.yaml:12:5: spec.phases[1]": where a cluster-file entry is, for its messages.
function M.where_text(src, at)
  at = at or src
  local e = { file = src.file, line = at.line, col = at.col, path = at.path or src.path }
  return (errors.text { file = e.file, line = e.line, col = e.col, path = e.path, message = "" }:gsub(": $", ""))
end

-- The *.lua files of dir, sorted by name. -> paths | nil, message
function M.list_dir(dir)
  local cmd = "cd -- " .. shell.quote(dir) .. " 2>&1 || exit 3; LC_ALL=C; export LC_ALL; "
    .. "for f in *.lua; do [ -f \"$f\" ] && printf '%s\\0' \"$f\"; done; exit 0"
  local p = io.popen(cmd)
  local out = p and p:read("a") or ""
  local ok = p and p:close()
  if not ok then
    return nil, string.format("--phases %s: %s", dir, (out:match("[^\n]+") or "cannot list the directory")
      :gsub("^.-cd: ", ""))
  end
  local list = {}
  for name in out:gmatch("([^%z]+)%z") do list[#list + 1] = (dir:gsub("/+$", "")) .. "/" .. name end
  table.sort(list)
  return list
end

-- M.assemble(phases, pipeline, customs) -> phases, pipeline | nil, message
-- pipeline: {name, phases = {{number, module}, ...}, ...}; the result is a new one (every
-- other declared field kept) whose entries are {number, module name or custom phase table}:
-- a custom phase gets the number of the phase it replaces, else of the phase before it (0
-- first). customs: {phase =, placement =, anchor =, file =, origin =}
function M.assemble(phases, pipeline, customs)
  if #customs == 0 then return phases, pipeline end
  local ids, slots, by_id = {}, {}, {}
  for i, p in ipairs(phases) do
    ids[i] = p.id
    local entry = pipeline.phases and pipeline.phases[i]
    slots[i] = { before = {}, after = {}, phase = p, number = entry and entry[1] or i,
      module = entry and entry[2] or p }
    by_id[p.id] = slots[i]
  end
  local problems = {}
  for _, c in ipairs(customs) do
    local slot = by_id[c.anchor]
    if not slot then
      problems[#problems + 1] = string.format("%s: unknown phase %s%s; the %s pipeline's phases are %s", c.origin,
        errors.quote(c.anchor), errors.did_you_mean(c.anchor, ids), pipeline.name or "this", table.concat(ids, ", "))
    elseif c.placement == "replace" then
      if slot.replaced then
        problems[#problems + 1] = string.format("%s: phase %s is already replaced by %s", c.origin, c.anchor,
          slot.replaced.file)
      else
        slot.replaced = c
      end
    else
      table.insert(slot[c.placement], c)
    end
  end
  if #problems > 0 then return nil, table.concat(problems, "\n") end
  local out, entries = {}, {}
  local function add(phase, number, module)
    out[#out + 1] = phase
    entries[#entries + 1] = { number, module or phase }
  end
  for _, slot in ipairs(slots) do
    for _, c in ipairs(slot.before) do add(c.phase, entries[#entries] and entries[#entries][1] or 0) end
    if slot.replaced then add(slot.replaced.phase, slot.number) else add(slot.phase, slot.number, slot.module) end
    for _, c in ipairs(slot.after) do add(c.phase, slot.number) end
  end
  local ok, list = contract.check_all(out)
  if not ok then
    return nil, "the pipeline with custom phases breaks the phase contract:\n  " .. table.concat(list, "\n  ")
  end
  return out, load.derive(pipeline, { phases = entries })
end

return M
