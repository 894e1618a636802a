-- cargoship.facts.predict: probes that foretell what a run would fail on (packages, disk, join address, ports, kernel).
--
-- The dry run (and the plan of a real run) asks these while failing is still cheap; the
-- phases judge the answers (phases.validate_hosts). Commands are built from plain data the
-- phases hand in, parsers and judges are pure, so fixture specs drive them.
--
-- M.probes(want) -> {predict_<key> = cmd}: for host:probes, joined to gather_facts' batch.
--   want.packages = {method = "apt"|"rpm", files = {{path, size, package?, depends?, identity?,
--                    identity_cmd?}} (identity: what identity_cmd prints for the right file),
--                    staged = cmd (the package manager's simulation of the files where they
--                    are), meta = cmd | nil (its simulation of their declared dependencies
--                    when the files are not on the host yet), tool = "apt-get -s ...",
--                    requires = rpm: the requirements meta asks about ({name, flags, version,
--                    text, by}, cargoship.facts.rpm_evr.outside; os.rhel simulate_requires' lines)}
--   want.disk     = {{path, size}}: every upload target
--   want.ports    = {n, ...}: TCP ports the engine listens on; want.engine_active = cmd (the
--                   engine's service is up here already, running or starting: its ports are
--                   its own)
--   want.kernel   = {module, ...}; want.sysctl = {key, ...}
-- M.join_probe(target) -> cmd: target = {host, port, address? (resolution skipped: the run
--   writes the name into /etc/hosts itself), name}: resolve, then one TCP connect (2 s each).
-- M.parse(res) -> facts: {packages = {mode, lines, rc}, disk = {dirs, sizes}, ports, kernel, sysctl}
-- M.problems(facts, want) -> {"sentence", ...}: what would fail on that host, each naming
--   the cause (the missing dependency, the directory and the bytes, the port, the module).
-- M.join_problem(out, target) -> sentence | nil (target.firewalled: a cluster host whose firewall
--   this run opens, so a rejection or no answer is not foretold)
local rpm = require "cargoship.facts.rpm_evr"
local shell = require "cargoship.shell"

local M = {}

local function dirname(p) return p:match("^(.*)/[^/]*$") or "/" end

-- A staged file is on the host when a file of its size is at its target (and, where the
-- package format carries one, its identity matches: an rpm's header digest): the upload phases
-- compare hashes, but hashing every package on every host costs the dry run seconds.
local function packages_cmd(p)
  local lines = { "cs_on=1" }
  for _, f in ipairs(p.files) do
    local same = shell.fmt('[ "$(stat -c %%s -- %s 2>/dev/null)" = %s ]', f.path, tostring(f.size))
    -- identity_cmd: a command the OS layer built (its words quoted there)
    if f.identity and f.identity_cmd then
      same = same .. ' && [ "$(' .. f.identity_cmd .. ')" = ' .. shell.quote(f.identity) .. " ]"
    end
    lines[#lines + 1] = same .. " || cs_on="
  end
  local otherwise = p.meta and ("echo '#meta'; " .. p.meta .. " 2>&1") or "echo '#none'; true"
  lines[#lines + 1] = "if [ -n \"$cs_on\" ]; then echo '#staged'; " .. p.staged .. " 2>&1; else "
    .. otherwise .. "; fi; echo \"#rc $?\""
  return table.concat(lines, "\n")
end

-- One line per directory, by index: "D <i> <free bytes> <mount>" of its nearest existing
-- ancestor; one per target already there: "S <i> <size>".
local function disk_cmd(disk)
  local lines = { 'cs_df() { d=$2; while [ ! -d "$d" ]; do d=${d%/*}; [ -n "$d" ] || d=/; done;'
    .. ' set -- "$1" $(df -P -B1 -- "$d" 2>/dev/null | tail -n 1); echo "D $1 $5 $7"; }' }
  local seen, n = {}, 0
  for i, it in ipairs(disk) do
    local d = dirname(it.path)
    if not seen[d] then
      n = n + 1
      seen[d] = n
      lines[#lines + 1] = shell.fmt("cs_df %s %s", tostring(n), d)
    end
    -- the index is a number the spec controls, never a word from outside
    lines[#lines + 1] = shell.fmt("s=$(stat -c %%s -- %s 2>/dev/null) && echo \"S " .. i .. " $s\"", it.path)
  end
  lines[#lines + 1] = "true"
  return table.concat(lines, "\n")
end

function M.probes(want)
  local p = {}
  if want.packages and #want.packages.files > 0 then p.predict_packages = packages_cmd(want.packages) end
  if want.disk and #want.disk > 0 then p.predict_disk = disk_cmd(want.disk) end
  if want.ports and #want.ports > 0 then
    -- the kernel's own table, so no ss/netstat is needed: LISTEN is state 0A
    p.predict_ports = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"
    if want.engine_active then p.predict_engine = want.engine_active end
  end
  if want.kernel and #want.kernel > 0 then
    local l = {}
    for _, m in ipairs(want.kernel) do
      l[#l + 1] = shell.fmt("m=%s; [ -d /sys/module/$m ] ||"
        .. " grep -q \"/$m.ko\" \"/lib/modules/$(uname -r)/modules.builtin\" 2>/dev/null"
        .. " || modprobe -n -q -- %s 2>/dev/null || printf 'K %%s\\n' %s", (m:gsub("-", "_")), m, m)
    end
    l[#l + 1] = "true"
    p.predict_kernel = table.concat(l, "\n")
  end
  if want.sysctl and #want.sysctl > 0 then
    local l = { [[grep -qE '^[^ ]+ /proc/sys [^ ]+ ro[, ]' /proc/self/mounts && echo R]] }
    for _, k in ipairs(want.sysctl) do
      l[#l + 1] = shell.fmt("[ -e %s ] || echo %s", "/proc/sys/" .. k:gsub("%.", "/"), "S " .. k)
    end
    l[#l + 1] = "true"
    p.predict_sysctl = table.concat(l, "\n")
  end
  return p
end

local function body(res, key)
  return res[key] and res[key].out or nil
end

-- apt-get's "The following packages have unmet dependencies:" block: " pkg : Depends: x but
-- it is not installable", continuation lines indented under it; rpm's "x is needed by pkg".
function M.parse_unmet(out)
  local unmet, pkg = {}, nil
  for line in (out or ""):gmatch("[^\n]+") do
    local last = unmet[#unmet]
    -- apt writes a clause's alternatives one per line, each but the last ending in " or"
    if last and last.text:match(" or$") and line:match("^%s+%l") then
      last.text = last.text .. " " .. line:match("^%s*(.-)%s*$")
    end
    local p, kind, what = line:match("^%s(%S+) : (%u[%a%-]+): (.+)$")
    if p then pkg = p
    else kind, what = line:match("^%s%s+(%u[%a%-]+): (.+)$") end
    if kind and pkg and (kind:match("Depends$") or kind == "Breaks" or kind == "Conflicts") then
      local name = what:match("^(%S+)")
      unmet[#unmet + 1] = { package = pkg, kind = kind, name = name, text = what }
    end
    local need, by = line:match("^%s+(.-) is needed by (%S+)$")
    if need then unmet[#unmet + 1] = { package = by, kind = "Requires", name = need:match("^(%S+)"), text = need } end
    local c, cby = line:match("^%s+(.-) conflicts with (%S+)$")
    if c then unmet[#unmet + 1] = { package = cby, kind = "Conflicts", name = c:match("^(%S+)"), text = c } end
  end
  return unmet
end

-- The host's answers to rpm requirements (os.rhel simulate_requires): "C <i> <rc>", the
-- providers' "P <i> name<TAB>flags<TAB>version", "R" (a repository is configured: what rpm
-- lacks may come from it, not foretold) -> unmet list.
function M.parse_requires(out, reqs)
  local code, provides, repos = {}, {}, false
  for line in (out or ""):gmatch("[^\n]+") do
    local i, rc = line:match("^C (%d+) (%d+)$")
    if i then code[tonumber(i)] = tonumber(rc) end
    local j, name, flags, version = line:match("^P (%d+) ([^\t]+)\t(%d+)\t(.*)$")
    if j then
      j = tonumber(j)
      provides[j] = provides[j] or {}
      table.insert(provides[j], { name = name, flags = tonumber(flags), version = version ~= "" and version or nil })
    end
    if line == "R" then repos = true end
  end
  local unmet = {}
  for i, r in ipairs(reqs or {}) do
    local ok = repos or code[i] == nil
    if not ok and code[i] == 0 then
      -- a file, or a name without a version: a provider is enough; else one of its Provides must match
      ok = r.name:sub(1, 1) == "/" or not r.version
      for _, p in ipairs(provides[i] or {}) do
        if p.name == r.name and rpm.satisfies(p, r) then ok = true end
      end
    end
    if not ok then
      unmet[#unmet + 1] = { package = table.concat(r.by or {}, ", "), kind = "Requires", name = r.name,
        text = r.text or rpm.text(r) }
    end
  end
  return unmet
end

function M.parse(res, want)
  local f = {}
  local pk = body(res, "predict_packages")
  if pk then
    local mode = pk:match("#(%a+)\n") or "none"
    local rc = tonumber(pk:match("#rc (%d+)%s*$"))
    local errors = {}
    for line in pk:gmatch("[^\n]+") do
      if line:match("^E: ") or line:match("^error: ") then errors[#errors + 1] = line end
    end
    local reqs = mode == "meta" and want and want.packages and want.packages.requires
    f.packages = { mode = mode, rc = rc, unmet = reqs and M.parse_requires(pk, reqs) or M.parse_unmet(pk),
      errors = errors }
  end
  local dk = body(res, "predict_disk")
  if dk then
    local dirs, sizes = {}, {}
    for line in dk:gmatch("[^\n]+") do
      local i, free, mount = line:match("^D (%d+) (%d+) (.*)$")
      if i then dirs[tonumber(i)] = { free = tonumber(free), mount = mount } end
      local j, s = line:match("^S (%d+) (%d+)$")
      if j then sizes[tonumber(j)] = tonumber(s) end
    end
    f.disk = { dirs = dirs, sizes = sizes }
  end
  local pt = body(res, "predict_ports")
  if pt then
    local listening = {}
    for line in pt:gmatch("[^\n]+") do
      local port, st = line:match("^%s*%d+:%s+%x+:(%x+)%s+%x+:%x+%s+(%x%x)")
      if port and st == "0A" then listening[tonumber(port, 16)] = true end
    end
    f.ports = { listening = listening, engine_active = res.predict_engine and res.predict_engine.code == 0 }
  end
  local kn = body(res, "predict_kernel")
  if kn then
    f.kernel = {}
    for m in kn:gmatch("K (%S+)") do f.kernel[#f.kernel + 1] = m end
  end
  local sc = body(res, "predict_sysctl")
  if sc then
    f.sysctl = { readonly = sc:match("^R\n") ~= nil or sc:match("\nR\n") ~= nil, missing = {} }
    for k in sc:gmatch("S (%S+)") do f.sysctl.missing[#f.sysctl.missing + 1] = k end
  end
  f.want = want
  return f
end

local UNITS = { "B", "KiB", "MiB", "GiB", "TiB" }
local function human(n)
  local i = 1
  while n >= 1024 and i < #UNITS do n, i = n / 1024, i + 1 end
  return i == 1 and string.format("%d B", n) or string.format("%.1f %s", n, UNITS[i])
end

-- Which of the package files declares a dependency on name (the simulation of declared
-- dependencies names the command line, not the package).
local function needed_by(files, name)
  local by = {}
  for _, fl in ipairs(files or {}) do
    for n in ((fl.depends or "") .. ","):gmatch("([%w%.%+%-]+)[^,|]*[,|]") do
      if n == name then by[#by + 1] = fl.package break end
    end
  end
  return by
end

local function package_problems(out, f, want)
  local p = f.packages
  if not p or p.mode == "none" then return end
  local w = want.packages
  local tool = p.mode == "staged" and w.staged_tool or w.meta_tool
  local seen = {}
  for _, u in ipairs(p.unmet) do
    local key = u.name .. "\0" .. u.text
    if not seen[key] then
      seen[key] = true
      local who = u.package
      if who:find("^satisfy:") then
        local by = needed_by(w.files, u.name)
        who = #by > 0 and table.concat(by, ", ") or "the engine packages"
      end
      out[#out + 1] = string.format("the engine packages cannot install: %s %s %s (%s)", who,
        u.kind == "Conflicts" and "conflicts with" or u.kind == "Breaks" and "breaks" or "needs",
        u.text:gsub(" but it is ", ": "):gsub(" but ", ": "), tool)
    end
  end
  if #p.unmet == 0 and p.rc and p.rc ~= 0 and #p.errors > 0 then
    out[#out + 1] = string.format("the engine packages cannot install: %s (%s)", p.errors[#p.errors], tool)
  end
end

local function disk_problems(out, f, want)
  if not f.disk then return end
  local need, order, index, n = {}, {}, {}, 0
  for _, it in ipairs(want.disk) do
    local d = dirname(it.path)
    if not index[d] then n = n + 1; index[d] = n end
  end
  for i, it in ipairs(want.disk) do
    if f.disk.sizes[i] ~= it.size then
      local d = dirname(it.path)
      local info = f.disk.dirs[index[d]]
      if info then
        local m = need[info.mount]
        if not m then
          m = { free = info.free, bytes = 0, dirs = {}, seen = {} }
          need[info.mount] = m
          order[#order + 1] = info.mount
        end
        m.bytes = m.bytes + it.size
        if not m.seen[d] then m.seen[d] = true; m.dirs[#m.dirs + 1] = d end
      end
    end
  end
  for _, mount in ipairs(order) do
    local m = need[mount]
    if m.bytes > m.free then
      out[#out + 1] = string.format("no space left for the uploads on %s (%s): %s free, %s needed",
        mount, table.concat(m.dirs, ", "), human(m.free), human(m.bytes))
    end
  end
end

function M.problems(f, want)
  local out = {}
  if not f then return out end
  want = want or f.want or {}
  package_problems(out, f, want)
  disk_problems(out, f, want)
  if f.ports and not f.ports.engine_active then
    local busy = {}
    for _, port in ipairs(want.ports or {}) do
      if f.ports.listening[port] then busy[#busy + 1] = tostring(port) end
    end
    if #busy > 0 then
      out[#out + 1] = string.format("TCP port%s %s the engine listens on %s already in use by another program",
        #busy == 1 and "" or "s", table.concat(busy, ", "), #busy == 1 and "is" or "are")
    end
  end
  if f.kernel and #f.kernel > 0 then
    local one = #f.kernel == 1
    out[#out + 1] = string.format("kernel module%s %s cannot be loaded: not loaded, not built in, and modprobe"
      .. " does not find %s", one and "" or "s", table.concat(f.kernel, ", "), one and "it" or "them")
  end
  if f.sysctl then
    if #f.sysctl.missing > 0 then
      out[#out + 1] = string.format("sysctl%s %s cannot be set: the kernel has no such key",
        #f.sysctl.missing == 1 and "" or "s", table.concat(f.sysctl.missing, ", "))
    elseif f.sysctl.readonly and #(want.sysctl or {}) > 0 then
      out[#out + 1] = "sysctls " .. table.concat(want.sysctl, ", ") .. " cannot be set: /proc/sys is mounted read-only"
    end
  end
  return out
end

function M.join_probe(t)
  local lines = { shell.fmt("h=%s; p=%s; a=%s", t.host, tostring(t.port), t.address or "") }
  lines[#lines + 1] = '[ -n "$a" ] || a=$(timeout 2 getent ahosts "$h" 2>/dev/null | { read -r x _ && echo "$x"; })'
  lines[#lines + 1] = 'if [ -z "$a" ]; then echo "J unresolved"; elif ! command -v bash >/dev/null 2>&1; then'
    .. ' echo "J resolved $a"; else r=$(timeout 2 bash -c \'exec 3<>"/dev/tcp/$1/$2"\' _ "$a" "$p" 2>&1);'
    .. ' c=$?; echo "J $c $a $r"; fi'
  return table.concat(lines, "\n")
end

function M.join_problem(out, t)
  local line = (out or ""):match("J ([^\n]*)")
  local where = string.format("%s:%s (%s)", t.host, tostring(t.port), t.what or "the join address")
  if not line then return nil end
  if line == "unresolved" then
    return string.format("cannot resolve %s: the engine could not join", where)
  end
  local code, addr, said = line:match("^(%d+) (%S+) ?(.*)$")
  code = tonumber(code)
  if not code or code == 0 then return nil end
  -- refused: the address answers but nothing listens yet (a leader this run starts)
  if said:find("refused", 1, true) then return nil end
  -- a cluster host whose firewall this run opens (-F, phase 13) rejects or drops the engine's
  -- port until then: "No route to host" (icmp-host-prohibited) or no answer says nothing yet
  if t.firewalled and (code == 124 or said:find("No route to host", 1, true)) then return nil end
  if code == 124 then said = "no answer within 2 s" end
  said = said:gsub("^.-connect: ", ""):gsub("\n.*", "")
  return string.format("cannot reach %s at %s: %s", where, addr, said ~= "" and said or ("exit " .. code))
end

return M
