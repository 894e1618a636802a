-- tests/lint/check_layers.lua: every module's literal requires, and each edge tests/lint/layers.lua forbids.
--
-- M.modules(root) -> {name = "cargoship.phases.connect", path = "lua/cargoship/phases/connect.lua"}, ...
-- M.runtime_families(root) -> {"cargoship.loop", ...} from runtime/*.c's luaopen_cargoship_<family>
-- M.requires(text) -> {{name = "cargoship.loop", line = 12}, ...}: literal requires only
-- M.check(rules, modules, runtime, read) -> list of "path:line: A (layer) requires B (layer): why"
--   read(path) -> text; a spec can hand in a planted file through it.
local M = {}

local function sh_lines(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- lua/cargoship/a/b.lua -> cargoship.a.b; .../init.lua -> its directory; distros/x/init.lua -> distros.x
function M.module_name(path)
  local rel = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", "")
  return (rel:gsub("/", "."))
end

function M.modules(root)
  local list = {}
  for _, path in ipairs(sh_lines("cd '" .. root .. "' && find lua distros -name '*.lua' | sort")) do
    list[#list + 1] = { name = M.module_name(path), path = path }
  end
  return list
end

function M.runtime_families(root)
  local out, seen = {}, {}
  for _, line in ipairs(sh_lines("cd '" .. root .. "' && grep -ho 'luaopen_cargoship_[a-z0-9_]*' runtime/*.c")) do
    local fam = line:match("luaopen_cargoship_([a-z0-9_]+)")
    if fam and not seen[fam] then
      seen[fam] = true
      out[#out + 1] = "cargoship." .. fam
    end
  end
  table.sort(out)
  return out
end

function M.requires(text)
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    for name in code:gmatch("require%s*%(?%s*[\"']([^\"']+)[\"']%s*%)?") do
      -- `require("distros." .. t)` has a literal that is only a prefix: not an edge
      if not name:match("%.$") then out[#out + 1] = { name = name, line = n } end
    end
  end
  return out
end

local function set(list)
  local s = {}
  for _, v in ipairs(list or {}) do s[v] = true end
  return s
end

-- The layer of a module name.
function M.layer_of(rules, runtime, name)
  for _, l in ipairs(rules.layers) do
    if l.runtime then
      if runtime[name] then return l.name end
    else
      for _, pat in ipairs(l.match) do
        if name:match(pat) then return l.name end
      end
    end
  end
  return "other"
end

local function verdict(rule, from, to, name)
  if rule.layer and rule.layer ~= from then return nil end
  if rule.allow then
    if not set(rule.allow)[to] and not set(rule.modules)[name] then return rule.why end
  end
  if rule.deny and set(rule.deny)[to] and not set(rule.except)[from] then return rule.why end
  return nil
end

function M.check(rules, modules, runtime_list, read)
  local runtime = set(runtime_list)
  local bad = {}
  for _, m in ipairs(modules) do
    local from = M.layer_of(rules, runtime, m.name)
    for _, r in ipairs(M.requires(read(m.path))) do
      local to = M.layer_of(rules, runtime, r.name)
      for _, rule in ipairs(rules.rules) do
        local why = verdict(rule, from, to, r.name)
        if why then
          bad[#bad + 1] = string.format("%s:%d: %s (%s) requires %s (%s): %s", m.path, r.line, m.name, from,
            r.name, to, why)
          break
        end
      end
    end
  end
  return bad
end

return M
