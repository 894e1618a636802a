-- phases.lib.predict: what the dry run checks on a host so that a later phase does not fail there (issue 23).
--
-- M.want(ctx, host) -> want (cargoship.facts.predict) | nil: from the distro package and the
--   engine, before anything is uploaded:
--   packages  the engine files of the host's method (phases 15-16): apt hosts get apt's own
--             simulation of installing the staged .debs where they already are at their
--             targets, else `apt-get -s satisfy` of the dependencies their control files
--             declare (read here, locally; clauses another file of the set satisfies are left
--             out), against the host's installed packages and its configured repositories;
--             rpm hosts get `rpm -U --test` of staged files already there, else each
--             requirement their headers declare (read here, locally; those another file of
--             the set or the container-selinux rpm phase 9 installs provides are left out)
--             asked of the host's rpm database;
--   disk      every upload of phases 14-17 (target and size);
--   ports     the engine's listen_ports for the host's role, unless its service runs there;
--   kernel, sysctl  what the package's os config has phase 8 load and set.
-- M.join_target(ctx, host) -> target | nil: the address the host's engine joins
--   (engine:join_target) when this run would start its engine there; with --hosts the
--   leader's name is written into /etc/hosts by phase 12, so its private address is tried.
-- M.probe_hosts(ctx, hosts) -> sudo failures, join answers, join targets (phase 4's one round trip).
-- M.foretold(host, join_out, target) -> {sentence, ...}: the forecast's problems and the join's.
-- The engine-related checks apply only when this run walks the phases that install and
-- start the engine (--skip-phases 18-22 leaves them out).
local engine = require "distros.engine"
local enterprise_linux = require "cargoship.phases.enterprise_linux"
local forecast = require "cargoship.facts.predict"
local meta = require "cargoship.package.meta"
local rpm_evr = require "cargoship.facts.rpm_evr"
local os_config = require "cargoship.package.os_config"
local uploads = require "cargoship.phases.lib.uploads"
local distro_facts = require "cargoship.phases.distro_facts"

local M = {}

local INITIALIZE = { controller = "initialize_controller", worker = "initialize_worker" }

local function starts_engine(ctx, host)
  return ctx.runs ~= nil and ctx:runs(INITIALIZE[host.role] or "") or false
end

local function installs(ctx)
  return ctx.runs ~= nil and (ctx:runs("initialize_controller") or ctx:runs("initialize_worker")
    or ctx:runs("install_staged") or ctx:runs("upgrade_controller") or ctx:runs("upgrade_worker")) or false
end

-- The Depends of a set of .debs that the set itself does not satisfy, as one relations text.
local function outside_depends(files)
  local own, clauses, seen = {}, {}, {}
  for _, f in ipairs(files) do own[f.package] = true end
  for _, f in ipairs(files) do
    for _, field in ipairs { f.pre_depends or "", f.depends or "" } do
      for _, c in ipairs(meta.relations(field)) do
        local inside = false
        for _, a in ipairs(c.alternatives) do if own[a.name] then inside = true end end
        if not inside and not seen[c.text] then
          seen[c.text] = true
          clauses[#clauses + 1] = c.text
        end
      end
    end
  end
  return table.concat(clauses, ", ")
end

local function packages(ctx, host, items)
  local method = uploads.method(ctx, host)
  if (method ~= "apt" and method ~= "rpm") or not host.os or not installs(ctx) then return nil end
  local files, paths, headers = {}, {}, {}
  for _, it in ipairs(items) do
    local f = { path = it.path, size = it.size }
    local info, why = (method == "apt" and meta.deb or meta.rpm)(it.source)
    if not info then error(host.name .. ": " .. tostring(why), 0) end
    if method == "apt" then
      f.package, f.depends, f.pre_depends = info.package, info.depends, info.pre_depends
    else
      f.package, headers[#headers + 1] = info.name, info
      -- the header digest tells a staged rpm from another of its size, in the same round trip
      f.identity, f.identity_cmd = info.sha256header, info.sha256header and host.os:package_identity(it.path)
    end
    files[#files + 1] = f
    paths[#paths + 1] = it.path
  end
  if #files == 0 then return nil end
  local staged = host.os:simulate_files(paths)
  if not staged then return nil end
  local p = { method = method, files = files, staged = staged,
              staged_tool = method == "apt" and "apt-get -s install" or "rpm -U --test" }
  if method == "apt" then
    local text = outside_depends(files)
    if text ~= "" then p.meta, p.meta_tool = host.os:simulate_depends(text), "apt-get -s satisfy" end
  else
    -- phase 9 of this run installs the package's container-selinux rpm first (where SELinux is on)
    local cs = (ctx.runs == nil or ctx:runs("enterprise_linux")) and enterprise_linux.package_file(ctx)
    if cs then
      local info, why = meta.rpm(cs.source)
      if not info then error(host.name .. ": " .. tostring(why), 0) end
      headers[#headers + 1] = info
    end
    local reqs = rpm_evr.outside(headers)
    if #reqs > 0 then
      p.meta, p.meta_tool, p.requires = host.os:simulate_requires(reqs), "rpm -q --whatprovides", reqs
    end
  end
  return p
end

function M.want(ctx, host)
  if not ctx.distro then return nil end
  local eng = ctx.engine or engine.for_package(ctx.distro)
  local common, cerr = uploads.items(ctx, host, "common")
  if not common then error(host.name .. ": " .. tostring(cerr), 0) end
  local staged, serr = uploads.items(ctx, host, "engine")
  if not staged then error(host.name .. ": " .. tostring(serr), 0) end
  local want = { disk = {} }
  local runs = function(id) return ctx.runs == nil or ctx:runs(id) end
  -- a pipeline without the upload phases (reset, say) uploads nothing
  local uploading = { runs("upload_files"), runs("upload_rpm") or runs("upload_apt") or runs("upload_binaries") }
  for i, list in ipairs { common, staged } do
    if uploading[i] then
      for _, it in ipairs(list) do want.disk[#want.disk + 1] = { path = it.path, size = it.size } end
    end
  end
  want.packages = packages(ctx, host, staged)
  if eng and starts_engine(ctx, host) then
    want.ports = (eng.listen_ports or {})[host.role] or {}
    -- up, not only active: a unit the last run left starting (or restarting, its port freed)
    -- binds the engine's ports before it reports ready, and they are its own then too
    want.engine_active = distro_facts.probes(host, { eng.name }, "is_up")[eng.name .. "_active"]
  end
  local osc = os_config.of(ctx.distro)
  if ctx.runs == nil or ctx:runs("prepare_hosts") then
    want.kernel = osc.kernel
    local keys = {}
    for k in pairs(osc.sysctl or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    want.sysctl = keys
  end
  return want
end

-- The cluster host at addr (its connection or private address, or its name), or nil.
local function cluster_host(ctx, addr)
  for _, h in ipairs(ctx.hosts or {}) do
    local c = h.config and h.config.connection or {}
    if addr == c.address or addr == h.facts.private_address or addr == h.name then return h end
  end
  return nil
end

function M.join_target(ctx, host)
  if not ctx.distro or not starts_engine(ctx, host) then return nil end
  local f = host.facts.predict
  if f and f.ports and f.ports.engine_active then return nil end
  local eng = ctx.engine or engine.for_package(ctx.distro)
  if not eng then return nil end
  local leader = distro_facts.choose_leader(ctx.hosts)
  local t = eng:join_target(engine.node_of(host), engine.cluster_view(ctx.hosts, leader, ctx.cluster))
  if t and t.leader and ctx.options and ctx.options.update_hosts then t.address = t.leader.private_address end
  -- a cluster host whose firewall phase 13 of this run opens before anything joins: -F, and a
  -- front end runs there (phase 3's facts; no front end: it is left alone, and nothing this run
  -- does changes what the probe met)
  local target = t and (cluster_host(ctx, t.address or t.host)
    or t.leader and (cluster_host(ctx, t.leader.private_address) or cluster_host(ctx, t.leader.name)))
  local fw = target and target.facts.firewall
  if fw and ctx.options and ctx.options.update_firewall and fw.backend ~= nil then t.firewalled = true end
  return t
end

-- probe_cmds(ctx, host) -> {join = cmd, sudo = "true"} (either, both or neither: they run as root),
-- the join target | nil. Builds the commands only: validate_hosts sends them ahead (its prefetch).
function M.probe_cmds(ctx, h)
  local c = h.config.connection or {}
  local cmds = {}
  local t = M.join_target(ctx, h)
  if t then cmds.join = forecast.join_probe(t) end
  if (c.user or "root") ~= "root" and not cmds.join then cmds.sudo = "true" end
  return cmds, t
end

-- probe_hosts(ctx, hosts) -> sudo = {[host] = why}, joins = {[host] = out}, targets = {[host] = target}
-- sudo is the one check that needs the host: the first sudo command decides it for the
-- connection (Connection:sudo_prefix), so a root login costs no round trip for it; the join
-- address is probed in the same round trip, where this run starts an engine.
function M.probe_hosts(ctx, hosts)
  local sudo, joins, targets = {}, {}, {}
  ctx:each(hosts, function(h)
    local cmds, t = M.probe_cmds(ctx, h)
    targets[h] = t
    if next(cmds) then
      local res, err = h:probes(cmds)
      if not res then sudo[h] = err
      elseif res.join then joins[h] = res.join.out end
    end
    return true
  end)
  return sudo, joins, targets
end

-- What a later phase would fail on, per host: the gathered forecast and the join probe's answer.
function M.foretold(host, join_out, target)
  local list = forecast.problems(host.facts.predict)
  local j = target and forecast.join_problem(join_out, target)
  if j then list[#list + 1] = j end
  return list
end

return M
