-- phases.lib.prepare_parts: "Prepare hosts" cut in two for `cargoship prepare`: environment and sysctl; kernel modules.
--
-- M.make{id, title, env = bool, kernel = bool, option = name?} -> a phase doing only those
-- parts of phases/prepare_hosts.lua (its wanted, probes and decide, unchanged: the same
-- bytes on the hosts as apply's phase 8), and, given `option`, only when ctx.options[option]
-- is set: the prepare pipeline's "Enable the requested kernel modules" is opt-in (engines.md
-- §4.3), where apply's phase 8 loads the modules always.
local linux = require "cargoship.os.linux"
local prepare = require "cargoship.phases.prepare_hosts"

local M = {}

function M.make(o)
  local phase = { id = o.id, title = o.title, reads = { "connection", "os" }, steps = prepare.steps,
                  creates = o.kernel and { "kernel_modules" } or { "environment", "sysctl" } }

  local function wanted(ctx, host)
    local want = prepare.wanted(ctx, host)
    if not o.env then want.env, want.sysctl = {}, {} end
    if not o.kernel or (o.option and not (ctx.options or {})[o.option]) then want.kernel = {} end
    return want
  end

  function phase.assess(ctx, host)
    local want = wanted(ctx, host)
    if not next(want.env) and not next(want.sysctl) and #want.kernel == 0 then return {} end
    local cfg = host.os or linux
    local res, err = host:probes(prepare.probes(cfg.paths, want))
    if not res then error(err, 0) end
    local acts, why = prepare.decide(cfg, want, res)
    if not acts then error(host.name .. ": " .. why, 0) end
    return acts
  end

  return phase
end

return M
