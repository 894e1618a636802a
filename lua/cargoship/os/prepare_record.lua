-- cargoship.os.prepare_record: what phase 8 changed in /etc/environment and modules-load.d, kept for reset to undo.
--
-- Nothing else on a host says which environment keys and module files were cargoship's (a
-- key may have been there with another value, a module file may be the distribution's), so
-- phase 8 records, before it writes, in /var/lib/cargoship/prepare (dir 0700, files 0600):
--   environment  "wrote KEY LINE": the line it put in /etc/environment for KEY, and
--                "was KEY LINE": each line KEY had before (none: the key was absent);
--                "created" when the file itself was absent
--   modules      "created NAME": a modules-load.d/NAME.conf that was absent when it wrote it;
--                "created-dir" when it made modules-load.d itself (a runit host has none)
-- A key written again keeps its first "was" while the file still holds what the record says
-- cargoship wrote; one changed by someone since gets what it held then. Reset puts back the
-- lines of each key whose line is still the one cargoship wrote, and removes each module file
-- still holding what cargoship wrote; the records go with /var/lib/cargoship afterwards.
-- Pure: text in, text and action records out.
local action = require "cargoship.action"
local edit = require "cargoship.os.edit"
local shell = require "cargoship.shell"

local M = {}

M.DIR = "/var/lib/cargoship/prepare"
M.ENV = M.DIR .. "/environment"
M.MODULES = M.DIR .. "/modules"

local ENV_HEADER = "# cargoship: the /etc/environment lines phase 8 wrote, and each key's lines before them\n"
local MOD_HEADER = "# cargoship: the modules-load.d files phase 8 created\n"

