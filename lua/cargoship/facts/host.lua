-- cargoship.facts.host: the host probes phases share (file state, held packages, services), in one round trip.
--
-- M.gather(host, {files = {path, ...}, dirs = {path, ...}, depth = {[path] = n}?, holds = true,
--                  services = {name, ...}})
--   -> {files = {[path] = file}, dirs = {[path] = {name, ...} | false}, holds = {[name] = true},
--       services = {[name] = {active = bool}}} | nil, why
--   One host:probes call (one SSH round trip) whatever is asked; what is not asked is absent.
-- file = {exists = false} | {exists = true, type = "file"|"dir"|"link"|"other", mode = "0644",
--         owner = "root", group = "root", sha256 = hex | nil (not a regular file)}
--   A symlink is reported as itself (type "link"), not followed: a phase replacing one must know.
-- dirs: what sits directly inside each directory (no recursion) but directories, by name,
--   sorted; false when the directory is absent. depth[path] = n: down to n levels, named by
--   their path below it ("docker.io/hosts.toml").
-- holds: the packages the package manager will not move: `apt-mark showhold`, `dnf`/`yum
--   versionlock list`, `zypper locks`, whichever the host has.
-- services: through the host's service manager (host.os:service("is_active", name)).
-- M.drift(file, want) -> nil when the host's file is what `want` ({content, mode?, owner?,
--   group?}, a write record's fields) describes, else why not: "missing", "not a regular
--   file", "different content", "mode 0640, not 0600", "owner a:b, not root:root": the same
--   test host:apply's write makes, asked before the plan instead of during the run.
-- The command builders and parsers are pure, for fixtures; every path and name is quoted.
local digest = require "cargoship.digest"
local shell = require "cargoship.shell"

local M = {}

-- One line per path, by index (a path may hold any byte but NUL; an index cannot confuse the
-- parser): "<i> N" missing, "<i> E" unreadable, "<i> Y <type> <mode> <owner> <group> <sha256|->".
-- The hash reads stdin, so sha256sum never escapes an odd file name in its output.
local FILE_FN = table.concat({
  "cs_file() {",
  '  if [ -L "$1" ]; then t=link; elif [ -f "$1" ]; then t=file; elif [ -d "$1" ]; then t=dir;',
  '  elif [ -e "$1" ]; then t=other; else echo "$2 N"; return 0; fi',
  [[  m=$(stat -c '%a %U %G' -- "$1") || { echo "$2 E"; return 0; }]],
  '  s=-; if [ "$t" = file ]; then s=$(sha256sum < "$1") || { echo "$2 E"; return 0; }; s=${s%% *}; fi',
  '  echo "$2 Y $t $m $s"',
  "}",
}, "\n")

