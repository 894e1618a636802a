-- cargoship.os.selinux: SELinux probes (mode, semodule, booleans) and their parsers, for the policy phases.
--
-- PROBE prints key=value lines without root: mode from getenforce (absent: "absent"),
-- whether semodule exists (the policy phase needs it, engines.md §5.3).
-- boolean_probe(names) -> cmd printing `getsebool` lines;  parse_booleans(out) -> {name = true|false}
local shell = require "cargoship.shell"

local M = {}

M.PROBE = [[
if command -v getenforce >/dev/null 2>&1; then echo "mode=$(getenforce 2>/dev/null)"; else echo mode=absent; fi
for d in /usr/sbin /sbin /usr/bin /bin; do [ -x "$d/semodule" ] && { echo semodule=yes; break; }; done
true]]

local MODES = { Enforcing = "enforcing", Permissive = "permissive", Disabled = "disabled", absent = "absent" }

-- -> {mode = "enforcing"|"permissive"|"disabled"|"absent"|"unknown", semodule = bool,
--     enforcing = bool (what the policy phases require: Enforcing and semodule present)}
function M.parse(out)
  local s = { mode = "unknown", semodule = false }
  for line in (out or ""):gmatch("[^\n]+") do
    local k, v = line:match("^(%w+)=(.*)$")
    if k == "mode" then s.mode = MODES[v:match("^%s*(.-)%s*$")] or "unknown"
    elseif k == "semodule" then s.semodule = v == "yes" end
  end
  s.enforcing = s.mode == "enforcing"
  s.policy_applies = s.enforcing and s.semodule
  return s
end

function M.boolean_probe(names)
  if type(names) ~= "table" or #names == 0 then error("boolean_probe: boolean names are needed", 2) end
  for _, n in ipairs(names) do
    if not tostring(n):match("^[%w_]+$") then error(string.format("boolean_probe: %q is not a boolean name", n), 2) end
  end
  -- one getsebool per name: with several names it stops at the first unknown one
  local parts = {}
  for i, n in ipairs(names) do parts[i] = shell.fmt("getsebool %s 2>&1", n) end
  return "{ " .. table.concat(parts, "; ") .. "; } ; true"
end

-- "container_manage_cgroup --> on" lines; an unknown boolean ("Error getting active value
-- for x") is absent from the result, which the phase reports as an error.
function M.parse_booleans(out)
  local b = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local name, v = line:match("^([%w_]+)%s+%-%->%s+(%a+)")
    if name then b[name] = v == "on" end
  end
  return b
end

return M
