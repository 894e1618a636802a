-- cargoship.pipeline.custom: loads the operator's phase files and places them in a pipeline.
--
-- A custom phase file is Lua that returns a phase table, the same contract as the built-in
-- phases (pipeline/contract.lua), plus, for files found through `apply --phases DIR`, its
-- placement (custom/placement.lua). The file runs in a sandbox (custom/sandbox.lua); its
-- functions receive views of the context and the hosts (custom/views.lua) that expose the
-- API custom/api.lua lists and nothing of the runtime. Every error raised from the file
-- names it and the line. docs/phases.md is the operator's manual of all this.
local api = require "cargoship.pipeline.custom.api"
local contract = require "cargoship.pipeline.contract"
local placement = require "cargoship.pipeline.custom.placement"
local sandbox = require "cargoship.pipeline.custom.sandbox"
local views = require "cargoship.pipeline.custom.views"

local M = {}

M.PLACEMENTS = placement.PLACEMENTS
M.HOST_METHODS = api.host_methods()
M.sandbox = sandbox.new
M.list_dir = placement.list_dir
M.assemble = placement.assemble

-- M.load(path, {log = logger}) -> phase, placement | nil, message
-- placement = {placement = "before"|"after"|"replace", anchor = id} when the file declares
-- one, else nil. The message names the file (and the line, for syntax and runtime errors).
function M.load(path, o)
  o = o or {}
  local env = sandbox.new { log = o.log, name = path:match("[^/]*$") }
  local chunk, err = loadfile(path, "t", env)
  if not chunk then return nil, err end
  local ok, phase = xpcall(chunk, sandbox.handler_for(path))
  if not ok then return nil, phase end
  if type(phase) ~= "table" then
    return nil, string.format("%s: a custom phase file returns its phase table (docs/phases.md), this one "
      .. "returned %s", path, type(phase) == "nil" and "nothing" or ("a " .. type(phase)))
  end
  local plain, where = placement.split(phase, path)
  if not plain then return nil, where end
  local good, problems = contract.check(plain)
  if not good then
    return nil, string.format("%s: breaks the phase contract: %s", path, table.concat(problems, "; "))
  end
  return views.wrap(plain, path), where
end

-- The cluster file's spec.phases entries: their placement wins over the file's own.
local function load_entries(o, customs, problems)
  for _, e in ipairs((o.cluster and o.cluster.phases) or {}) do
    local f = io.open(e.path, "rb")
    if not f then
      local _, why = io.open(e.path, "rb")
      problems[#problems + 1] = string.format("%s: cannot read %s: %s",
        placement.where_text(e.source, e.source.file_at), e.path, (tostring(why):gsub("^[^:]*: ", "")))
    else
      f:close()
      local phase, err = M.load(e.path, { log = o.log })
      if not phase then
        problems[#problems + 1] = err
      else
        customs[#customs + 1] = { phase = phase, placement = e.placement, anchor = e.anchor, file = e.path,
          origin = placement.where_text(e.source, e.source.anchor_at) }
      end
    end
  end
end

-- The files of --phases DIR, each placed where it says.
local function load_dir(o, customs, problems)
  local files, err = placement.list_dir(o.dir)
  if not files then
    problems[#problems + 1] = err
    return
  end
  for _, path in ipairs(files) do
    local phase, declared = M.load(path, { log = o.log })
    if not phase then
      problems[#problems + 1] = declared
    elseif not declared then
      problems[#problems + 1] = string.format("%s: says nowhere where it goes: a file of --phases DIR declares "
        .. "one of before, after or replace = \"<phase id>\" in its phase table", path)
    else
      customs[#customs + 1] = { phase = phase, placement = declared.placement, anchor = declared.anchor,
        file = path, origin = path }
    end
  end
end

-- Loads every custom phase the run asks for. -> customs | nil, message (all problems)
-- o = {cluster = normalized cluster (its .phases), dir = --phases DIR or nil, log}
function M.load_all(o)
  local customs, problems = {}, {}
  load_entries(o, customs, problems)
  if o.dir then load_dir(o, customs, problems) end
  if #problems > 0 then return nil, table.concat(problems, "\n") end
  return customs
end

-- Everything a command does before its first pass: load the run's custom phases and place
-- them. -> phases, pipeline | nil, message. Touches no host.
function M.extend(phases, pipeline, o)
  local customs, err = M.load_all(o)
  if not customs then return nil, err end
  return M.assemble(phases, pipeline, customs)
end

return M
