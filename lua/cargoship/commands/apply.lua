-- cargoship.commands.apply: apply's flags and usage over the apply pipeline; the shared command path does the rest.
--
-- Validating the cluster, the plan, consent, the lock, the run, the report and the exit
-- codes are every pipeline command's (cargoship.cli.pipeline); this file says only what is
-- apply's: its options, its usage and its pipeline.
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"
local command_path = require "cargoship.cli.pipeline"
local load = require "cargoship.pipeline.load"

local M = {}

M.name = "apply"
M.summary = "bring a cluster's hosts to what its cluster file describes: prepare, upload, install and start engines"
M.usage = [[
Usage: cargoship apply [options] CLUSTER [--distro PACKAGE]
       cargoship apply [options] PACKAGE --config CLUSTER     (the Go tool's form)

Brings every host of the cluster file CLUSTER to the state it describes, through the
ordered phases of apply (docs/dry-run.md lists them).

Phases 1-7 (connect, detect operating systems, gather host facts, validate
hosts, gather distro facts, check for nodes no longer in the config, acquire the host
lock), 8-13 (prepare hosts: /etc/environment, sysctl and kernel modules from the host's
environment and the --distro package; container-selinux, fapolicyd rules with -f, SELinux
policy; /etc/hosts with -H; the firewall with -F), 14-17 (upload the distro package's
files, image tarballs and engine files: RPM, APT or binaries), 18-22 (import images where
the engine does not, write the engine's configuration, install and start the controllers,
the leader first and the others one at a time, each Ready through the leader's kubectl
before the next; apply the package's manifests from the leader; install and start the
workers in batches), 23-24 (upgrade the nodes whose engine runs at another version than
the package's: controllers one at a time, then workers in batches; each node cordoned and
drained through the leader, upgraded, Ready at the new version, uncordoned, and the
workloads its drain evicted ready again before the next), 25 (install the staged engine
files on hosts no phase above installed), 26-27 (sync the engine config files of running
nodes with what the cluster file renders: registries, CAs, audit and PSS policies, chart
values; a drifted or stale file is named with why; chart values alone are written in place,
anything else drains, stops, writes, starts and uncordons as an upgrade does), 28 (with
--update-kubeconfig: merge the cluster's admin kubeconfig into yours), 29 (with
--label-nodes: label each node node-role.kubernetes.io/<profile>=true through the leader),
30 (release the lock) and 31 (disconnect): all 31 phases. --skip-phases leaves out phases
of your choice (say 18-22: prepare and upload only); the report lists them.

A drain that fails (a PodDisruptionBudget refusing eviction past --drain-timeout) leaves
that node uncordoned at its old version and fails that host alone, naming the pod; the
other nodes go on. --no-drain upgrades without cordoning or draining.

--update-kubeconfig reads the admin kubeconfig on the leader, points its server at
https://<loadbalancer>:6443 and merges it into --kubeconfig PATH, else the first file of
$KUBECONFIG, else ~/.kube/config: cluster <name>, user <name>-admin and context <name>
(metadata.name), set as the current context; every other entry is kept. The file is
written atomically, mode 0600, never in a dry run (the plan says which entries it would
add or change). `cargoship kubeconfig` does the same on its own.

-F/--firewall configures the front end the node runs (firewalld, ufw or nftables; one
installed but stopped is left alone, never started, and the report says why) and refuses
a .host.firewall.rules set that would close the SSH port apply is connected through.
-H/--hosts writes one managed block of every node into each /etc/hosts. The Go tool's
older spellings --update-firewall and --update-hosts are accepted too.

--distro PACKAGE is a package archive (cargoship package create), an unpacked package
directory, or a bare distro.yaml (engine facts only; nothing to upload). A built package
is verified whole before any host is touched: a missing, extra or altered file is an
error naming it. Uploads go to a temporary name beside each target, are fsync'd, checked
against their sha256 on the host and renamed; a file whose hash and mode already match is
not sent. At most --concurrent-uploads hosts upload at once (default 8: on a 1 Gbit link
eight streams already fill the pipe); on a terminal the progress line counts bytes.
--upload-transport openssh sends the files of ssh: hosts through the system's ssh (one
master per host, encryption on every core); auto does so for files of 32 MiB and more.

Hosts: an ssh: block is reached by cargoship's own SSH (libssh2), an openSSH: block by the
system's ssh (ssh_config, ProxyCommand/ProxyJump, RSA keys, certificates; host keys as
OpenSSH checks them, --known-hosts passed as its UserKnownHostsFile): one ControlMaster per
host, every command a channel over it. With disableMultiplexing: true every command opens
its own connection and pays a handshake (paced by --max-startups). localhost: true runs
the commands on this machine (through sudo when not root).

With --dry-run, apply connects to every host and runs the read-only phases for real, then
reports every other phase with what it would do on each host, "nothing to do", or
"unassessed" (it would read host state an earlier reported phase has yet to create). A
dry run changes nothing (the hosts refuse every write), takes no host lock and needs no
--confirm. A host that fails is left out of the later phases; the other hosts go through
every phase. With --distro it also foretells what a later phase would fail on (a missing
package dependency, a full disk, an unresolvable or unreachable join address, a busy engine
port, a kernel module or sysctl the host lacks): "would fail" under the host, in phase 4.
Exit codes: 0 nothing is pending, 3 work is pending (or a failure is foretold), 1 a phase
failed (on any host), 130 interrupted.

Without --dry-run, apply first runs that dry run and shows it as the plan, then asks
"Proceed? [y/N]" on the terminal. When stdin is not a terminal, --confirm is needed:
without it apply stops before changing anything (exit 1). --confirm skips the question.
A plan that foretells a failure is refused before the lock (exit 1, nothing changed).
Exit codes: 0 applied, 1 a phase failed or the plan was not confirmed or was refused, 4 another
cargoship holds a host lock, 130 interrupted (phases that ran are cleaned up first, so
host locks are released).

An invalid CLUSTER fails as validate reports it (exit 1). Progress goes to stderr (one
live line per phase on a terminal); the report goes to stdout as text or, with
--output json, as one JSON document (schema in docs/dry-run.md).

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

-- -w/--work-concurrency parses as a profile's concurrency does (cluster-yaml.md §3.2).
function M.check_work_concurrency(v)
  local c, why = require("cargoship.config.profiles").parse_concurrency(v)
  if not c then return nil, why end
  return v
end

-- The pipeline apply walks (phase module names, their spec numbers, which are required,
-- what is not built). A field, not a local, so specs can hand in fake phases.
M.pipeline = require "cargoship.pipelines.apply"
M.verb, M.verb_done = "apply", "applied"

M.options = {
  { long = "dry-run", help = "report what would be done, change nothing; exit 3 when work is pending" },
  { long = "confirm", help = "go ahead without asking (needed when stdin is not a terminal)" },
  { long = "concurrency", short = "c", value = "N", check = args.checks.positive_int, default = 30,
    help = "work on at most N hosts at once" },
  { long = "work-concurrency", short = "w", value = "N|N%", check = M.check_work_concurrency,
    help = "batch size of the workers started together (phase 22) whose profile sets no concurrency: N, "
      .. "0 = all, or N% of the hosts sharing the profile; each batch finishes before the next starts "
      .. "(default: --concurrency; controllers go one at a time)" },
  { long = "config", value = "CLUSTER", check = args.checks.nonempty,
    help = "the cluster file, the Go tool's way: cargoship apply PACKAGE --config CLUSTER" },
  { long = "update-kubeconfig",
    help = "phase 28: merge the cluster's admin kubeconfig (server: the load balancer) into --kubeconfig, "
      .. "mode 0600; never in a dry run" },
  { long = "kubeconfig", value = "PATH", check = args.checks.nonempty,
    help = "where --update-kubeconfig merges (default: the first file of $KUBECONFIG, else ~/.kube/config)" },
  { long = "label-nodes",
    help = "phase 29: label each node node-role.kubernetes.io/<profile>=true through the leader where it "
      .. "is missing or set to anything else" },
  { long = "tmpdir", value = "DIR", check = args.checks.nonempty,
    help = "where a package archive is unpacked on this machine for the run (default: $TMPDIR, else /tmp; "
      .. "removed at the end); on the hosts each upload is staged under a temporary name beside its target" },
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "report as text for people or json for machines" },
  { long = "timeout", value = "DURATION", check = args.checks.duration,
    help = "give up on the plan, and on the run, after DURATION each (30s, 5m, 1h, 1m30s or seconds; "
      .. "default: none)" },
  { long = "firewall", short = "F", aliases = { "--update-firewall" }, key = "update_firewall",
    help = "phase 13: configure each node's running firewall (firewalld, ufw or nftables) to trust the "
      .. "other nodes and the pod/service CIDRs, open .host.ports and apply .host.firewall.rules" },
  { long = "hosts", short = "H", aliases = { "--update-hosts" }, key = "update_hosts",
    help = "phase 12: write every node of the cluster into one managed block of each node's /etc/hosts "
      .. "(a flag: unlike exec's --hosts NAMES, it selects no hosts)" },
  { long = "fapolicyd", short = "f", key = "fapolicyd",
    help = "phase 10: write the distro package's fapolicyd rules where fapolicyd runs, and reload it" },
  { long = "allow-unmanaged-nodes",
    help = "go on although the cluster holds nodes the cluster file does not list" },
  { long = "values", value = "FILE", check = args.checks.nonempty, multiple = true,
    help = "override the distro package's values from FILE; later files win" },
  { long = "distro", value = "PACKAGE", check = args.checks.nonempty,
    help = "the distro package (archive, unpacked directory or distro.yaml): its files are uploaded, "
      .. "its engine and version judged against" },
  { long = "concurrent-uploads", value = "N", check = args.checks.positive_int, default = 8,
    help = "upload to at most N hosts at once" },
  { long = "upload-transport", value = "HOW", check = { "libssh2", "openssh", "auto" }, default = "libssh2",
    help = "how ssh: hosts receive files: libssh2 (its SFTP, on cargoship's one thread), openssh (through "
      .. "an ssh master per host: encryption on every core), auto (openssh for files of 32 MiB and more, "
      .. "libssh2 when the system ssh cannot reach the host); openSSH: hosts always use their ssh" },
  { long = "allow-downgrade", help = "go on although a host runs a newer engine than the distro package" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.ssh_timeout(),
  ssh_options.max_startups(),
  { long = "max-clock-skew", value = "DURATION", check = args.checks.duration, default = 30,
    help = "fail hosts whose clock is further than DURATION from the median host clock" },
  { long = "ready-timeout", value = "DURATION", check = args.checks.duration, default = 300,
    help = "how long a started node may take to report Ready (through the leader's kubectl) before its "
      .. "start fails with the service's recent log" },
  { long = "no-drain",
    help = "phases 23-24, 26-27: upgrade or sync nodes without cordoning and draining them first" },
  { long = "drain-grace-period", value = "DURATION", check = args.checks.duration, default = 120,
    help = "phases 23-24, 26-27: how long each pod a drain evicts gets to stop" },
  { long = "drain-timeout", value = "DURATION", check = args.checks.duration, default = 300,
    help = "phases 23-24, 26-27: give up draining a node after DURATION (its pods' budgets refusing eviction): "
      .. "the node is uncordoned and left as it was; also how long the evicted workloads may take to be ready again" },
  { long = "skip-phases", value = "LIST", check = args.checks.number_list,
    help = "leave out these phases of the pipeline (numbers and ranges: 18-22,25); the report lists them "
      .. "as skipped. Phases " .. load.ranges(M.pipeline.required) .. " cannot be skipped" },
  { long = "phases", value = "DIR", check = args.checks.nonempty,
    help = "add the custom phases in DIR/*.lua, each placed where it says (docs/phases.md)" },
}
M.arguments = { { name = "CLUSTER|PACKAGE", optional = true } }
M.keeps_log = true

-- CLUSTER --distro PACKAGE, or the Go tool's PACKAGE --config CLUSTER.
-- -> cluster_file, distro | nil, message
function M.operands(a)
  local o, first = a.options, a.positional[1]
  if o.config then
    if o.distro and first then
      return nil, "give the package once: PACKAGE --config CLUSTER or CLUSTER --distro PACKAGE, not both"
    end
    return o.config, o.distro or first
  end
  if not first then return nil, "missing CLUSTER (or PACKAGE --config CLUSTER)" end
  return first, o.distro
end

-- Everything the command path and the phases need from the command line, in one plain
-- table (the run's ctx.options): they take it as is, so the CLI stays the only parser.
function M.apply_options(ctx, a)
  local o = a.options
  local cluster_file, distro = M.operands(a)
  return {
    cluster_file = cluster_file,
    dry_run = o.dry_run,
    confirm = o.confirm,
    concurrency = o.concurrency,
    output = o.output,
    timeout = o.timeout,
    update_firewall = o.update_firewall,
    update_hosts = o.update_hosts,
    fapolicyd = o.fapolicyd,
    allow_unmanaged_nodes = o.allow_unmanaged_nodes,
    values = o.values,
    log_file = ctx.log:file_path(),
    distro = distro,
    work_concurrency = o.work_concurrency,
    update_kubeconfig = o.update_kubeconfig,
    kubeconfig = o.kubeconfig,
    label_nodes = o.label_nodes,
    tmpdir = o.tmpdir,
    allow_downgrade = o.allow_downgrade,
    concurrent_uploads = o.concurrent_uploads,
    upload_transport = o.upload_transport,
    known_hosts = o.known_hosts or ((ctx.env("HOME") or "") .. "/.ssh/known_hosts"),
    host_key_policy = o.host_key_policy,
    ssh_timeout = o.ssh_timeout,
    max_startups = o.max_startups,
    max_clock_skew = o.max_clock_skew,
    phases_dir = o.phases,
    skip_phases = o.skip_phases,
    ready_timeout = o.ready_timeout,
    no_drain = o.no_drain,
    drain_grace_period = o.drain_grace_period,
    drain_timeout = o.drain_timeout,
  }
end

function M.run(ctx, a)
  local cluster_operand, operr = M.operands(a)
  if not cluster_operand then
    ctx.stderr:write("cargoship apply: ", operr, "\nRun 'cargoship apply --help' for usage.\n")
    return ctx.exit.usage
  end
  return command_path.run(ctx, M, M.apply_options(ctx, a))
end

return M
