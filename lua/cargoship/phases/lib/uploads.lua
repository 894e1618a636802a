-- phases.lib.uploads: what the upload phases (14-17) ship to a host and how they assess it: one probe, then exact
-- records.
--
-- items(ctx, host, which) -> list of item | nil, why; which = "common" (phase 14: config.files
--   by arch as "file", the cluster's hosts[].files as "data", image tarballs as "image") or
--   "engine" (phases 15-17: the os.files of the method the host takes, as "engine")
--   item = {category, source (local file), path (where the upload goes), final (binaries: the
--           install target; the upload goes beside it), sha256, size, mode, owner, group,
--           symlinks, label}
-- method(ctx, host) -> "rpm"|"apt"|"binary"|nil, entries: the first of RPM -> APT -> Binaries
--   with files for the host's role and arch (RPM only on Enterprise Linux, APT only on
--   Debian-like hosts: distro-package.md §12), so an RPM listed as a binary is never chosen
--   for an EL host when rpm files exist (§14.4 documented; a binary RPM stays a copy).
-- assess(host, items) -> actions | nil, why: one round trip reads every target's sha256, mode,
--   owner and links, missing directories and partial uploads a cut run left; records only
--   for what differs (a host that has it all has nothing to do).
-- records(ctx, host) -> actions | nil, why: /var/lib/cargoship/manifest.txt and
--   /etc/cargoship/distro-release.json (0600), and removal of files an earlier package shipped
--   that this one does not.
local action = require "cargoship.action"
local images = require "cargoship.package.images"
local shell = require "cargoship.shell"
local digest = require "cargoship.digest"
local staging = require "cargoship.package.staging"

local M = {}

M.MANIFEST = "/var/lib/cargoship/manifest.txt"
M.RELEASE = "/etc/cargoship/distro-release.json"
M.STAGED_SUFFIX = ".cargoship-staged"

local function dirname(p) return p:match("^(.*)/[^/]*$") or "/" end
local function basename(p) return p:match("([^/]*)$") end

local function arch_ok(sel, arch)
  if not sel.arch or #sel.arch == 0 then return true end
  for _, a in ipairs(sel.arch) do if a == arch then return true end end
  return false
end

local function role_ok(sel, role)
  return sel.profile == nil or sel.profile == "" or sel.profile == role
end

local function item(category, source, path, e, label)
  local sum, size = staging.sha256_file(source)
  if not sum then return nil, size end
  return { category = category, source = source, path = path, sha256 = sum, size = size,
           mode = e.mode, owner = e.owner, group = e.group, symlinks = e.symlinks or {}, label = label }
end

