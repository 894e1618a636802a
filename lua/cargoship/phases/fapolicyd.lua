-- Phase "Prepare hosts - Enterprise Linux support - Fapolicyd" (-f): the package's rules where fapolicyd runs.
--
-- Only with --fapolicyd (-f), and only on hosts where a fapolicyd process runs (never
-- started here: a daemon that denies executions is the operator's to start). The package's
-- spec.config.os.fapolicyd goes to /etc/fapolicyd/rules.d/31-cargoship.rules and its
-- fapolicydExecutable to 32-cargoship-executable.rules (0644); a file the package no longer
-- has is removed. Then the rules are reloaded: `fagenrules --load` where it exists (it
-- compiles rules.d and signals the daemon), else a restart of the service. A host whose
-- files already match has nothing to do. fapolicyd installed but stopped: left alone, and
-- the report says so.
local action = require "cargoship.action"
local os_config = require "cargoship.package.os_config"
local shell = require "cargoship.shell"

local M = {
  id = "fapolicyd",
  title = "Prepare hosts - Enterprise Linux support - Fapolicyd",
  reads = { "connection", "os" },
  creates = { "fapolicyd_rules" },
}

M.DIR = "/etc/fapolicyd/rules.d"
M.RULES = M.DIR .. "/31-cargoship.rules"
M.EXECUTABLE = M.DIR .. "/32-cargoship-executable.rules"

local ABSENT = 44

local function cat(path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

function M.prepare(ctx)
  local pkg = os_config.of(ctx.distro)
  if not (ctx.options and ctx.options.fapolicyd) then
    if (pkg.fapolicyd or pkg.fapolicyd_executable) and ctx.log then
      ctx.log:verbose("the distro package carries fapolicyd rules; --fapolicyd (-f) writes them where fapolicyd runs")
    end
    return {}
  end
  return ctx.hosts
end

M.PROBES = {
  running = "grep -qx fapolicyd /proc/[0-9]*/comm",
  installed = "for d in /usr/sbin /sbin /usr/bin /bin; do [ -x \"$d/fapolicyd\" ] && exit 0; done; exit 1",
  fagenrules = "command -v fagenrules",
  rules = cat(M.RULES),
  executable = cat(M.EXECUTABLE),
}

function M.assess(ctx, host)
  local res, err = host:probes(M.PROBES)
  if not res then error(err, 0) end
  if res.running.code ~= 0 then
    if res.installed.code == 0 then
      ctx:leave(host, "fapolicyd is installed but not running: its rules are left alone (it is never started here)")
    end
    return {}
  end
  local pkg = os_config.of(ctx.distro)
  local out = {}
  local files = { { M.RULES, pkg.fapolicyd, "rules" }, { M.EXECUTABLE, pkg.fapolicyd_executable, "executable" } }
  for _, f in ipairs(files) do
    local r = res[f[3]]
    local have = r.code ~= ABSENT and r.out or nil
    if r.code ~= 0 and r.code ~= ABSENT then error(host.name .. ": cannot read " .. f[1], 0) end
    if f[2] and f[2] ~= have then
      out[#out + 1] = action.write { path = f[1], content = f[2], mode = "0644" }
    elseif not f[2] and have then
      out[#out + 1] = action.remove { path = f[1], say = "remove " .. f[1] .. " (the package no longer has it)" }
    end
  end
  if #out == 0 then return {} end
  if res.fagenrules.code == 0 then
    out[#out + 1] = action.run { cmd = "fagenrules --load", say = "reload the fapolicyd rules" }
  else
    out[#out + 1] = action.service { verb = "restart", service = "fapolicyd" }
  end
  return out
end

return M
