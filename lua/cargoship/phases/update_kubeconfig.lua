-- Phase "Updating kubeconfig file with the current cluster": the leader's admin kubeconfig merged into the operator's.
--
-- With --update-kubeconfig (apply) or always (`cargoship kubeconfig`). assess, on the
-- leader: reads the engine's admin kubeconfig there (a secret: its credentials are
-- redacted from the log and never in a plan), renames its entries after the cluster
-- (cluster <name>, user <name>-admin, context <name>), points the server at
-- https://<loadbalancer>:6443, and reads the operator's file (--kubeconfig, else the first
-- file of $KUBECONFIG, else ~/.kube/config) on this machine, so the plan is exact: one write
-- there (on = "local", mode 0600, atomic), saying which entries it adds or changes; nothing
-- when they are in place and the file is 0600. A dry run writes nothing (the local target
-- refuses). --kubeconfig - (the kubeconfig command): nothing is merged; the cluster's own
-- kubeconfig is kept on ctx.kubeconfig for the command to print.
local action = require "cargoship.action"
local kubeconfig = require "cargoship.phases.lib.kubeconfig"

local M = {
  id = "update_kubeconfig",
  title = "Updating kubeconfig file with the current cluster",
  reads = { "connection", "facts", "engine_version", "controllers" },
  creates = { "kubeconfig" },
}

-- The operator's kubeconfig: --kubeconfig, else $KUBECONFIG's first file, else ~/.kube/config.
function M.target(options, env)
  if options.kubeconfig then return options.kubeconfig end
  local first = (env("KUBECONFIG") or ""):match("[^:]+")
  if first then return first end
  local home = env("HOME")
  if not home or home == "" then return nil, "HOME is not set: give --kubeconfig PATH" end
  return home .. "/.kube/config"
end

function M.prepare(ctx)
  local o = ctx.options or {}
  if not (o.update_kubeconfig and ctx.leader) then return {} end
  return { ctx.leader }
end

local function mode_text(m) return m and string.format("%04o", m) or "none" end

-- The cluster's entries from the leader's admin kubeconfig -> entries (credentials redacted).
local function entries_of(ctx, host)
  local eng = ctx.engine
  if not eng then error("no engine known: give --distro PACKAGE, or install the cluster first", 0) end
  local path = eng.kubeconfig
  local text, err, code = host:read_file(path)
  if not text then
    if code == "notfound" then
      error(string.format("%s: no admin kubeconfig at %s: is the cluster installed?", host.name, path), 0)
    end
    error(err, 0)
  end
  local doc, why = kubeconfig.parse(text, host.name .. ":" .. path)
  if not doc then error(why, 0) end
  local name = ctx.cluster.name
  local entries, eerr = kubeconfig.admin(doc, name, kubeconfig.server(ctx.cluster.loadbalancer), function(p)
    return host:read_file(p)
  end)
  if not entries then error(string.format("%s: %s: %s", host.name, path, eerr), 0) end
  for _, s in ipairs(kubeconfig.secrets(entries)) do
    if ctx.log and ctx.log.redact then ctx.log:redact(s) end
  end
  return entries
end

function M.assess(ctx, host)
  if host ~= ctx.leader then return {} end
  local entries = entries_of(ctx, host)
  local target, terr = M.target(ctx.options or {}, ctx.env)
  if not target then error(terr, 0) end
  if target == "-" then
    ctx.kubeconfig = { name = entries.name, path = target, text = kubeconfig.render(kubeconfig.standalone(entries)) }
    return {}
  end
  local have, mode, code = ctx.local_target:read_file(target)
  if not have and code ~= "notfound" then error(mode, 0) end
  local doc, why = kubeconfig.parse(have, target)
  if not doc then error("cannot merge into " .. why, 0) end
  local merged, changes = kubeconfig.merge(doc, entries)
  local text = kubeconfig.render(merged)
  ctx.kubeconfig = { name = entries.name, path = target }
  if #changes == 0 and mode == tonumber("600", 8) then return {} end
  local said = #changes > 0 and table.concat(changes, ", ") or ("set mode 0600 (was " .. mode_text(mode) .. ")")
  return { action.write { path = target, content = text, mode = "0600", dir_mode = "0700", on = "local",
    say = string.format("%s %s on this machine: %s", have and "update" or "create", target, said) } }
end

return M