function M.method(ctx, host)
  local pkg = ctx.distro
  if not pkg or not pkg.os_files then return nil, {} end
  local arch, role = host.facts.arch, host.role
  local ptype = host.os and host.os.package_type
  for _, m in ipairs({ "rpm", "apt", "binary" }) do
    if m == "binary" or m == ptype then
      local list = {}
      for _, e in ipairs(pkg.os_files) do
        if e.selector.package == m and arch_ok(e.selector, arch) and role_ok(e.selector, role) then
          list[#list + 1] = e
        end
      end
      if #list > 0 then return m, list end
    end
  end
  return nil, {}
end

local function cluster_dir(ctx)
  local f = ctx.cluster and ctx.cluster.file
  return f and (f:match("^(.*)/[^/]*$") or ".") or "."
end

function M.items(ctx, host, which)
  local pkg = ctx.distro
  local out = {}
  if which == "engine" then
    if not pkg then return out end
    local m, list = M.method(ctx, host)
    for _, e in ipairs(list) do
      local it, why = item("engine", e.staged, e.target, e, e.target)
      if not it then return nil, why end
      if m == "binary" then
        it.final = e.target
        it.path = e.target .. M.STAGED_SUFFIX
      end
      it.method = m
      out[#out + 1] = it
    end
    return out
  end
  local arch = host.facts.arch
  if pkg then
    for _, e in ipairs(pkg.files or {}) do
      if arch_ok(e.selector, arch) then
        local it, why = item("file", e.staged, e.target, e, e.target)
        if not it then return nil, why end
        out[#out + 1] = it
      end
    end
    if #pkg.images > 0 then
      for _, ref in ipairs(pkg.images) do
        local dst, derr = images.host_path(pkg, ref)
        if not dst then return nil, derr end
        local f, why = staging.image_file(pkg, ref, arch)
        if not f then return nil, why end
        local it, ierr = item("image", f.path, dst, { mode = "0644" }, ref)
        if not it then return nil, ierr end
        out[#out + 1] = it
      end
    end
  end
  for _, f in ipairs((host.config and host.config.files) or {}) do
    local src = f.data and staging.data_file(f.data)
      or (f.src:sub(1, 1) == "/" and f.src or (cluster_dir(ctx) .. "/" .. f.src))
    local dst = f.dst or (f.dst_dir:gsub("/+$", "") .. "/" .. basename(f.src or f.name))
    local it, why = item("data", src, dst, { mode = f.perm or "0644", owner = f.user, group = f.group },
      f.name or dst)
    if not it then return nil, "hosts[].files " .. tostring(f.name) .. ": " .. tostring(why) end
    out[#out + 1] = it
  end
  return out
end

-- "0644" -> "644" as stat prints it
local function short_mode(m) return m and (m:gsub("^0+(%d%d%d)$", "%1")) or nil end

local function probe_script(items)
  -- the transport's hash helper: a second apply hashes every target, so its CPU counts
  -- 3 processes a file that is there (the hash's subshell, the hasher, stat), not 5: no pipe to
  -- cut; a hash that fails reads "unreadable" (stat's mode was read as the hash)
  local lines, dirs, seen = { shell.SHA256_FN,
    "cs_f() { if [ -f \"$2\" ] && [ ! -L \"$2\" ]; then h=$(cs_sha256 \"$2\"); h=${h%% *};"
    .. " echo \"F $1 ${h:-unreadable} $(stat -c '%a %U %G' -- \"$2\")\"; else echo \"F $1 -\"; fi; }" }, {}, {}
  local function dir(d)
    if seen[d] then return end
    seen[d] = true
    dirs[#dirs + 1] = d
  end
  for i, it in ipairs(items) do
    lines[#lines + 1] = shell.fmt("cs_f %s %s", tostring(i), it.path)
    dir(dirname(it.path))
    if it.final then
      lines[#lines + 1] = shell.fmt("cs_f %s %s", "t" .. i, it.final)
      dir(dirname(it.final))
    end
    for j, l in ipairs(it.symlinks) do
      lines[#lines + 1] = shell.fmt("printf 'L %%s %%s\\n' %s \"$(readlink -- %s)\"", i .. ":" .. j, l)
      dir(dirname(l))
    end
  end
  for _, d in ipairs(dirs) do
    lines[#lines + 1] = shell.fmt("[ -d %s ] || printf 'D %%s\\n' %s", d, d)
  end
  -- partial uploads a cut run left beside a target (the transport's temp names)
  for _, it in ipairs(items) do
    lines[#lines + 1] = shell.fmt("for t in %s/.%s.cargoship-*.tmp; do [ -e \"$t\" ] && echo \"T $t\"; done",
      dirname(it.path), basename(it.path))
  end
  lines[#lines + 1] = "true"
  return table.concat(lines, "\n")
end
M.probe_script = probe_script

-- Parses the probe -> {files = {[key] = {sum, mode, user, group}|false}, links = {[i:j] = target},
-- dirs = {missing dir...}, temps = {...}}
function M.parse_probe(out)
  local r = { files = {}, links = {}, dirs = {}, temps = {} }
  for line in out:gmatch("[^\n]+") do
    local kind, rest = line:match("^(%u) (.*)$")
    if kind == "F" then
      local key, sum, mode, user, group = rest:match("^(%S+) (%S+) ?(%S*) ?(%S*) ?(%S*)$")
      if key then r.files[key] = sum ~= "-" and { sum = sum, mode = mode, user = user, group = group } or false end
    elseif kind == "L" then
      local key, target = rest:match("^(%S+) ?(.*)$")
      if key then r.links[key] = target end
    elseif kind == "D" then r.dirs[#r.dirs + 1] = rest
    elseif kind == "T" then r.temps[#r.temps + 1] = rest end
  end
  return r
end

local function matches(have, it)
  return have and have.sum == it.sha256 and (not it.mode or have.mode == short_mode(it.mode))
    and (not it.owner or have.user == it.owner) and (not it.group or have.group == it.group)
end

-- The records for a host's items, given the probe's answer. Pure (fixture specs use it).
function M.actions_for(items, r)
  local acts = {}
  if #r.temps > 0 then
    acts[#acts + 1] = action.run { cmd = "rm -f -- " .. shell.words(table.unpack(r.temps)),
      say = string.format("remove %d partial upload%s a cut run left", #r.temps, #r.temps == 1 and "" or "s") }
  end
  if #r.dirs > 0 then
    acts[#acts + 1] = action.run { cmd = "mkdir -p -- " .. shell.words(table.unpack(r.dirs)),
      say = "create " .. table.concat(r.dirs, ", ") }
  end
  for i, it in ipairs(items) do
    local have = r.files[tostring(i)]
    local done = it.final and matches(r.files["t" .. i], it)
    if not done and not matches(have, it) then
      if have and have.sum == it.sha256 then
        -- the bytes are there: only mode or owner differ
        local cmds = {}
        if it.mode then cmds[#cmds + 1] = shell.fmt("chmod %s -- %s", short_mode(it.mode), it.path) end
        if it.owner or it.group then
          cmds[#cmds + 1] = shell.fmt("chown %s -- %s", (it.owner or "") .. (it.group and (":" .. it.group) or ""),
            it.path)
        end
        acts[#acts + 1] = action.run { cmd = table.concat(cmds, " && "),
          say = string.format("set mode %s%s on %s", it.mode or "-", it.owner and (" owner " .. it.owner) or "",
            it.path) }
      else
        acts[#acts + 1] = action.upload { path = it.path, source = it.source, sha256 = it.sha256, size = it.size,
          mode = it.mode, owner = it.owner, group = it.group, assessed = true,
          say = string.format("upload %s (%d bytes, %s)", it.path, it.size, it.category) }
      end
    end
    -- links of a binary are made at install (phase 25), when the target is in place
    if not it.final then
      for j, l in ipairs(it.symlinks) do
        if r.links[i .. ":" .. j] ~= it.path then
          acts[#acts + 1] = action.run { cmd = shell.fmt("ln -sfn -- %s %s", it.path, l),
            say = "link " .. l .. " -> " .. it.path }
        end
      end
    end
  end
  return acts
end

function M.assess(host, items)
  if #items == 0 then return {} end
  local out, err, code = host:probe(probe_script(items))
  if not out then return nil, err end
  if code ~= 0 then return nil, host.name .. ": reading the upload targets failed (exit " .. tostring(code) .. ")" end
  return M.actions_for(items, M.parse_probe(out))
end

-- ---- running the uploads --------------------------------------------------------------

-- At most this many hosts upload at once unless --concurrent-uploads says otherwise: on a
-- 1 Gbit link (~119 MB/s) eight SFTP streams already fill the pipe (~15 MB/s each); more
-- would add client CPU, memory and SSH windows without adding bytes per second.
M.DEFAULT_CONCURRENT_UPLOADS = 8

local UNITS = { "B", "KiB", "MiB", "GiB", "TiB" }
function M.human(n)
  local i = 1
  while n >= 1024 and i < #UNITS do n, i = n / 1024, i + 1 end
  return i == 1 and string.format("%d B", n) or string.format("%.1f %s", n, UNITS[i])
end

-- The action records of `which` ("common" or "engine") files on host: what the upload
-- phases' assess returns. Raises, naming the host, when the package cannot say.
function M.planned(ctx, host, which)
  local items, err = M.items(ctx, host, which)
  if not items then error(host.name .. ": " .. tostring(err), 0) end
  local acts, aerr = M.assess(host, items)
  if not acts then error(aerr, 0) end
  return acts
end

-- The hosts that take their engine files by method m ("rpm", "apt"): phases 15 and 16.
function M.hosts_by_method(ctx, m)
  local out = {}
  for _, h in ipairs(ctx.hosts) do
    if M.method(ctx, h) == m then out[#out + 1] = h end
  end
  return out
end

-- The upload phases' run: the planned records, host by host at most --concurrent-uploads at
-- once, one upload at a time so the progress line counts bytes as files land.
function M.run(ctx, hosts)
  local limit = ctx.options.concurrent_uploads or M.DEFAULT_CONCURRENT_UPLOADS
  local total, sent, finished = 0, 0, 0
  for _, h in ipairs(hosts) do
    for _, a in ipairs(ctx:planned(h)) do if a.kind == "upload" then total = total + (a.size or 0) end end
  end
  local function show()
    if ctx.progress then
      ctx:progress(finished, #hosts, string.format("%s of %s", M.human(sent), M.human(total)))
    end
  end
  local ok, failures = ctx:each(hosts, function(h)
    local bytes, files = 0, 0
    local planned, i = ctx:planned(h), 1
    while i <= #planned do
      -- an upload alone (the progress counts its bytes); the records between uploads together,
      -- which the host sends as one script
      local j = i
      while planned[i].kind ~= "upload" and planned[j + 1] and planned[j + 1].kind ~= "upload" do j = j + 1 end
      local done, err = ctx:apply(h, table.move(planned, i, j, 1, {}))
      if not done then return nil, err end
      local a = planned[i]
      if a.kind == "upload" then
        bytes, files = bytes + (a.size or 0), files + 1
        sent = sent + (a.size or 0)
        show()
      end
      i = j + 1
    end
    finished = finished + 1
    if files > 0 and h.log then
      h.log:verbose("uploaded %d file%s, %s", files, files == 1 and "" or "s", M.human(bytes))
    end
    show()
    return true
  end, { concurrency = limit })
  if not ok then return nil, failures end
  return true
end

-- ---- on-host records -------------------------------------------------------------------

-- The manifest text: "category<TAB>path" per shipped file, sorted; binaries by their target.
function M.manifest_text(list)
  local lines = {}
  for _, it in ipairs(list) do lines[#lines + 1] = it.category .. "\t" .. (it.final or it.path) end
  table.sort(lines)
  return #lines > 0 and (table.concat(lines, "\n") .. "\n") or ""
end

function M.release_text(ctx, host, list)
  local pkg = ctx.distro
  local doc = pkg.doc or {}
  local meta = doc.metadata or {}
  local managed = {}
  for _, it in ipairs(list) do managed[#managed + 1] = it.final or it.path end
  table.sort(managed)
  local json = require "cargoship.json"
  return json.encode({ name = meta.name, version = meta.version, distroType = pkg.type, distroVersion = pkg.version,
    description = meta.description, architecture = host.facts.arch, aggregateChecksum = pkg.aggregate,
    build = doc.build, images = json.array(pkg.images or {}), managedFiles = json.array(managed) }) .. "\n"
end

-- The package a staged file installs, from its file name (rpm NAME-VERSION-RELEASE.ARCH.rpm,
-- deb NAME_VERSION_ARCH.deb) -> name | nil (not a package file): what reset removes.
function M.package_name(path)
  local base = path:match("[^/]+$") or path
  if base:match("%.deb$") then return base:match("^([^_]+)_") end
  if base:match("%.rpm$") then return (base:gsub("%.rpm$", ""):gsub("%.[^.]+$", ""):match("^(.+)%-[^-]+%-[^-]+$")) end
  return nil
end

-- Files the old manifest lists that the new one does not -> paths (removed after an upgrade).
function M.stale(old_text, new_text)
  local keep, out = {}, {}
  for line in new_text:gmatch("[^\n]+") do keep[line:match("\t(.*)$") or line] = true end
  for line in (old_text or ""):gmatch("[^\n]+") do
    local p = line:match("^%a+\t(/.*)$")
    if p and not keep[p] then out[#out + 1] = p end
  end
  table.sort(out)
  return out
end

function M.records(ctx, host)
  local common, err = M.items(ctx, host, "common")
  if not common then return nil, err end
  local engine, eerr = M.items(ctx, host, "engine")
  if not engine then return nil, eerr end
  for _, it in ipairs(engine) do common[#common + 1] = it end
  local manifest = M.manifest_text(common)
  local release = M.release_text(ctx, host, common)
  local res, perr = host:probes({
    manifest = shell.fmt("cat -- %s", M.MANIFEST),
    release = shell.fmt("sha256sum -- %s | cut -d' ' -f1; stat -c '%%a' -- %s", M.RELEASE, M.RELEASE),
  })
  if not res then return nil, perr end
  local acts = {}
  local old = res.manifest.code == 0 and res.manifest.out or nil
  local stale = M.stale(old, manifest)
  if #stale > 0 then
    acts[#acts + 1] = action.run { cmd = "rm -f -- " .. shell.words(table.unpack(stale)),
      say = "remove " .. table.concat(stale, ", ") .. " (no longer shipped)" }
  end
  if old ~= manifest then
    acts[#acts + 1] = action.write { path = M.MANIFEST, content = manifest, mode = "0644", dir_mode = "0755",
      say = string.format("record %d shipped file%s in %s", #common, #common == 1 and "" or "s", M.MANIFEST) }
  end
  local have = res.release.code == 0 and res.release.out or ""
  if have ~= digest.sha256(release) .. "\n600\n" then
    acts[#acts + 1] = action.write { path = M.RELEASE, content = release, mode = "0600", dir_mode = "0755" }
  end
  return acts
end

return M
