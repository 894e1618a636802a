-- Integration spec on the lab: phases 28 (--update-kubeconfig) and 29 (--label-nodes) on k3s; `cargoship kubeconfig`.
--
-- Issue 20's "Done when" for them: k3s (the lab-distros stand-in) on 1 controller + 2
-- workers; a kubeconfig file that already holds another context gets the cluster merged in,
-- the other context survives, the file is 0600, and Debian's real kubectl, run here (the
-- operator's side, inside the lab's netns), lists the cluster's nodes through the load
-- balancer's address; a dry run leaves the file byte for byte unchanged; the real run's
-- plan equals what it did, action by action; --label-nodes adds the profile labels and a
-- second run has nothing pending; a converged re-apply changes no byte on any host.
-- Hosts 1, 3 and 4 of the lab (Debian/systemd, Debian/runit, Rocky/runit), reset before and after.
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local build = os.getenv("CARGOSHIP_BUILD_DIR") or (lab.src .. "/build")
local HOSTS = lab.hosts()
local MEMBERS = { 1, 3, 4 }
local LEADER = 1
local NAME = "kc-lab"

local OTHER = [[
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://192.0.2.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: other
  context: {cluster: other, user: other-user, namespace: web}
current-context: other
users:
- name: other-user
  user: {token: not-a-real-token}
]]

local function reset()
  local words = {}
  for i, n in ipairs(MEMBERS) do words[i] = tostring(n) end
  local code, out = lab.lab("reset " .. table.concat(words, " "))
  assert(code == 0, "lab.sh reset: " .. out)
end