function M.files_command(paths)
  local out = { FILE_FN }
  for i, p in ipairs(paths) do
    if type(p) ~= "string" or p == "" then error("facts.host: path " .. i .. " must be a non-empty string", 2) end
    out[#out + 1] = shell.fmt("cs_file %s " .. i, p)
  end
  return table.concat(out, "\n")
end

local function octal(m)
  if #m < 4 then m = string.rep("0", 4 - #m) .. m end
  return m
end

-- -> {[path] = file}; a path without a line (the command was cut short) is absent.
function M.parse_files(out, paths)
  local files = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local i, rest = line:match("^(%d+) (.*)$")
    local path = i and paths[tonumber(i)]
    if path then
      if rest == "N" then files[path] = { exists = false }
      elseif rest == "E" then files[path] = { exists = true, unreadable = true }
      else
        local t, mode, owner, group, sum = rest:match("^Y (%S+) (%d+) (%S+) (%S+) (%S+)$")
        if t then
          files[path] = { exists = true, type = t, mode = octal(mode), owner = owner, group = group,
            sha256 = sum:match("^%x+$") and #sum == 64 and sum or nil }
        end
      end
    end
  end
  return files
end

-- One line per entry: "<i> <name>"; "<i> -" opens a directory that exists. A name holding a
-- newline is left out: the parser reads lines.
function M.dirs_command(paths, depth)
  local out = {}
  for i, p in ipairs(paths) do
    if type(p) ~= "string" or p == "" then error("facts.host: dir " .. i .. " must be a non-empty string", 2) end
    local d = depth and depth[p] or 1
    if math.type(d) ~= "integer" or d < 1 then error("facts.host: depth of " .. p .. " must be an integer >= 1", 2) end
    out[#out + 1] = shell.fmt("if [ -d %s ]; then echo %s; find %s -mindepth 1 -maxdepth %s ! -type d "
      .. "! -name %s -printf %s; fi", p, i .. " -", p, tostring(d), "*\n*", i .. " %P\\n")
  end
  out[#out + 1] = "true"
  return table.concat(out, "\n")
end

function M.parse_dirs(out, paths)
  local dirs = {}
  for _, p in ipairs(paths) do dirs[p] = false end
  for line in (out or ""):gmatch("[^\n]+") do
    local i, name = line:match("^(%d+) (.+)$")
    local p = i and paths[tonumber(i)]
    if p then
      if name == "-" then dirs[p] = dirs[p] or {}
      elseif dirs[p] then table.insert(dirs[p], name) end
    end
  end
  for _, list in pairs(dirs) do
    if list then table.sort(list) end
  end
  return dirs
end

-- The versionlock plugin's list, read from the file its config names: `dnf versionlock list`
-- would answer the same but writes dnf's logs and cache, and a read may write nothing (a
-- converged re-run changes no byte). Prints "#rpm" and the entries, or "#rpm-nolock" where
-- neither dnf's nor yum's plugin is configured. dnf5 keeps its locks elsewhere (not read).
M.VERSIONLOCK_CONFS = { "/etc/dnf/plugins/versionlock.conf", "/etc/yum/pluginconf.d/versionlock.conf" }
function M.rpm_locks(confs)
  local quoted = {}
  for i, c in ipairs(confs) do quoted[i] = shell.quote(c) end
  return table.concat({
    "cs_lc=; for cs_c in " .. table.concat(quoted, " ") .. "; do",
    '  if [ -e "$cs_c" ]; then cs_lc=$cs_c; break; fi; done',
    'if [ -n "$cs_lc" ]; then',
    "  cs_ll=$(sed -n 's/^[[:space:]]*locklist[[:space:]]*=[[:space:]]*//p' \"$cs_lc\" | tail -n 1)",
    "  echo '#rpm'",
    '  if [ -n "$cs_ll" ] && [ -e "$cs_ll" ]; then',
    '    grep -v -e \'^[[:space:]]*#\' -e \'^[[:space:]]*$\' "$cs_ll" || true; fi',
    "else echo '#rpm-nolock'; fi",
  }, "\n")
end
M.RPM_LOCKS = M.rpm_locks(M.VERSIONLOCK_CONFS)

M.HOLDS_COMMAND = table.concat({
  "if command -v apt-mark >/dev/null 2>&1; then echo '#apt'; apt-mark showhold",
  "elif command -v dnf >/dev/null 2>&1 || command -v yum >/dev/null 2>&1; then " .. M.RPM_LOCKS,
  "elif command -v zypper >/dev/null 2>&1; then echo '#zypper'; zypper -q locks",
  "fi; true",
}, "\n")

-- A versionlock entry is "[epoch:]name-[epoch:]version-release[.arch|.*]" (dnf4, yum) or,
-- with dnf5, a block opening "Package name: name".
local function rpm_name(line)
  local named = line:match("^%s*Package name:%s*(%S+)")
  if named then return named end
  if line:match("^%s*#") or line:match(":%s") or not line:match("%-") then return nil end
  local body = line:match("^%s*(%S+)%s*$")
  if not body then return nil end
  body = body:gsub("^%d+:", "")
  return body:match("^(.-)%-%d*:?[^%-]+%-[^%-]+$")
end

-- -> {[name] = true}
function M.parse_holds(out)
  local holds, kind = {}, nil
  for line in (out or ""):gmatch("[^\n]+") do
    local k = line:match("^#(%a+)$")
    if k then kind = k
    elseif kind == "apt" then
      local name = line:match("^%s*(%S+)%s*$")
      if name then holds[name] = true end
    elseif kind == "rpm" then
      local name = rpm_name(line)
      if name then holds[name] = true end
    elseif kind == "zypper" then
      -- "1 | kubelet | package | (any)": the table's second column, past its header
      local name = line:match("^%s*%d+%s*|%s*([^|%s]+)%s*|")
      if name then holds[name] = true end
    end
  end
  return holds
end

-- One line per service, by index: "<i> 0" running, "<i> <status>" not.
function M.services_command(os, names)
  if not os then error("facts.host: services need the host's OS configurer (host.os)", 2) end
  local out = {}
  for i, name in ipairs(names) do
    local cmd, why = os:service("is_active", name)
    if not cmd then return nil, why end
    out[#out + 1] = "( " .. cmd .. " ) >/dev/null 2>&1; echo " .. i .. ' "$?"'
  end
  return table.concat(out, "\n")
end

function M.parse_services(out, names)
  local services = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local i, status = line:match("^(%d+) (%d+)$")
    local name = i and names[tonumber(i)]
    if name then services[name] = { active = status == "0" } end
  end
  return services
end

function M.drift(file, want)
  if not file or not file.exists then return "missing" end
  if file.unreadable then return "unreadable" end
  if file.type ~= "file" then return "not a regular file (" .. tostring(file.type) .. ")" end
  if file.sha256 ~= digest.sha256(want.content) then return "different content" end
  if want.mode and octal(tostring(want.mode)) ~= file.mode then
    return "mode " .. tostring(file.mode) .. ", not " .. octal(tostring(want.mode))
  end
  if (want.owner and want.owner ~= file.owner) or (want.group and want.group ~= file.group) then
    return string.format("owner %s:%s, not %s:%s", tostring(file.owner), tostring(file.group),
      want.owner or file.owner, want.group or file.group)
  end
  return nil
end

function M.gather(host, want)
  local cmds = {}
  if want.files and #want.files > 0 then cmds.files = M.files_command(want.files) end
  if want.dirs and #want.dirs > 0 then cmds.dirs = M.dirs_command(want.dirs, want.depth) end
  if want.holds then cmds.holds = M.HOLDS_COMMAND end
  if want.services and #want.services > 0 then
    local cmd, why = M.services_command(host.os, want.services)
    if not cmd then return nil, host.name .. ": " .. tostring(why) end
    cmds.services = cmd
  end
  local facts = {}
  if next(cmds) == nil then return facts end
  local res, err = host:probes(cmds)
  if not res then return nil, err end
  if res.files then facts.files = M.parse_files(res.files.out, want.files) end
  if res.dirs then facts.dirs = M.parse_dirs(res.dirs.out, want.dirs) end
  if res.holds then facts.holds = M.parse_holds(res.holds.out) end
  if res.services then facts.services = M.parse_services(res.services.out, want.services) end
  return facts
end

return M
