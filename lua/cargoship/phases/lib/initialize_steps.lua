-- phases.lib.initialize_steps: the steps of phases 20 and 22: an engine's bootstrap and join commands.
--
-- For an engine that forms its cluster by command (engine.joins_by_command):
-- bootstrap: the engine's bootstrap_cmd on the leader, then the records its output gives
-- (the join secret saved there). join: a fresh join secret from the leader at join time
-- (engine:join_secret_cmds), the engine's join_files written with it, then join_cmd.
-- Plus engine_common's.
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"

local steps = setmetatable({}, { __index = common.steps })

function steps.bootstrap(ctx, host, a)
  local eng = ctx.engine
  local out, err = host:check(eng:bootstrap_cmd(), { timeout = eng.join_timeout })
  if not out then return nil, host.name .. ": " .. a.say .. ": " .. tostring(err) end
  local acts, why = eng:bootstrap_secret(out)
  if not acts then return nil, host.name .. ": " .. why end
  local _, werr = host:apply(acts)
  if werr then return nil, werr end
  return true
end

-- A fresh secret from the leader at the moment of joining.
function steps.join(ctx, host, a)
  local eng, leader = ctx.engine, ctx.leader
  local outs = {}
  for i, c in ipairs(eng:join_secret_cmds(host.role)) do
    local out, err = leader:check(c.cmd, { timeout = c.timeout })
    if not out then
      return nil, string.format("%s: no %s from the leader %s: %s", host.name, c.what, leader.name, tostring(err))
    end
    outs[i] = out
  end
  local secret, why = eng:join_secret_of(outs, host.role)
  if not secret then return nil, host.name .. ": the leader " .. leader.name .. " " .. why end
  local writes = {}
  for _, f in ipairs(eng:join_files(common.node(host), common.cluster(ctx, secret))) do
    writes[#writes + 1] = action.write { path = f.path, content = f.content, mode = f.mode, secret = true,
                                         dir_mode = "0755" }
  end
  local _, werr = host:apply(writes)
  if werr then return nil, werr end
  local jout, jerr = host:check(eng:join_cmd(), { timeout = eng.join_timeout })
  if not jout then return nil, host.name .. ": " .. a.say .. ": " .. tostring(jerr) end
  return true
end

return steps
