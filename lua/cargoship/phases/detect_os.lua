-- Phase "Detect host operating systems": one batched read per host picks its OS configurer.
--
-- Stores host.os (configurer instance), host.facts.os = {id, version_id, pretty_name, name,
-- like}, host.facts.kernel (release), host.facts.machine (uname -m), host.facts.arch
-- (amd64/arm64/riscv64/...), host.facts.service_manager and host.facts.init (PID 1's name).
-- Reads as the login user (sudo = false): nothing here needs root, and sudo is judged,
-- with a proper message, by "Validate hosts".
local os_registry = require "cargoship.os"
local service = require "cargoship.os.service"

local M = {
  id = "detect_os",
  title = "Detect host operating systems",
  dry_run = "read_only",
  reads = { "connection" },
  creates = { "os" },
}

-- Constant commands: nothing host-specific reaches the shell here.
M.PROBES = {
  os_release = "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release",
  kernel = "read -r s < /proc/sys/kernel/ostype; read -r r < /proc/sys/kernel/osrelease; "
    .. "printf '%s\\n%s\\n' \"$s\" \"$r\"; uname -m",
  init = service.PROBE,
}

-- Sent ahead with the other phases' reads (facts/prefetch.lua): one round trip for several phases.
function M.prefetch()
  return M.PROBES, { sudo = false }
end

function M.prepare(ctx)
  return ctx.hosts
end

-- Turns the probe answers into facts and a configurer; pure, so specs feed fixtures.
-- Returns configurer, facts, how | nil, why
function M.decide(res, override)
  local rel = res.os_release
  if not rel or rel.out == "" then
    return nil, "cannot read /etc/os-release or /usr/lib/os-release"
  end
  local facts = { os = os_registry.os_facts(os_registry.parse_os_release(rel.out)) }
  local lines = {}
  for l in (res.kernel and res.kernel.out or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
  facts.kernel, facts.machine = lines[2], lines[3]
  facts.arch = os_registry.normalize_arch(lines[3])
  local signals = service.parse(res.init and res.init.out)
  local manager, dir, why = service.detect(signals)
  facts.init = signals.comm
  facts.service_manager, facts.service_manager_why = manager, why
  local cfg, how = os_registry.select(facts.os, override, { service_manager = manager, service_dir = dir })
  if not cfg then return nil, how end
  return cfg, facts, how
end

function M.run(ctx, hosts)
  return ctx:each(hosts, function(host)
    local res, err = host:probes(M.PROBES, { sudo = false })
    if not res then return nil, err end
    local cfg, facts, how = M.decide(res, host.config.os)
    if not cfg then return nil, host.name .. ": " .. facts end
    host.os = cfg
    for k, v in pairs(facts) do host.facts[k] = v end
    host.log:verbose("%s (kernel %s, %s), configurer %s by %s", facts.os.pretty_name,
      facts.kernel or "?", facts.arch or "?", cfg:lineage(), how)
    if facts.service_manager then
      host.log:verbose("service manager %s: %s", facts.service_manager, facts.service_manager_why)
    else
      host.log:warn("no service manager detected: %s", facts.service_manager_why)
    end
    return true
  end)
end

return M
