-- phases.lib.install: the records that install the engine files phases 15-17 staged on a host, where not in place.
--
-- M.actions(ctx, host) -> records: RPM hosts: the staged .rpm files not installed at their
-- version (dnf, local paths); APT hosts: the staged .deb files likewise (apt-get, local
-- paths, no update); binary hosts: each <target>.cargoship-staged moved onto its target,
-- then its links made. A file not staged yet (a dry run before 15-16 ran) is to be
-- installed. Reads the host (probes) to decide; writes nothing. Phases 20/22 and 25 use it.
-- The same probe reads the package manager's state (cargoship.facts.packages): a transaction
-- cut short is repaired first (the OS configurer's repair_packages), and staged packages
-- installed at their version but not pinned (a run interrupted between install and pin) are pinned.
local action = require "cargoship.action"
local engine = require "distros.engine"
local pm_state = require "cargoship.facts.packages"
local shell = require "cargoship.shell"
local uploads = require "cargoship.phases.lib.uploads"

local M = {}

-- Per staged package file: its name, its version, the version installed (or nothing). The
-- file is read once (one dpkg-deb or rpm run a file, not one a field: each unpacks its header).
-- rpm -q says "package X is not installed" on stdout: that is no version.
local QUERY = {
  rpm = "r=$(rpm -qp --qf '%%{NAME} %%{VERSION}-%%{RELEASE}' -- %s 2>/dev/null); n=${r%%%% *}; v=${r#* };"
    .. " h=; [ -n \"$n\" ] && { h=$(rpm -q --qf '%%{VERSION}-%%{RELEASE}' -- \"$n\" 2>/dev/null) || h=; };"
    .. " printf 'P %s %%s %%s %%s\\n' \"${n:--}\" \"${v:--}\" \"${h:--}\"",
  apt = "r=$(dpkg-deb -W --showformat='${Package} ${Version}' -- %s 2>/dev/null); n=${r%%%% *}; v=${r#* }; h=;"
    .. " [ -n \"$n\" ] && h=$(dpkg-query -W -f='${db:Status-Want}=${db:Status-Status}=${Version}' \"$n\" 2>/dev/null);"
    .. " w=-; case $h in hold=*) w=held;; esac; h=${h#*=};"
    .. " case $h in installed=*) h=${h#installed=};; *) h=;; esac;"
    .. " printf 'P %s %%s %%s %%s %%s\\n' \"${n:--}\" \"${v:--}\" \"${h:--}\" \"$w\"",
}

-- Records before the install: the repair of a transaction cut short. After: the pins the
-- host lacks on packages already at their version. Both through the host's OS configurer.
local function pm_records(host, state, unpinned)
  local before, after = {}, {}
  if state.interrupted then
    local cmd, why = host.os:repair_packages()
    if not cmd then error(host.name .. ": the package manager's last transaction was cut short ("
      .. table.concat(state.interrupted, "; ") .. ") and " .. tostring(why), 0) end
    before[1] = action.run { cmd = cmd, timeout = 1800, finish = 600,
      say = "repair the package manager's interrupted transaction (" .. table.concat(state.interrupted, "; ") .. ")" }
  end
  if #unpinned > 0 then
    local cmd = host.os:hold_packages(unpinned)
    if cmd then after[1] = action.run { cmd = cmd, finish = 60, say = "pin " .. table.concat(unpinned, ", ") } end
  end
  return before, after
end

local function package_staged(host, method, items)
  local lines = {}
  for i, it in ipairs(items) do lines[i] = shell.fmt(QUERY[method], it.path, tostring(i)) end
  lines[#lines + 1] = pm_state.command(method)
  local out, err = host:probe(table.concat(lines, "\n"))
  if not out then error(err, 0) end
  local state = pm_state.parse(out)
  local paths, names, unpinned = {}, {}, {}
  for i, it in ipairs(items) do
    local n, v, have, held = out:match("P " .. i .. " (%S+) (%S+) (%S+) ?(%S*)")
    -- a file not staged yet (a dry run before phases 15-16 ran) is to be installed
    if not n or n == "-" or have == "-" or have ~= v then
      paths[#paths + 1] = it.path
      if n and n ~= "-" then names[#names + 1] = n end
    elseif held ~= "held" and not (state.holds and state.holds[n]) and (method == "apt" or state.holds) then
      unpinned[#unpinned + 1] = n
    end
  end
  local before, after = pm_records(host, state, unpinned)
  if #paths == 0 then return nil, {}, before, after end
  return { method = method, paths = paths, names = #names > 0 and names or nil }, {}, before, after
end

local function binary_staged(host, items)
  local lines = {}
  for i, it in ipairs(items) do
    lines[#lines + 1] = shell.fmt("[ -f %s ] && echo S" .. i, it.path)
    for j, l in ipairs(it.symlinks) do
      lines[#lines + 1] = shell.fmt("printf 'L %%s %%s\\n' %s \"$(readlink -- %s)\"", i .. ":" .. j, l)
    end
  end
  lines[#lines + 1] = "true"
  local out, err = host:probe(table.concat(lines, "\n"))
  if not out then error(err, 0) end
  local moves, links = {}, {}
  for i, it in ipairs(items) do
    if out:find("S" .. i .. "\n", 1, true) then moves[#moves + 1] = { from = it.path, to = it.final } end
    for j, l in ipairs(it.symlinks) do
      local have = out:match("L " .. i .. ":" .. j .. " ([^\n]*)")
      if have ~= it.final then
        links[#links + 1] = action.run { cmd = shell.fmt("mkdir -p -- \"$(dirname -- %s)\" && ln -sfn -- %s %s", l,
          it.final, l), say = "link " .. l .. " -> " .. it.final }
      end
    end
  end
  return #moves > 0 and { method = "binary", moves = moves } or nil, links
end

function M.staged(ctx, host)
  local method = uploads.method(ctx, host)
  local items, err = uploads.items(ctx, host, "engine")
  if not items then error(host.name .. ": " .. tostring(err), 0) end
  if #items == 0 then return nil, {} end
  if method == "binary" then return binary_staged(host, items) end
  return package_staged(host, method, items)
end

function M.actions(ctx, host)
  local staged, links, before, after = M.staged(ctx, host)
  local acts = {}
  for _, a in ipairs(before or {}) do acts[#acts + 1] = a end
  if staged then
    local eng = ctx.engine or engine.for_package(ctx.distro)
    for _, a in ipairs(eng:install(engine.node_of(host), staged, host.os)) do acts[#acts + 1] = a end
  end
  for _, a in ipairs(links) do acts[#acts + 1] = a end
  for _, a in ipairs(after or {}) do acts[#acts + 1] = a end
  return acts
end

M.QUERY = QUERY   -- the probe line per staged file, for its spec
return M
