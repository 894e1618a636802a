-- Specs of the reset pipeline's phases: what each plans from a host's answers (no package: reset reads the hosts).
local os_registry = require "cargoship.os"
local policy = require "cargoship.os.selinux_policy"
local prepare_record = require "cargoship.os.prepare_record"
local remove_state = require "cargoship.phases.remove_host_state"
local reset_node = require "cargoship.phases.lib.reset_node"
local support = require "unit.phases.support"
local uninstall = require "cargoship.phases.uninstall_engine"

local function says(list)
  local out = {}
  for i, a in ipairs(list) do out[i] = a.say end
  return out
end

local function os_of(name, manager)
  local cfg = os_registry.by_name(name):new {}
  cfg.services = require("cargoship.os.service").manager(manager)
  return cfg
end

local MANIFEST = "engine\t/var/lib/rancher/k3s/deb/k3s-agent_1.35.2+k3s1-1_amd64.deb\n"
  .. "engine\t/var/lib/rancher/k3s/deb/k3s-common_1.35.2+k3s1-1_amd64.deb\n"
  .. "file\t/opt/cs/tool\n"

describe("Uninstalling Engine", function()
  local host = { name = "w1", role = "worker", config = {}, facts = { node_name = "w1" } }

  it("the manifest's rpm and deb files name the packages; every path it lists is removed, then the manifest", function()
    local paths, names = uninstall.manifest(MANIFEST
      .. "engine\t/var/lib/kubernetes/rpm/kubeadm-1.35.3-150500.1.1.x86_64.rpm\n")
    assert.are.same({ "k3s-agent", "k3s-common", "kubeadm" }, names)
    assert.are.equal(4, #paths)
  end)

  it("plans the engine's reset (stop and disable best effort, purge, dirs) and forgets the runit service", function()
    host.os = os_of("debian", "runit")
    local acts = uninstall.decide(host, { manifest = { out = MANIFEST, code = 0 }, dirs_k3s = { code = 0 },
      dirs_rke2 = { code = 1 }, dirs_upstream = { code = 1 } }, {})
    assert.are.same({
      "stop service k3s-agent (best effort)", "disable service k3s-agent (best effort)",
      "run k3s-killall.sh if present",
      "remove /var/lib/rancher/k3s/agent/images/.cache.json", "unpin k3s-agent, k3s-common",
      "run env DEBIAN_FRONTEND=noninteractive apt-get -q -y purge 'k3s-agent' 'k3s-common'",
      "remove /var/lib/rancher/k3s", "remove /etc/rancher/k3s", "remove /etc/rancher/node",
      "remove /etc/rancher and /var/lib/rancher if empty",
      "forget service k3s-agent (what runit kept of it)",
      "remove the 3 files the upload manifest lists", "remove /var/lib/cargoship/manifest.txt" }, says(acts))
    -- runsvdir stops the service's runsv only at its next scan: forget waits for it to leave
    -- (`sv status` fails once it has) before removing its state, and fails naming it if it stays
    assert.matches("while sv status '/etc/sv/k3s-agent' >/dev/null 2>&1 && [ $i -lt 300 ]; do sleep 0.1;", acts[11].cmd,
      1, true)
    assert.matches("runsv of /etc/sv/k3s-agent still running 30 s after its link in /etc/service was removed",
      acts[11].cmd, 1, true)
    local tail = "; rm -rf -- '/etc/sv/k3s-agent/supervise' '/etc/sv/k3s-agent/log/supervise'; "
      .. "rmdir '/etc/sv/k3s-agent/log' '/etc/sv/k3s-agent' 2>/dev/null; true"
    assert.are.equal(tail, acts[11].cmd:sub(-#tail))
    assert.are.equal("rm -f -- '/var/lib/rancher/k3s/deb/k3s-agent_1.35.2+k3s1-1_amd64.deb' "
      .. "'/var/lib/rancher/k3s/deb/k3s-common_1.35.2+k3s1-1_amd64.deb' '/opt/cs/tool'", acts[12].cmd)
  end)

  it("an engine phase 5 found is reset even with its dirs gone; a host with nothing left has nothing to do", function()
    host.os = os_of("rocky", "systemd")
    local none = { manifest = { code = 44 }, dirs_k3s = { code = 1 }, dirs_rke2 = { code = 1 },
      dirs_upstream = { code = 1 } }
    assert.are.same({}, uninstall.decide(host, none, {}))
    local acts = uninstall.decide(host, none, { upstream = { version = "v1.35.3", running = false } })
    assert.are.equal("run kubeadm reset -f", acts[1].say)
    -- kubelet (stopped by kubeadm reset) disabled; both services forgotten (systemd: their failed state)
    local all = table.concat(says(acts), "|")
    assert.matches("stop service containerd (best effort)|disable service containerd (best effort)|", all, 1, true)
    assert.matches("|disable service kubelet (best effort)|forget service kubelet (what systemd kept of it)|"
      .. "forget service containerd", all, 1, true)
  end)
end)

describe("Remove cargoship's host state", function()
  local cfg = os_of("debian", "systemd")
  local HOSTS = "127.0.0.1 localhost\n# BEGIN cargoship: cluster nodes (managed block, edits inside are replaced)\n"
    .. "10.0.0.1 c1\n# END cargoship\n::1 localhost\n"

  it("takes its block out of /etc/hosts, removes its sysctl file, fapolicyd rules, nftables table and dirs", function()
    local acts = assert(remove_state.decide(cfg, {
      hosts = { out = HOSTS, code = 0 }, sysctl = { code = 0 }, fapolicyd_rules = { code = 0 },
      fapolicyd_executable = { code = 1 }, nft_table = { code = 0 },
      nft_conf_1 = { out = "flush ruleset\ninclude \"/var/lib/cargoship/nftables.nft\"\n", code = 0 },
      nft_conf_2 = { code = 44 }, ufw_record = { code = 44 }, ufw_app = { code = 1 }, dir_1 = { code = 0 },
      dir_2 = { code = 0 } }))
    assert.are.same({ "take the cargoship block out of /etc/hosts", "remove /etc/sysctl.d/99-cargoship.conf",
      "remove /etc/fapolicyd/rules.d/31-cargoship.rules", "reload the fapolicyd rules where fapolicyd runs",
      "delete table inet cargoship", "stop including table inet cargoship from /etc/nftables.conf",
      "remove /etc/cargoship", "remove /var/lib/cargoship" }, says(acts))
    assert.are.equal("127.0.0.1 localhost\n::1 localhost\n", acts[1].content)
    assert.are.equal("flush ruleset\n", acts[6].content)
  end)

  it("deletes the ufw rules it recorded and its app profile; nothing of it there, nothing to do", function()
    local acts = assert(remove_state.decide(cfg, { ufw_record = { out = "allow from 10.0.0.2\n", code = 0 },
      ufw_app = { code = 0 } }))
    assert.are.same({ "ufw: drop rule allow from 10.0.0.2", "remove /etc/ufw/applications.d/cargoship" }, says(acts))
    assert.are.equal("'ufw' 'delete' 'allow' 'from' '10.0.0.2'", acts[1].cmd)
    assert.are.same({}, assert(remove_state.decide(cfg, { hosts = { out = "127.0.0.1 localhost\n", code = 0 } })))
  end)
end)

describe("Remove cargoship's host state: what phase 8 recorded", function()
  local cfg = os_of("debian", "runit")
  local RECORD = "# cargoship: the /etc/environment lines phase 8 wrote, and each key's lines before them\n"
    .. "wrote CS_ROLE CS_ROLE=worker\nwas CS_ROLE CS_ROLE=someone\n"
    .. "wrote HTTPS_PROXY export HTTPS_PROXY=http://proxy.internal:3128\n"
    .. "was HTTPS_PROXY export HTTPS_PROXY=http://corp:8080\nwas HTTPS_PROXY HTTPS_PROXY=http://dup:1\n"
    .. "wrote CS_NEW CS_NEW=1\n"

  it("puts back each key's lines where the file still holds cargoship's, and removes the module files it created",
    function()
      local res = { prep_env_record = { out = RECORD, code = 0 },
        prep_environment = { out = "LANG=C.UTF-8\nexport HTTPS_PROXY=http://proxy.internal:3128\nCS_NEW=1\n"
          .. "CS_ROLE=changed-by-hand\n", code = 0 },
        prep_modules_record = { out = "# cargoship: the modules-load.d files phase 8 created\ncreated-dir\n"
          .. "created overlay\ncreated br_netfilter\n", code = 0 }, prep_modules_dir = { code = 0 } }
      local probes, names = prepare_record.module_probes(cfg.paths, res)
      assert.are.same({ "br_netfilter", "overlay" }, names)
      assert.are.equal("if [ -e '/etc/modules-load.d/overlay.conf' ]; then cat -- '/etc/modules-load.d/overlay.conf';"
        .. " else exit 44; fi", probes.prep_module_2)
      -- br_netfilter.conf was edited since: not cargoship's bytes any more, so it stays
      local mods = { names = names, res = { prep_module_1 = { out = "br_netfilter\n# mine\n", code = 0 },
        prep_module_2 = { out = "overlay\n", code = 0 } } }
      local acts = assert(remove_state.decide(cfg, res, nil, mods))
      assert.are.same({ "put back the /etc/environment lines cargoship changed",
        "remove /etc/modules-load.d/overlay.conf", "remove /etc/modules-load.d if empty (cargoship made it)" },
        says(acts))
      assert.are.equal("rmdir -- '/etc/modules-load.d' 2>/dev/null || true", acts[3].cmd)
      -- CS_ROLE was changed by hand after cargoship wrote it: kept; CS_NEW was absent: gone
      assert.are.equal("LANG=C.UTF-8\nexport HTTPS_PROXY=http://corp:8080\nHTTPS_PROXY=http://dup:1\n"
        .. "CS_ROLE=changed-by-hand\n", acts[1].content)
    end)

  it("removes /etc/environment when cargoship created it and nothing else is in it; a second pass has nothing",
    function()
      local res = { prep_env_record = { out = "created\nwrote CS_NEW CS_NEW=1\n", code = 0 },
        prep_environment = { out = "CS_NEW=1\n", code = 0 } }
      assert.are.same({ "remove /etc/environment (cargoship created it; nothing else is in it)" },
        says(assert(remove_state.decide(cfg, res))))
      res.prep_environment.out = "OTHER=2\n"
      assert.are.same({}, assert(remove_state.decide(cfg, res)))
      assert.are.same({}, assert(remove_state.decide(cfg, { prep_env_record = { code = 44 },
        prep_modules_record = { code = 44 }, prep_environment = { out = "CS_NEW=1\n", code = 0 } })))
    end)

  it("an unreadable record fails the host, naming it", function()
    local acts, why = remove_state.decide(cfg, { prep_env_record = { code = 1 } })
    assert.is_nil(acts)
    assert.are.equal("/var/lib/cargoship/prepare/environment: cannot read (exit 1)", why)
  end)
end)

describe("Remove cargoship's host state: firewalld", function()
  it("an empty plan against what firewalld has: out of the zones, files removed, rich rules dropped, one reload",
    function()
      local fw = {
        ipset4 = { out = "<ipset/>\n", code = 0 }, ipset6 = { code = 44 },
        service = { out = "<service/>\n", code = 0 },
        sources = { out = "ipset:cargoship-trusted\n", code = 0 }, sources_rt = { out = "ipset:cargoship-trusted\n" },
        services = { out = "ssh distro-exposed-ports", code = 0 }, services_rt = { out = "ssh distro-exposed-ports" },
        rich = { out = 'rule family="ipv4" source address="10.0.0.9" drop\n', code = 0 },
        previous = { out = 'rule family="ipv4" source address="10.0.0.9" drop\n', code = 0 },
        policies = { out = "", code = 0 }, policies_rt = { out = "", code = 0 } }
      local acts = assert(remove_state.decide(os_of("rocky", "systemd"), { firewalld = { code = 0 } }, fw))
      assert.are.same({ "stop trusting ipset cargoship-trusted (no address of its family is left)",
        "remove /etc/firewalld/ipsets/cargoship-trusted.xml",
        "close the exposed ports in zone public (.host.ports is empty now)",
        "remove /etc/firewalld/services/distro-exposed-ports.xml",
        'firewalld: drop rich rule rule family="ipv4" source address="10.0.0.9" drop',
        "apply the firewalld changes" }, says(acts))
    end)
end)

describe("Remove the SELinux policy cargoship applied", function()
  it("undoes the state record: contexts, booleans back to their first value, modules at their priority", function()
    local acts = policy.removal({ dir = { code = 0 }, state = { code = 0,
      out = '{"booleans":{"container_manage_cgroup":'
      .. 'false},"modules":[{"name":"k3s","priority":200}],"file_contexts":[{"path":"/var/lib/rancher(/.*)?",'
      .. '"type":"container_var_lib_t","file_type":"all"}]}' } })
    assert.are.same({ "remove the SELinux label of /var/lib/rancher(/.*)?",
      "restore SELinux boolean container_manage_cgroup to off", "remove SELinux module k3s (priority 200)",
      "remove /var/lib/cargoship/selinux" }, says(acts))
    assert.matches("semodule -X '200' -r 'k3s'", acts[3].cmd, 1, true)
    -- every step only warns
    assert.matches("|| echo 'warning: removing module k3s failed' >&2", acts[3].cmd, 1, true)
    assert.are.same({}, policy.removal({ dir = { code = 1 }, state = { code = 44 } }))
  end)
end)

describe("Reset Worker / Reset Controller", function()
  local function host(name, role, running, answers)
    local h = support.host({ name = name, role = role }, answers or {})
    h.facts = { node_name = name, engine = { type = "k3s", running = running } }
    return h
  end

  it("drains and deletes through the leader when it stays; --no-drain leaves the drain out", function()
    local c1, w1 = host("c1", "controller", true), host("w1", "worker", true)
    local ctx = support.ctx({ c1, w1 }, { options = { target_hosts = { w1 = true } }, fields = { leader = c1 } })
    local acts = reset_node.records(ctx, w1)
    assert.are.same({ "drain", "stop", "killall", "cache", "delete_node" }, {
      acts[1].name, acts[2].verb, acts[3].say:match("killall") and "killall", acts[4].path:match("cache") and "cache",
      acts[5].name })
    assert.are.same({ "c1", "c1" }, { acts[1].via, acts[5].via })
    ctx.options.no_drain = true
    assert.are.equal("stop", reset_node.records(ctx, w1)[1].verb)
  end)

  it("the whole cluster: controllers through the leader, the leader itself neither drained nor deleted", function()
    local c1, c2 = host("c1", "controller", true), host("c2", "controller", true)
    local ctx = support.ctx({ c1, c2 }, { fields = { leader = c1 } })
    assert.are.equal("c1", reset_node.records(ctx, c2)[1].via)
    local own = reset_node.records(ctx, c1)
    assert.are.same({ "service", "run", "remove" }, { own[1].kind, own[2].kind, own[3].kind })
  end)

  it("a controller whose removal leaves a single one is deleted before its engine stops", function()
    local c1, c2, c3 = host("c1", "controller", true), host("c2", "controller", true), host("c3", "controller", true)
    local ctx = support.ctx({ c1, c2, c3 }, { fields = { leader = c1 } })
    -- whole cluster: c3 goes first (c2 and c1 stay up), then c2 (only c1 left), then c1
    assert.are.equal("delete_node", reset_node.records(ctx, c3)[5].name)
    local c2s = reset_node.records(ctx, c2)
    assert.are.same({ "drain", "delete_node", "stop" }, { c2s[1].name, c2s[2].name, c2s[3].verb })
    ctx.options.target_hosts = { c3 = true }
    assert.are.equal("delete_node", reset_node.records(ctx, c3)[5].name)
  end)

  it("the leader targeted: another running controller that stays carries the operations", function()
    local c1, c2, w1 = host("c1", "controller", true), host("c2", "controller", true), host("w1", "worker", true)
    local ctx = support.ctx({ c1, c2, w1 }, { options = { target_hosts = { c1 = true } }, fields = { leader = c1 } })
    assert.are.equal("c2", reset_node.records(ctx, c1)[1].via)
  end)

  it("controllers run in reverse config order, the leader last", function()
    local phase = require "cargoship.phases.reset_controller"
    local c1, c2, c3 = host("c1", "controller", true), host("c2", "controller", true), host("c3", "controller", true)
    local ctx = support.ctx({ c1, c2, c3 }, { fields = { leader = c1 } })
    local seen = {}
    function ctx.apply(_, h) seen[#seen + 1] = h.name; return true end
    assert.is_true(phase.run(ctx, { c1, c2, c3 }))
    assert.are.same({ "c3", "c2", "c1" }, seen)
  end)
end)