-- h1 controller (profile "cp"), h3 and h4 workers (profile "gpu"): the profiles only name
-- the node-role label
local function cluster(work)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: " .. NAME,
    "spec:", "  config:", "    loadbalancer: " .. HOSTS[LEADER].address, "  hosts:" }
  for i, n in ipairs(MEMBERS) do
    lines[#lines + 1] = string.format("    - role: %s\n      profile: %s\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i == 1 and "cp" or "gpu", HOSTS[n].address, lab.key, lab.known_hosts)
  end
  lab.write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

local function mode_of(path)
  local p = assert(io.popen("stat -c %a " .. q(path)))
  local m = p:read("l")
  p:close()
  return m
end

local function kubectl(file, args)
  return lab.sh("kubectl --kubeconfig " .. q(file) .. " " .. args)
end

-- The cluster's nodes with their labels, through the leader's own kubectl.
local function node_labels()
  local eng = assert(require("distros.engine").load("k3s"))
  local code, out = run.ssh(LEADER, eng:get_nodes())
  assert(code == 0, "kubectl get nodes on h" .. LEADER .. ": " .. out)
  local labels = {}
  for _, item in ipairs(cjson.decode(out).items) do labels[item.metadata.name] = item.metadata.labels end
  return labels
end

local IGNORE = { "^/var/lib/rancher/[%w]+/server/db", "^/var/log/" }
for _, p in ipairs(run.IGNORE) do IGNORE[#IGNORE + 1] = p end
local function uppers()
  local s = {}
  for _, i in ipairs(MEMBERS) do s[i] = lab.upper_tree(i, IGNORE) end
  return s
end

describe("kubeconfig and labels on a k3s cluster", function()
  local work, pkg, file
  setup(function()
    pkg = build .. "/lab-distros/k3s.tar.zst"
    assert(io.open(pkg), pkg .. " is missing: build the lab-distros target")
    work = run.work()
    file = work .. "/operator/kubeconfig"
    assert(os.execute("mkdir -p " .. q(work .. "/operator")))
    lab.write(file, OTHER)
    assert(os.execute("chmod 644 " .. q(file)))
    reset()
    cluster(work)
  end)
  teardown(function()
    if work then os.execute("rm -rf " .. q(work)) end
    reset()
  end)
  local function apply(args)
    return run.apply(work, args .. " -F --ready-timeout 60 --distro " .. q(pkg))
  end

  it("installs the cluster (no kubeconfig asked: the file is untouched)", function()
    local r = apply("--confirm")
    assert.are.equal(0, r.code, r.stderr)
    assert.are.equal(OTHER, lab.read(file))
  end)

  it("a dry run plans the merge, naming the entries, and leaves the file byte for byte unchanged", function()
    local dry = apply("--dry-run --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(3, dry.code, dry.stderr)
    assert.are.equal(OTHER, lab.read(file))
    assert.are.equal("644", mode_of(file))
    local p = run.phase(dry.doc, "update_kubeconfig")
    assert.are.equal("would_act", p.verdict)
    local a = p.hosts[1].actions[1]
    assert.are.same({ "write", "local", file, "0600" }, { a.kind, a.on, a.path, a.mode })
    assert.are.equal("update " .. file .. " on this machine: add cluster " .. NAME .. ", add user " .. NAME
      .. "-admin, add context " .. NAME .. ", set current-context " .. NAME, a.say)
    -- the admin credentials are nowhere in the report
    assert.is_nil(dry.stdout:find("client-key-data", 1, true))
    assert.is_nil(dry.stdout:find("BEGIN", 1, true))
  end)

  it("the real run merges it: the other context survives, 0600, and kubectl lists the nodes through the lb", function()
    local r = apply("--confirm --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(0, r.code, r.stderr)
    local done = run.compare(r.doc.plan, r.doc)
    local seen = false
    for _, d in ipairs(done) do
      if d.phase == "update_kubeconfig" then seen = true; assert.are.equal("done", d.action.outcome) end
    end
    assert.is_true(seen, "phase 28 ran what it planned")
    assert.are.equal("600", mode_of(file))
    local code, out = kubectl(file, "config get-contexts -o name")
    assert.are.equal(0, code, out)
    assert.are.same({ NAME, "other" }, (function()
      local l = {}
      for w in out:gmatch("%S+") do l[#l + 1] = w end
      table.sort(l)
      return l
    end)())
    code, out = kubectl(file, "config view -o jsonpath='{.current-context} {.clusters[?(@.name==\"" .. NAME
      .. "\")].cluster.server}'")
    assert.are.equal(0, code, out)
    assert.are.equal(NAME .. " https://" .. HOSTS[LEADER].address .. ":6443", out)
    code, out = kubectl(file, "get nodes -o name")
    assert.are.equal(0, code, out)
    local want, got = {}, {}
    for _, n in ipairs(MEMBERS) do want[#want + 1] = "node/" .. HOSTS[n].name end
    for w in out:gmatch("%S+") do got[#got + 1] = w end
    table.sort(want)
    table.sort(got)
    assert.are.same(want, got)
    -- the other cluster's entries are as they were
    code, out = kubectl(file, "config view -o jsonpath='{.contexts[?(@.name==\"other\")].context.namespace}'")
    assert.are.equal(0, code, out)
    assert.are.equal("web", out)
  end)

  it("--label-nodes adds the profile labels through the leader; a second run has nothing pending", function()
    local dry = apply("--dry-run --label-nodes --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(3, dry.code, dry.stderr)
    assert.are.equal("nothing_to_do", run.phase(dry.doc, "update_kubeconfig").verdict)
    local says = {}
    for _, a in ipairs(run.phase(dry.doc, "label_nodes").hosts[1].actions) do says[#says + 1] = a.say end
    table.sort(says)
    local want = {}
    for i, n in ipairs(MEMBERS) do
      want[#want + 1] = "label node " .. HOSTS[n].name .. " node-role.kubernetes.io/" .. (i == 1 and "cp" or "gpu")
        .. "=true"
    end
    table.sort(want)
    assert.are.same(want, says)
    local r = apply("--confirm --label-nodes --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(0, r.code, r.stderr)
    run.compare(r.doc.plan, r.doc)
    local labels = node_labels()
    for i, n in ipairs(MEMBERS) do
      assert.are.equal("true", labels[HOSTS[n].name]["node-role.kubernetes.io/" .. (i == 1 and "cp" or "gpu")])
    end
    local again = apply("--dry-run --label-nodes --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(0, again.code, again.stdout .. again.stderr)
    assert.are.equal("nothing_to_do", run.phase(again.doc, "label_nodes").verdict)
  end)

  it("a converged re-apply with both flags changes no byte on any host, nor in the file", function()
    local before, kc = uppers(), lab.read(file)
    local r = apply("--confirm --label-nodes --update-kubeconfig --kubeconfig " .. q(file))
    assert.are.equal(0, r.code, r.stderr)
    local after = uppers()
    for _, i in ipairs(MEMBERS) do
      assert.are.same({}, lab.snapshot_diff(before[i], after[i]), "h" .. i .. "'s upper dir")
    end
    assert.are.equal(kc, lab.read(file))
  end)

  it("cargoship kubeconfig merges on its own (from $KUBECONFIG), and - prints a kubeconfig kubectl can use", function()
    local second = work .. "/second"
    local function kc(args)
      return lab.sh(string.format("cd %s && env HOME=%s KUBECONFIG=%s %s kube-config cluster.yaml %s",
        q(work), q(work), q(second .. ":" .. file), q(lab.bin), args))
    end
    local code, out = kc("--dry-run")
    assert.are.equal(3, code, out)
    assert.matches("create " .. second .. " on this machine: add cluster " .. NAME, out, 1, true)
    assert.is_nil(io.open(second), "a dry run creates no file")
    code, out = kc("")
    assert.are.equal(0, code, out)
    assert.are.equal("600", mode_of(second))
    code, out = kubectl(second, "get nodes -o name")
    assert.are.equal(0, code, out)
    assert.are.equal(#MEMBERS, select(2, out:gsub("node/", "")))
    local printed = work .. "/printed"
    code, out = lab.sh(string.format("cd %s && env HOME=%s %s kubeconfig cluster.yaml - > %s", q(work), q(work),
      q(lab.bin), q(printed)))
    assert.are.equal(0, code, out)
    code, out = kubectl(printed, "get nodes -o name")
    assert.are.equal(0, code, out)
    assert.are.equal(#MEMBERS, select(2, out:gsub("node/", "")))
  end)
end)
