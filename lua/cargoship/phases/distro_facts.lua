-- Phase "Gathering facts about the distro installed": engine version and state per host; install, upgrade or refuse.
--
-- Every engine type is probed (six commands, one round trip), so a host running another
-- engine than the package's is caught before anything is installed next to it.
-- Stores host.facts.engines = {<type> = {version, running}} (what is present) and
-- host.facts.engine = {type, version, running, service, action}; action is "install",
-- "upgrade" or "up to date" against ctx.distro, nil without a package. A downgrade (host
-- newer than the package) fails that host unless ctx.options.allow_downgrade.
-- ctx.leader = first controller whose controller service runs, else first controller;
-- ctx.engine_running = some controller's service runs; ctx.engine_type and ctx.engine (its
-- configurer): the package's type, else the leader's engine.
local shell = require "cargoship.shell"
local engine = require "distros.engine"

local M = {
  id = "distro_facts",
  title = "Gathering facts about the distro installed",
  dry_run = "read_only",
  reads = { "connection", "os" },
  creates = { "engine_version" },
}

function M.prepare(ctx)
  return ctx.hosts
end

function M.probes(host)
  local p = {}
  for _, t in ipairs(engine.TYPES) do
    local e = engine.load(t)
    p[t .. "_version"] = e:version_probe()
    -- asking the service manager (systemctl is costly) only where the engine is installed
    p[t .. "_active"] = string.format('cs_has=; for b in %s; do [ -x "$b" ] && cs_has=1; done\n'
      .. 'if [ -n "$cs_has" ] || command -v %s >/dev/null 2>&1; then %s; else false; fi',
      shell.words(table.unpack(e.binary_paths)), shell.quote(e.binary), e:service_active_probe(host.role, host.os))
  end
  return p
end

-- Probe answers -> engines present {type = {version, running}}. Pure.
function M.present(res)
  local found = {}
  for _, t in ipairs(engine.TYPES) do
    local e = engine.load(t)
    local v = res[t .. "_version"]
    local version = v and v.code == 0 and e:parse_version(v.out) or nil
    local running = res[t .. "_active"] and res[t .. "_active"].code == 0
    if version or running then found[t] = { version = version, running = running } end
  end
  return found
end

-- The judgement for one host -> engine fact, warnings | nil, error. Pure.
function M.judge(host, found, distro, options)
  options = options or {}
  local warnings = {}
  if not distro then
    for _, t in ipairs(engine.TYPES) do
      if found[t] then
        local f = found[t]
        return { type = t, version = f.version, running = f.running,
                 service = engine.load(t):service(host.role) }, warnings
      end
    end
    return { running = false }, warnings
  end
  for _, t in ipairs(engine.TYPES) do
    local f = found[t]
    if t ~= distro.type and f then
      local what = string.format("%s %s", t, f.version or "(version unknown)")
      if f.running then
        return nil, string.format("%s is running here but the package installs %s: reset the host first",
          what, distro.type)
      end
      warnings[#warnings + 1] = what .. " is installed (not running) beside the package's " .. distro.type
    end
  end
  local e = engine.load(distro.type)
  local f = found[distro.type] or {}
  local fact = { type = distro.type, version = f.version, running = f.running or false,
                 service = e:service(host.role) }
  local action, why = engine.judge(f.version, distro.version)
  if not action then return nil, why end
  if action == "downgrade" then
    local msg = string.format("will not downgrade %s: installed %s is newer than the package's %s",
      distro.type, f.version, distro.version)
    if not options.allow_downgrade then return nil, msg end
    warnings[#warnings + 1] = msg .. " (allowed by option)"
  elseif action == "upgrade" then
    local jump = engine.minor_jump(f.version, distro.version)
    if e.max_minor_step and jump > e.max_minor_step then
      return nil, string.format("cannot upgrade %s from %s to %s: it crosses %d minor versions, %s takes one at a time",
        distro.type, f.version, distro.version, jump, distro.type)
    elseif jump > 1 then
      warnings[#warnings + 1] = string.format("upgrade from %s to %s skips %d minor version(s);"
        .. " Kubernetes supports one minor at a time", f.version, distro.version, jump - 1)
    end
  end
  if fact.running and not f.version then
    warnings[#warnings + 1] = fact.service .. " runs but no " .. distro.type .. " binary answered --version"
  end
  fact.action = action
  return fact, warnings
end

function M.choose_leader(hosts)
  local first
  for _, h in ipairs(hosts) do
    if h.role == "controller" then
      first = first or h
      if h.facts.engine and h.facts.engine.running then return h end
    end
  end
  return first
end

function M.run(ctx, hosts)
  local ok, failures = ctx:each(hosts, function(host)
    local res, err = host:probes(M.probes(host))
    if not res then return nil, err end
    local found = M.present(res)
    host.facts.engines = found
    local fact, why = M.judge(host, found, ctx.distro, ctx.options)
    if not fact then return nil, host.name .. ": " .. why end
    host.facts.engine = fact
    for _, w in ipairs(why) do host.log:warn("%s", w) end
    if fact.type then
      host.log:verbose("%s %s, %s %s%s", fact.type, fact.version or "not installed", fact.service,
        fact.running and "running" or "not running", fact.action and ("; " .. fact.action) or "")
    else
      host.log:verbose("no engine installed")
    end
    return true
  end)
  local running = false
  for _, h in ipairs(hosts) do
    local e = h.facts.engine
    if h.role == "controller" and e and e.running then running = true end
  end
  ctx.engine_running = running
  ctx.leader = M.choose_leader(ctx.hosts)
  local leader_engine = ctx.leader and ctx.leader.facts.engine
  ctx.engine_type = ctx.distro and ctx.distro.type or (leader_engine and leader_engine.type)
  ctx.engine = ctx.engine_type and engine.load(ctx.engine_type) or nil
  if not ctx.distro then
    ctx.log:info("no distro package given: install/upgrade not judged")
  end
  if ctx.leader then ctx.log:verbose("leader: %s", ctx.leader.name) end
  if not ok then return nil, failures end
  return true
end

return M