local function lines_of(text)
  local out = {}
  for line in (text or ""):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  local tail = (text or ""):match("([^\n]+)$")
  if tail then out[#out + 1] = tail end
  return out
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- The variable an environment line sets, as cargoship.os.edit.environment reads it.
local function key_of(line)
  return line:match("^%s*export%s+([%a_][%w_]*)=") or line:match("^%s*([%a_][%w_]*)=")
end

local function by_key(text)
  local out = {}
  for _, line in ipairs(lines_of(text)) do
    local k = key_of(line)
    if k then out[k] = out[k] or {}; table.insert(out[k], line) end
  end
  return out
end

-- record text | nil -> {created = bool, keys = {KEY = {wrote = line, was = {lines}}}}
function M.parse_env(text)
  local rec = { created = false, keys = {} }
  for _, line in ipairs(lines_of(text)) do
    if line == "created" then rec.created = true end
    local what, k, rest = line:match("^(%l+) ([%a_][%w_]*) (.*)$")
    if what == "wrote" then
      rec.keys[k] = rec.keys[k] or { was = {} }
      rec.keys[k].wrote = rest
    elseif what == "was" then
      rec.keys[k] = rec.keys[k] or { was = {} }
      table.insert(rec.keys[k].was, rest)
    end
  end
  return rec
end

-- The record after phase 8 turns /etc/environment from `current` (nil: absent) into `new`.
function M.env_record(old_text, current, new)
  local rec = M.parse_env(old_text)
  local cur, now = by_key(current), by_key(new)
  for _, k in ipairs(sorted_keys(now)) do
    local c, n = cur[k] or {}, now[k][1]
    if not (#c == 1 and c[1] == n) then
      local old = rec.keys[k]
      local kept = old and old.wrote and #c == 1 and c[1] == old.wrote
      rec.keys[k] = { wrote = n, was = kept and old.was or c }
    end
  end
  local out = { ENV_HEADER }
  if rec.created or current == nil then out[#out + 1] = "created\n" end
  for _, k in ipairs(sorted_keys(rec.keys)) do
    local e = rec.keys[k]
    if e.wrote then
      out[#out + 1] = "wrote " .. k .. " " .. e.wrote .. "\n"
      for _, w in ipairs(e.was) do out[#out + 1] = "was " .. k .. " " .. w .. "\n" end
    end
  end
  return table.concat(out)
end

local function record_write(path, old, text, what)
  if text == old then return {} end
  return { action.write { path = path, content = text, mode = "0600", dir_mode = "0700",
                          say = "record " .. what .. " in " .. path } }
end

-- The record's write (none when it would not change), planned before the environment's.
function M.env_actions(old_text, current, new)
  return record_write(M.ENV, old_text, M.env_record(old_text, current, new), "the environment lines it changes")
end

-- record text | nil -> {name = true}, made the directory?
function M.parse_modules(text)
  local names, dir = {}, false
  for _, line in ipairs(lines_of(text)) do
    local n = line:match("^created ([%w_-]+)$")
    if n then names[n] = true end
    if line == "created-dir" then dir = true end
  end
  return names, dir
end

-- wanted: the module names; have: {name = the file's content}, none where there is no file (those
-- phase 8 creates); dir: it makes the directory. Nothing created: nothing to record.
function M.modules_actions(old_text, wanted, have, dir)
  local names, had_dir = M.parse_modules(old_text)
  local created = false
  for _, n in ipairs(wanted) do
    if have[n] == nil then names[n], created = true, true end
  end
  if not created then return {} end
  local out = { MOD_HEADER }
  if dir or had_dir then out[#out + 1] = "created-dir\n" end
  for _, n in ipairs(sorted_keys(names)) do out[#out + 1] = "created " .. n .. "\n" end
  return record_write(M.MODULES, old_text, table.concat(out), "the module files it creates")
end

-- Reset's side.
local function cat(path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

function M.removal_probes(paths)
  return { prep_env_record = cat(M.ENV), prep_modules_record = cat(M.MODULES),
           prep_environment = cat(paths.environment),
           prep_modules_dir = shell.fmt("test -d %s", paths.modules_load_dir) }
end

local function answer(res, key, path)
  local r = res[key]
  if not r or r.code == 44 then return nil end
  if r.code ~= 0 then return nil, path .. ": cannot read (exit " .. tostring(r.code) .. ")" end
  return r.out
end

-- The module files to look at, in a second round trip (names from the record): {key = cmd}, names.
function M.module_probes(paths, res)
  local text = answer(res, "prep_modules_record", M.MODULES)
  local p, names = {}, sorted_keys(M.parse_modules(text))
  for i, n in ipairs(names) do p["prep_module_" .. i] = cat(paths.modules_load_dir .. "/" .. n .. ".conf") end
  return p, names
end

-- Probe answers (mods: the module files' answers, names: module_probes') -> records | nil, why
function M.removal(paths, res, mods, names)
  local out = {}
  local _, merr = answer(res, "prep_modules_record", M.MODULES)
  if merr then return nil, merr end
  local text, err = answer(res, "prep_env_record", M.ENV)
  if err then return nil, err end
  local current
  current, err = answer(res, "prep_environment", paths.environment)
  if err then return nil, err end
  if text and current then
    local rec = M.parse_env(text)
    local kept, done = {}, {}
    for _, line in ipairs(lines_of(current)) do
      local k = key_of(line)
      local e = k and rec.keys[k]
      if e and not done[k] and line == e.wrote then
        done[k] = true
        for _, w in ipairs(e.was) do kept[#kept + 1] = w end
      else
        kept[#kept + 1] = line
      end
    end
    local content = #kept > 0 and table.concat(kept, "\n") .. "\n" or ""
    if rec.created and content == "" then
      out[#out + 1] = action.remove { path = paths.environment, say = "remove " .. paths.environment
        .. " (cargoship created it; nothing else is in it)" }
    elseif content ~= current then
      out[#out + 1] = action.write { path = paths.environment, content = content, mode = "0644",
        say = "put back the " .. paths.environment .. " lines cargoship changed" }
    end
  end
  for i, n in ipairs(names or {}) do
    local have
    have, err = answer(mods or {}, "prep_module_" .. i, paths.modules_load_dir .. "/" .. n .. ".conf")
    if err then return nil, err end
    if have and have == edit.module_file(n) then
      out[#out + 1] = action.remove { path = paths.modules_load_dir .. "/" .. n .. ".conf" }
    end
  end
  -- the directory it made, once empty (a file someone else put there keeps it)
  local _, dir = M.parse_modules(answer(res, "prep_modules_record", M.MODULES))
  if dir and res.prep_modules_dir and res.prep_modules_dir.code == 0 then
    out[#out + 1] = action.run { cmd = shell.fmt("rmdir -- %s 2>/dev/null || true", paths.modules_load_dir),
      say = "remove " .. paths.modules_load_dir .. " if empty (cargoship made it)" }
  end
  return out
end

return M
