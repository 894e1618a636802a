-- phases.lib.initialize_steps: the steps of phases 20 and 22: install the staged engine, kubeadm init and join.
--
-- install_engine: the staged engine files as phase 25 would install them; marks the host in
-- ctx.installed_engine. kubeadm_init: init on the leader, then the join secret saved there.
-- kubeadm_join: a fresh token (and, for a control plane, a certificate key) from the
-- leader at join time, the JoinConfiguration written, kubeadm join. Plus engine_common's.
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local shell = require "cargoship.shell"

local steps = setmetatable({}, { __index = common.steps })

-- The staged engine files, as "Install staged files" (phase 25) would install them: what
-- phases 15-17 staged and is not yet in place; the host is then marked so phase 25 skips it.
-- A host without staged files (a package without os.files for it, or specs handing in
-- host.facts.staged) takes host.facts.staged.
function steps.install_engine(ctx, host)
  local acts
  local staged = common.staged(host)
  if staged then
    acts = ctx.engine:install(common.node(host), staged, host.os)
  elseif ctx.distro.os_files and require("cargoship.phases.lib.uploads").method(ctx, host) then
    acts = require("cargoship.phases.install_staged").assess(ctx, host)
  else
    return nil, host.name .. ": " .. ctx.engine.name .. " is not installed and no engine files were staged"
      .. " on it (the distro package has no os.files for this host's role, arch and package manager)"
  end
  local _, err = host:apply(acts)
  if err then return nil, host.name .. ": installing " .. ctx.engine.name .. ": " .. tostring(err) end
  ctx.installed_engine = ctx.installed_engine or {}
  ctx.installed_engine[host] = true
  return true
end

function steps.kubeadm_init(ctx, host)
  local eng = ctx.engine
  local out, err = host:check(shell.fmt("kubeadm init --config %s --upload-certs", eng.config_path),
    { timeout = 900 })
  if not out then return nil, host.name .. ": kubeadm init: " .. tostring(err) end
  local secret = eng:parse_init_output(out)
  if not secret then return nil, host.name .. ": kubeadm init printed no join command" end
  local _, werr = host:apply(eng:join_secret_save(secret))
  if werr then return nil, werr end
  return true
end

-- A fresh token (and certificate key) from the leader at the moment of joining.
function steps.kubeadm_join(ctx, host)
  local eng, leader = ctx.engine, ctx.leader
  local out, err = leader:check(eng.token_create(), { timeout = 120 })
  if not out then return nil, host.name .. ": creating a join token on the leader " .. leader.name .. ": " .. err end
  local secret = eng:parse_init_output(out)
  if not secret then return nil, host.name .. ": the leader " .. leader.name .. " printed no join command" end
  if host.role == "controller" then
    local kout, kerr = leader:check(eng.certificate_key_create(), { timeout = 300 })
    secret.certificate_key = kout and eng:parse_certificate_key(kout)
    if not secret.certificate_key then
      return nil, host.name .. ": no certificate key from the leader " .. leader.name .. ": " .. tostring(kerr)
    end
  end
  local f = eng:render_config(common.node(host), common.cluster(ctx, secret))
  local _, werr = host:apply({ action.write { path = f.path, content = f.content, mode = f.mode, secret = true,
    dir_mode = "0755" } })
  if werr then return nil, werr end
  local jout, jerr = host:check(shell.fmt("kubeadm join --config %s", eng.config_path), { timeout = 900 })
  if not jout then return nil, host.name .. ": kubeadm join: " .. tostring(jerr) end
  return true
end

return steps
