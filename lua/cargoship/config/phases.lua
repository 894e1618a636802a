-- cargoship.config.phases: `spec.phases`, the operator's own phases: a Lua file each, placed by a phase id.
--
-- Only the shape is checked here (loading a cluster file runs nothing): the file is not
-- read and the phase id it names is not looked up; cargoship.pipeline.custom does both
-- when a pipeline is assembled, naming the entry by the file:line:col kept in `source`.
local check = require "cargoship.config.check"
local errors = require "cargoship.config.errors"
local yaml = require "cargoship.yaml"

local M = {}

local join = errors.join

M.PLACEMENTS = { "before", "after", "replace" }
local FIELDS = { "file", "before", "after", "replace" }

-- Relative files are the cluster file's neighbours, wherever cargoship was started.
function M.resolve(cluster_file, file)
  if file:sub(1, 1) == "/" then return file end
  local dir = (cluster_file or ""):match("^(.*)/[^/]*$")
  if not dir then return file end
  return (dir == "" and "/" or dir .. "/") .. file
end

local function where(map, key, path)
  local line, col = yaml.where(map, key)
  if not line then line, col = yaml.where(map) end
  return { line = line, col = col, path = path }
end

local function entry(ctx, list, i, lpath)
  local ppath = join(lpath, i)
  local p = check.mapping(ctx, list, i, lpath, { required = true })
  if not p then return nil end
  check.fields(ctx, p, ppath, FIELDS)
  local file = check.string(ctx, p, "file", ppath, { required = true, word = true })
  local n, found = check.count_present(p, M.PLACEMENTS)
  if n == 0 then
    ctx.errs:at_node(p, ppath, "missing placement: give one of " .. check.quoted_list(M.PLACEMENTS)
      .. " with the id of a phase (e.g. after: validate_hosts)")
  elseif n > 1 then
    ctx.errs:at_node(p, ppath, "a phase has one placement, got " .. check.quoted_list(found))
  end
  local placement, anchor
  for _, key in ipairs(M.PLACEMENTS) do
    local v = check.string(ctx, p, key, ppath, { nonempty = true })
    if v and not v:match("^[a-z][a-z0-9_]*$") then
      ctx.errs:at_value(p, key, join(ppath, key),
        "expected a phase id (snake_case, like \"validate_hosts\"), got " .. errors.describe(v))
    elseif v then
      placement, anchor = key, v
    end
  end
  if not file or n ~= 1 or not placement then return nil end
  local line, col = yaml.where(p)
  return {
    file = file,
    path = M.resolve(ctx.file, file),
    placement = placement,
    anchor = anchor,
    source = { file = ctx.file, line = line, col = col, path = ppath,
      file_at = where(p, "file", join(ppath, "file")),
      anchor_at = where(p, placement, join(ppath, placement)) },
  }
end

-- spec.phases -> { {file, path, placement, anchor, source}, ... } in file order
function M.decode(ctx, spec, path)
  local out = {}
  local list = check.sequence(ctx, spec, "phases", path)
  if not list then return out end
  local lpath = join(path, "phases")
  for i = 1, #list do
    local e = entry(ctx, list, i, lpath)
    if e then out[#out + 1] = e end
  end
  return out
end

return M
