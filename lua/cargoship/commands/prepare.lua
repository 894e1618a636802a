-- cargoship.commands.prepare: hosts readied ahead of a maintenance window: apply's phases 8-11, kernel modules opt-in.
--
-- A pipeline command (cli/pipeline.lua) over pipelines/prepare.lua, with apply's options by
-- name and apply's operands (CLUSTER [--distro PACKAGE], or PACKAGE --config CLUSTER).
local apply = require "cargoship.commands.apply"
local command_path = require "cargoship.cli.pipeline"
local sync_cmd = require "cargoship.commands.engine-config-sync"

local M = {}

M.name = "prepare"
M.summary = "ready hosts ahead of a maintenance window: environment, sysctl, SELinux, fapolicyd, kernel modules"
M.usage = [[
Usage: cargoship prepare [options] CLUSTER [--distro PACKAGE]
       cargoship prepare [options] PACKAGE --config CLUSTER     (the Go tool's form)

Readies the hosts of the cluster file CLUSTER for an install, ahead of a maintenance
window, through its own list of phases (engines.md §4.3): 1 connect, 2 detect the
operating systems, 3 take the host lock, 4 prepare hosts (/etc/environment from the
host's environment and the package's, then a reconnect; the sysctl drop-in and its load),
5 container-selinux where SELinux is enabled, 6 the package's fapolicyd rules (with
-f/--fapolicyd), 7 the package's SELinux policy on Enforcing hosts, 8 enable the
requested kernel modules (with --enable-kernel-modules: /etc/modules-load.d/<m>.conf and a
modprobe of each the kernel lacks), 9 release the lock, 10 disconnect. The hosts get the
same bytes as from apply's phases 8-11; no facts are gathered and no engine is touched.
Only what differs is written.

The dry run, consent, the lock, the report (--output json: docs/dry-run.md) and the exit
codes are apply's.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.pipeline = require "cargoship.pipelines.prepare"
M.verb, M.verb_done = "prepare", "prepared"
M.heading = "Prepare"

M.options = sync_cmd.options_of({ "dry-run", "confirm", "concurrency", "config", "distro", "values", "fapolicyd",
  "output", "timeout", "known-hosts", "host-key-policy", "ssh-timeout", "max-startups" }, M.pipeline, {
  config = "the cluster file, the Go tool's way: cargoship prepare PACKAGE --config CLUSTER",
  distro = "the distro package (archive, unpacked directory or distro.yaml): its environment, sysctl, kernel "
    .. "modules, fapolicyd rules and SELinux policy; nothing of it is uploaded",
  fapolicyd = "phase 6: write the distro package's fapolicyd rules where fapolicyd runs, and reload it",
})
table.insert(M.options, 8, { long = "enable-kernel-modules",
  help = "phase 8: persist the package's kernel modules in /etc/modules-load.d and load those the kernel lacks" })
M.arguments = { { name = "CLUSTER|PACKAGE", optional = true } }
M.keeps_log = true

function M.run(ctx, a)
  local cluster_file, operr = apply.operands(a)
  if not cluster_file then
    ctx.stderr:write("cargoship prepare: ", operr, "\nRun 'cargoship prepare --help' for usage.\n")
    return ctx.exit.usage
  end
  local o = apply.apply_options(ctx, a)
  o.enable_kernel_modules = a.options.enable_kernel_modules
  return command_path.run(ctx, M, o)
end

return M
