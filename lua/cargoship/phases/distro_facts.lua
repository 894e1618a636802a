-- Phase "Gathering facts about the distro installed": engine version and state per host; install, upgrade or refuse.
--
-- Every known engine is probed (one round trip: each engine's own binary answering --version
-- and its service through the host's service manager), with a package or without: a host
-- may run another engine than the package's, whatever cargoship's own records say. Stores
-- host.facts.engines = {<type> = {version, running}} (what the probes found) and
-- host.facts.engine = {type, version, running, service, action}; action is the engine's
-- verdict ("install", "upgrade", "same", "downgrade", "minor_skip"; distros.engine.judge)
-- against the package, nil without one. A refused verdict (another engine installed or
-- running, a downgrade without ctx.options.allow_downgrade, a controller skipping a minor)
-- fails that host here, before any phase writes.
-- ctx.leader = first controller whose controller service runs, else first controller;
-- ctx.engine_running = some controller's service runs; ctx.engine_type; ctx.engine (the
-- configurer) stays the package's when the command set it, else the leader's engine.
local shell = require "cargoship.shell"
local engine = require "distros.engine"

local M = {
  id = "distro_facts",
  title = "Gathering facts about the distro installed",
  dry_run = "read_only",
  reads = { "connection", "os" },
  creates = { "engine_version" },
}

-- Sent ahead (facts/prefetch.lua) once the OS configurer is known: the probes ask its service manager.
function M.prefetch(ctx, host)
  if not host.os then return nil end
  return M.probes(host, M.types(ctx))
end

function M.prepare(ctx)
  return ctx.hosts
end

-- The engine types a run probes: all known ones, the package's first (another engine on the
-- host is a refusal, so it must be seen even when the package names its own).
function M.types(ctx)
  local eng = ctx and (ctx.engine or (ctx.distro and engine.for_package(ctx.distro)))
  if not eng then return engine.TYPES end
  local out = { eng.name }
  for _, t in ipairs(engine.TYPES) do
    if t ~= eng.name then out[#out + 1] = t end
  end
  return out
end

-- verb: the service question behind <type>_active ("is_active" by default; "is_up": running or
-- on its way up or down: Engine:service_active_probe in distros/engine.lua)
function M.probes(host, types, verb)
  local p = {}
  for _, t in ipairs(types or engine.TYPES) do
    local e = engine.load(t)
    p[t .. "_version"] = e:version_probe()
    -- asking the service manager (systemctl is costly) only where the engine is installed
    p[t .. "_active"] = string.format('cs_has=; for b in %s; do [ -x "$b" ] && cs_has=1; done\n'
      .. 'if [ -n "$cs_has" ] || command -v %s >/dev/null 2>&1; then %s; else false; fi',
      shell.words(table.unpack(e.binary_paths)), shell.quote(e.binary),
      e:service_active_probe(host.role, host.os, verb))
  end
  return p
end

-- Probe answers -> engines present {type = {version, running}}. Pure.
function M.present(res, types)
  local found = {}
  for _, t in ipairs(types or engine.TYPES) do
    local e = engine.load(t)
    local v = res[t .. "_version"]
    local version = v and v.code == 0 and e:parse_version(v.out) or nil
    local running = res[t .. "_active"] and res[t .. "_active"].code == 0
    if version or running then found[t] = { version = version, running = running } end
  end
  return found
end

-- The judgement for one host -> engine fact, warnings | nil, error. Pure; eng defaults to
-- the package's engine (ctx.engine when the context has one).
function M.judge(host, found, distro, options, eng)
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
  local e = eng or assert(engine.for_package(distro))
  local other = engine.foreign(found, distro, host.role)
  if other then return nil, other end
  local f = found[distro.type] or {}
  local fact = { type = distro.type, version = f.version, running = f.running or false,
                 service = e:service(host.role) }
  local verdict = e:judge(f.version, distro.version, { role = host.role, allow_downgrade = options.allow_downgrade })
  if verdict.refused then return nil, verdict.reason end
  if verdict.warning then warnings[#warnings + 1] = verdict.warning end
  local action = verdict.verdict
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
  local types = M.types(ctx)
  local ok, failures = ctx:each(hosts, function(host)
    local res, err = host:probes(M.probes(host, types))
    if not res then return nil, err end
    local found = M.present(res, types)
    host.facts.engines = found
    local fact, why = M.judge(host, found, ctx.distro, ctx.options, ctx.engine)
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
  ctx.engine = ctx.engine or (ctx.engine_type and engine.load(ctx.engine_type)) or nil
  if not ctx.distro then
    ctx.log:info("no distro package given: install/upgrade not judged")
  end
  if ctx.leader then ctx.log:verbose("leader: %s", ctx.leader.name) end
  if not ok then return nil, failures end
  return true
end

return M
