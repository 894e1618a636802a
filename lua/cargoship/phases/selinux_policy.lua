-- Phase "Prepare hosts - Enterprise Linux support - SELinux policy": CIL modules, booleans, file contexts.
--
-- Hosts whose getenforce says Enforcing and that have semodule (engines.md §5.3); the others
-- are skipped, not failed. The package's spec.config.os.selinux is applied in this order,
-- each step one record (distro-package.md §7):
--   1. the state record /var/lib/cargoship/selinux/cargoship-state.json (dir 0700, file 0600):
--      {booleans = {name = value before cargoship first set it}, modules = {{name, priority}},
--      file_contexts = {{path, type, file_type}}}; a boolean already recorded keeps its first
--      value, so reset restores what the host had before cargoship; the lists are replaced
--   2. modules: the CIL saved as /var/lib/cargoship/selinux/<name>.cil (0600) and installed
--      with `semodule -X <priority> -i <file>`; skipped when the file matches and
--      `semodule -lfull` lists the module at that priority
--   3. booleans, sorted: `setsebool -P name on|off` for each that differs (an unknown one
--      fails the host in assess)
--   4. file contexts: `semanage fcontext -a` (or -m when one exists for the path), then
--      `restorecon -R -F` on the regex's literal prefix (or its parent; never /); skipped
--      when `semanage fcontext -l -C` already lists the path with that type
-- A failed step stops the host there, and the failure names the step; later steps are not
-- run. A converged host has nothing to do.
local os_config = require "cargoship.package.os_config"
local policy = require "cargoship.os.selinux_policy"

local M = {
  id = "selinux_policy",
  title = "Prepare hosts - Enterprise Linux support - SELinux policy",
  reads = { "connection", "os", "container_selinux" },
  creates = { "selinux_policy" },
}

local function wanted(ctx)
  return os_config.of(ctx.distro).selinux
end

local function empty(s)
  return #s.modules == 0 and next(s.booleans) == nil and #s.file_contexts == 0
end

function M.prepare(ctx)
  if empty(wanted(ctx)) then return {} end
  return ctx.hosts
end

function M.assess(ctx, host)
  local want = wanted(ctx)
  local res, err = host:probes(policy.probes(want))
  if not res then error(err, 0) end
  local acts, why = policy.decide(want, res)
  if not acts then error(host.name .. ": " .. why, 0) end
  if why then host.log:verbose("SELinux policy not applied: %s", why) end
  return acts
end

-- One record at a time, so a failure names its step and the rest stay not run.
function M.run(ctx, hosts)
  return ctx:each(hosts, function(h)
    for _, a in ipairs(ctx:planned(h)) do
      local ok, err = ctx:apply(h, { a })
      if not ok then
        return nil, string.format("%s: SELinux step \"%s\" failed (the steps after it were not run): %s", h.name,
          a.say, tostring(err))
      end
    end
    return true
  end)
end

return M
