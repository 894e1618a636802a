-- cargoship.commands.engine-config-sync: apply's config sync (phases 26-27) on its own, with kubeconfig and labels.
--
-- A pipeline command (cli/pipeline.lua: the same plan, consent, lock, report and exit codes
-- as apply) over pipelines/engine_config_sync.lua. Its options are apply's, by name, so a
-- spelling and its help cannot differ between the two; the operands are apply's too
-- (CLUSTER --distro PACKAGE, or the Go tool's PACKAGE --config CLUSTER).
local apply = require "cargoship.commands.apply"
local args = require "cargoship.cli.args"
local command_path = require "cargoship.cli.pipeline"
local load = require "cargoship.pipeline.load"

local M = {}

M.name = "engine-config-sync"
M.aliases = { "registry-sync" }
M.summary = "sync running nodes' engine config files (registries, CAs, audit, PSS, chart values) with the cluster file"
M.usage = [[
Usage: cargoship engine-config-sync [options] CLUSTER --distro PACKAGE
       cargoship engine-config-sync [options] PACKAGE --config CLUSTER     (the Go tool's form)
       (also spelled registry-sync)

Apply's phases 1-7 (connect, check the hosts, read the engine version each runs, check for
nodes the cluster file lost, take the host lock), then 26-27: on every node whose engine
runs the package's version, each engine config file the cluster file and the package
render (the registries file and its inline CA files, the audit and PSS policies, the
chart values; where the engine runs containerd on its own, containerd's files and
certs.d/<registry>/hosts.toml) is compared with the node's: missing, unreadable,
different content, wrong mode or owner;
a file directly inside a directory cargoship manages that nothing renders any more is
stale. Only chart values drifted: they are written in place, no restart (the engine
reconciles them). Anything else: the node is cordoned and drained through the leader
(--no-drain: not), stopped, its drifted files written and stale ones removed, started,
Ready with a newer heartbeat, uncordoned, and the workloads its drain evicted are ready
again before the next; controllers one at a time (the leader first), workers in
per-profile batches; a refused drain fails that node alone, left uncordoned and as it
was. With --update-kubeconfig (28) and --label-nodes (29) as apply does them; then the
lock is released (30) and the hosts disconnected (31). No engine is installed or
upgraded and nothing is uploaded: a node at another version is apply's.

The dry run lists each drifted file and why, per host, and writes nothing (exit 3 when
something would change). Consent, the lock, the report (--output json: docs/dry-run.md)
and the exit codes are apply's.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.pipeline = require "cargoship.pipelines.engine_config_sync"
M.verb, M.verb_done = "sync", "synced"
M.heading = "Sync"

local OPTIONS = { "dry-run", "confirm", "concurrency", "work-concurrency", "config", "distro", "values",
  "update-kubeconfig", "kubeconfig", "label-nodes", "output", "timeout", "allow-unmanaged-nodes",
  "allow-downgrade", "known-hosts", "host-key-policy", "ssh-timeout", "max-startups", "max-clock-skew", "ready-timeout",
  "no-drain", "drain-grace-period", "drain-timeout" }

-- apply's option specs, by name, in the order given (a copy with another help where `helps`
-- has one); --skip-phases with this pipeline's numbers.
function M.options_of(names, pipeline, helps)
  local by = {}
  for _, o in ipairs(apply.options) do by[o.long] = o end
  local out = {}
  for _, n in ipairs(names) do
    local o = assert(by[n], "apply has no option --" .. n)
    if helps and helps[n] then
      local c = {}
      for k, v in pairs(o) do c[k] = v end
      c.help = helps[n]
      o = c
    end
    out[#out + 1] = o
  end
  out[#out + 1] = { long = "skip-phases", value = "LIST", check = args.checks.number_list,
    help = "leave out these phases (numbers and ranges: " .. load.ranges(M.numbers_of(pipeline)) .. "); "
      .. "phases " .. load.ranges(pipeline.required) .. " cannot be skipped" }
  return out
end

function M.numbers_of(pipeline)
  local out = {}
  for i, e in ipairs(pipeline.phases) do out[i] = e[1] end
  return out
end

M.options = M.options_of(OPTIONS, M.pipeline, {
  config = "the cluster file, the Go tool's way: cargoship engine-config-sync [PACKAGE] --config CLUSTER",
  distro = "the distro package (archive, unpacked directory or distro.yaml): the engine, its version and the config "
    .. "it renders; nothing of it is uploaded",
  ["work-concurrency"] = "batch size of the workers synced together (phase 27) whose profile sets no concurrency: "
    .. "N, 0 = all, or N% of the hosts sharing the profile (default: --concurrency; controllers go one at a time)",
})
M.arguments = { { name = "CLUSTER|PACKAGE", optional = true } }
M.keeps_log = true

function M.run(ctx, a)
  local cluster_file, distro = apply.operands(a)
  local why = not cluster_file and distro
  if cluster_file and not distro then
    why = "the distro package is needed (CLUSTER --distro PACKAGE or PACKAGE --config CLUSTER): the engine and "
      .. "its config files come from it"
  end
  if why then
    ctx.stderr:write("cargoship engine-config-sync: ", why, "\nRun 'cargoship engine-config-sync --help' for usage.\n")
    return ctx.exit.usage
  end
  return command_path.run(ctx, M, apply.apply_options(ctx, a))
end

return M
