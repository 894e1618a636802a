-- cargoship.os.selinux_policy: the SELinux policy phase's reads and records (modules, booleans, contexts, state).
--
-- probes(want) -> {key = command}, one round trip; decide(want, res) -> records | {}, why
-- (skipped: not Enforcing or no semodule) | nil, why (the host fails); record(old, want,
-- current) -> the state record's text; restore_root(regex) -> the directory to relabel.
-- REMOVAL_PROBES, removal(res) -> records undoing the state record (reset, engines.md §5.3).
-- want = cargoship.package.os_config's selinux section. The order of the records is the phase's
-- documented order (state record, modules, booleans, contexts).
local cjson = require "cjson"
local action = require "cargoship.action"
local json = require "cargoship.json"
local selinux = require "cargoship.os.selinux"
local shell = require "cargoship.shell"

local M = {}

M.DIR = "/var/lib/cargoship/selinux"
M.STATE = M.DIR .. "/cargoship-state.json"

local ABSENT = 44

local function cat(path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

-- fileType words of the cluster file -> semanage's -f letter and how `-l` spells it
M.FILE_TYPES = {
  all = { "a", "all files" }, file = { "f", "regular file" }, dir = { "d", "directory" },
  symlink = { "l", "symbolic link" }, pipe = { "p", "named pipe" }, socket = { "s", "socket" },
  block = { "b", "block device" }, char = { "c", "character device" },
}


-- The directory restorecon relabels for a context's path regex, or nil (never /).
function M.restore_root(regex)
  local lit = regex:match("^[^%(%[%.%*%+%?%^%$\\|{]*")
  local nextc = regex:sub(#lit + 1, #lit + 1)
  local dir
  if nextc == "" or nextc == "(" or lit:sub(-1) == "/" then
    dir = lit:gsub("/+$", "")
  else
    dir = lit:match("^(.*)/[^/]*$")
  end
  if not dir or dir == "" or dir == "/" then return nil end
  return dir
end

-- `semodule -lfull` lines "400 name cil" -> {[name] = {priority = {..}}}
function M.parse_modules(out)
  local mods = {}
  for prio, name in (out or ""):gmatch("(%d+)%s+(%S+)[^\n]*") do
    mods[name] = mods[name] or {}
    mods[name][tonumber(prio)] = true
  end
  return mods
end

-- `semanage fcontext -l -C` lines -> {[path .. "\0" .. file type words] = type}
function M.parse_fcontexts(out)
  local have = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local path, rest = line:match("^(/%S*)%s+(.-)%s*$")
    if path then
      local words, ctx = rest:match("^(.-)%s+(%S+:%S+:%S+:%S+)$")
      local t = ctx and ctx:match("^[^:]+:[^:]+:([^:]+):")
      if t then have[path .. "\0" .. words] = t end
    end
  end
  return have
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

function M.probes(want)
  local p = {
    selinux = selinux.PROBE,
    state = cat(M.STATE),
    dir = shell.fmt("test -d %s", M.DIR),
  }
  if #want.modules > 0 then p.modules = "semodule -lfull" end
  for i, m in ipairs(want.modules) do p["cil_" .. i] = cat(M.DIR .. "/" .. m.name .. ".cil") end
  local names = sorted_keys(want.booleans)
  if #names > 0 then p.booleans = selinux.boolean_probe(names) end
  if #want.file_contexts > 0 then p.fcontexts = "semanage fcontext -l -C" end
  return p
end

-- The state record's new text from the old one and the values read before any change.
function M.record(old_text, want, current)
  local old = {}
  if old_text then
    local ok, v = pcall(cjson.decode, old_text)
    if ok and type(v) == "table" then old = v end
  end
  local booleans = {}
  for k, v in pairs(type(old.booleans) == "table" and old.booleans or {}) do
    if type(v) == "boolean" then booleans[k] = v end
  end
  for k in pairs(want.booleans) do
    if booleans[k] == nil then booleans[k] = current[k] end
  end
  local modules, contexts = json.array({}), json.array({})
  for i, m in ipairs(want.modules) do modules[i] = { name = m.name, priority = m.priority } end
  for i, c in ipairs(want.file_contexts) do contexts[i] = { path = c.path, type = c.type, file_type = c.file_type } end
  return json.encode({ booleans = booleans, modules = modules, file_contexts = contexts }) .. "\n"
end

-- Probe answers -> records | nil, why (pure, for the fixture specs).
function M.decide(want, res)
  local se = selinux.parse(res.selinux and res.selinux.out)
  if not se.policy_applies then return {}, "SELinux is " .. se.mode .. (se.semodule and "" or " (no semodule)") end
  local current = selinux.parse_booleans(res.booleans and res.booleans.out)
  for _, k in ipairs(sorted_keys(want.booleans)) do
    if current[k] == nil then return nil, "SELinux boolean " .. k .. " is not defined by the host's policy" end
  end
  local out = {}
  local state = res.state.code ~= ABSENT and res.state.out or nil
  local record = M.record(state, want, current)
  if record ~= state then
    out[#out + 1] = action.write { path = M.STATE, content = record, mode = "0600", dir_mode = "0700",
                                   say = "record the SELinux state in " .. M.STATE }
  end
  local listed = M.parse_modules(res.modules and res.modules.out)
  for i, m in ipairs(want.modules) do
    local file = M.DIR .. "/" .. m.name .. ".cil"
    local have = res["cil_" .. i]
    local same = have and have.code == 0 and have.out == m.cil
    if not same then out[#out + 1] = action.write { path = file, content = m.cil, mode = "0600" } end
    if not same or not (listed[m.name] and listed[m.name][m.priority]) then
      out[#out + 1] = action.run { cmd = shell.fmt("semodule -X %s -i %s", tostring(m.priority), file),
                                   say = string.format("install SELinux module %s at priority %d", m.name, m.priority) }
    end
  end
  for _, k in ipairs(sorted_keys(want.booleans)) do
    if current[k] ~= want.booleans[k] then
      local v = want.booleans[k] and "on" or "off"
      out[#out + 1] = action.run { cmd = shell.fmt("setsebool -P %s %s", k, v),
                                   say = string.format("set SELinux boolean %s %s", k, v) }
    end
  end
  local have = M.parse_fcontexts(res.fcontexts and res.fcontexts.out)
  for _, c in ipairs(want.file_contexts) do
    local ft = M.FILE_TYPES[c.file_type]
    if have[c.path .. "\0" .. ft[2]] ~= c.type then
      local args = shell.fmt("-t %s -f %s %s", c.type, ft[1], c.path)
      local cmd = "semanage fcontext -a " .. args .. " 2>/dev/null || semanage fcontext -m " .. args
      out[#out + 1] = action.run { cmd = cmd, say = string.format("label %s as %s", c.path, c.type) }
      local root = M.restore_root(c.path)
      if root then
        out[#out + 1] = action.run { cmd = shell.fmt("if [ -e %s ]; then restorecon -R -F %s; fi", root, root),
                                     say = "relabel " .. root }
      end
    end
  end
  return out
end

-- ---- reset: the inverse of decide, from the state record alone (reset has no package) ----

-- Read in one round trip: the state record and whether the directory exists at all.
M.REMOVAL_PROBES = { state = cat(M.STATE), dir = shell.fmt("test -d %s", M.DIR) }

-- Every step only warns (engines.md §5.3: reset can be re-run): a command that fails says so
-- on stderr and the record goes on. Contexts first (they name types the modules define),
-- then booleans back to their recorded value, the modules at their priority, then the files.
local function warn_only(cmd, what)
  return "{ " .. cmd .. "; } || echo " .. shell.quote("warning: " .. what .. " failed") .. " >&2"
end

-- res: REMOVAL_PROBES' answers -> records ({} when cargoship left no SELinux state)
function M.removal(res)
  local out = {}
  if not (res.dir and res.dir.code == 0) then return out end
  local ok, st = false, nil
  if res.state and res.state.code == 0 then ok, st = pcall(cjson.decode, res.state.out) end
  st = ok and type(st) == "table" and st or {}
  for _, c in ipairs(type(st.file_contexts) == "table" and st.file_contexts or {}) do
    local ft = M.FILE_TYPES[c.file_type] or M.FILE_TYPES.all
    if type(c.path) == "string" then
      local cmd = shell.fmt("semanage fcontext -d -f %s %s", ft[1], c.path)
      local root = M.restore_root(c.path)
      if root then cmd = cmd .. shell.fmt("; if [ -e %s ]; then restorecon -R -F %s; fi", root, root) end
      out[#out + 1] = action.run { cmd = warn_only(cmd, "removing the label of " .. c.path),
                                   say = "remove the SELinux label of " .. c.path }
    end
  end
  for _, k in ipairs(sorted_keys(type(st.booleans) == "table" and st.booleans or {})) do
    local v = st.booleans[k]
    if type(v) == "boolean" and k:match("^[%w_]+$") then
      local word = v and "on" or "off"
      out[#out + 1] = action.run { cmd = warn_only(shell.fmt("setsebool -P %s %s", k, word), "setsebool " .. k),
                                   say = string.format("restore SELinux boolean %s to %s", k, word) }
    end
  end
  for _, m in ipairs(type(st.modules) == "table" and st.modules or {}) do
    if type(m.name) == "string" and math.tointeger(m.priority) then
      out[#out + 1] = action.run {
        cmd = warn_only(shell.fmt("semodule -X %s -r %s", tostring(math.tointeger(m.priority)), m.name),
          "removing module " .. m.name),
        say = string.format("remove SELinux module %s (priority %d)", m.name, math.tointeger(m.priority)) }
    end
  end
  out[#out + 1] = action.remove { path = M.DIR, recursive = true }
  return out
end

return M
