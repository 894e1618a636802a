-- Specs for phase 28 (the kubeconfig merge, pure, then the phase's plan and its local write) and phase 29's labels.
local kubeconfig = require "cargoship.phases.lib.kubeconfig"
local update = require "cargoship.phases.update_kubeconfig"
local label = require "cargoship.phases.label_nodes"
local action = require "cargoship.action"
local cjson = require "cjson"
local engine = require "distros.engine"
local fs = require "cargoship.fs"
local yaml = require "cargoship.yaml"
local support = require "unit.phases.support"

local KEY = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSU5vdGFSZWFsS2V5Rm9yU3BlY3MK"
local CERT = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENDQVRlZ0F3SUJBZ0lJTm90QUNlcnQK"
local CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFEK"

-- What k3s writes (engine doc): one cluster, user and context named "default", 127.0.0.1.
local ADMIN = table.concat({
  "apiVersion: v1", "clusters:", "- cluster:", "    certificate-authority-data: " .. CA,
  "    server: https://127.0.0.1:6443", "  name: default", "contexts:", "- context:", "    cluster: default",
  "    user: default", "  name: default", "current-context: default", "kind: Config", "preferences: {}", "users:",
  "- name: default", "  user:", "    client-certificate-data: " .. CERT, "    client-key-data: " .. KEY, "" }, "\n")

-- The operator's file before: another cluster's context, current, with an exec user and an empty list.
local OTHER = [[
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    insecure-skip-tls-verify: true
contexts:
- name: prod
  context: {cluster: prod, user: prod-user, namespace: web}
current-context: prod
users:
- name: prod-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: get-token
      args: []
]]

local function entries(name, lb)
  local doc = assert(kubeconfig.parse(ADMIN, "admin"))
  return assert(kubeconfig.admin(doc, name or "c1", kubeconfig.server(lb or "10.0.0.5")))
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p '" .. d .. "'"))
  return d
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("the kubeconfig merge (phases.lib.kubeconfig)", function()
  it("points the server at the load balancer, IPv6 in brackets", function()
    assert.equal("https://10.0.0.5:6443", kubeconfig.server("10.0.0.5"))
    assert.equal("https://lb.example:6443", kubeconfig.server("lb.example"))
    assert.equal("https://[fd00::5]:6443", kubeconfig.server("fd00::5"))
  end)

  it("renames the admin entries after the cluster and keeps their credentials", function()
    local e = entries("c1", "fd00::5")
    assert.same({ name = "c1", cluster = { server = "https://[fd00::5]:6443", ["certificate-authority-data"] = CA } },
      e.cluster)
    assert.same({ name = "c1-admin", user = { ["client-certificate-data"] = CERT, ["client-key-data"] = KEY } }, e.user)
    assert.same({ name = "c1", context = { cluster = "c1", user = "c1-admin" } }, e.context)
    assert.same({ KEY, CERT }, kubeconfig.secrets(e))
  end)

  it("embeds files the admin kubeconfig names, read through the callback", function()
    local doc = assert(kubeconfig.parse(table.concat({ "clusters:", "- name: k", "  cluster:",
      "    certificate-authority: /etc/k/ca.crt", "    server: https://127.0.0.1:6443", "users:", "- name: a",
      "  user:", "    client-certificate: /etc/k/a.crt", "    client-key: /etc/k/a.key", "" }, "\n")))
    local files = { ["/etc/k/ca.crt"] = "ca", ["/etc/k/a.crt"] = "cert", ["/etc/k/a.key"] = "key!" }
    local e = assert(kubeconfig.admin(doc, "c1", kubeconfig.server("lb"), function(p) return files[p] end))
    assert.same({ server = "https://lb:6443", ["certificate-authority-data"] = "Y2E=" }, e.cluster.cluster)
    assert.same({ ["client-certificate-data"] = "Y2VydA==", ["client-key-data"] = "a2V5IQ==" }, e.user.user)
    local _, why = kubeconfig.admin(doc, "c1", "https://lb:6443", function() return nil, "gone" end)
    assert.matches("certificate-authority /etc/k/ca.crt: gone", why, 1, true)
  end)

  it("adds its three entries to a file holding another context, keeps every other entry, sets current", function()
    local doc = assert(kubeconfig.parse(OTHER, "config"))
    local merged, changes = kubeconfig.merge(doc, entries())
    assert.same({ "add cluster c1", "add user c1-admin", "add context c1", "set current-context c1" }, changes)
    local text = kubeconfig.render(merged)
    local back = assert(yaml.load(text))[1]
    assert.equal("c1", back["current-context"])
    assert.equal("prod", back.clusters[1].name)
    assert.is_true(back.clusters[1].cluster["insecure-skip-tls-verify"])
    assert.same({ "prod", "c1" }, { back.contexts[1].name, back.contexts[2].name })
    assert.equal("web", back.contexts[1].context.namespace)
    assert.equal("get-token", back.users[1].user.exec.command)
    -- an empty list stays a list (kubectl refuses {} where it wants []), and nothing else moved
    assert.matches("args: []", text, 1, true)
    assert.equal(KEY, back.users[2].user["client-key-data"])
  end)

  it("is converged once merged: the same entries again change nothing, byte for byte", function()
    local once = kubeconfig.render((kubeconfig.merge(assert(kubeconfig.parse(OTHER)), entries())))
    local again, changes = kubeconfig.merge(assert(kubeconfig.parse(once)), entries())
    assert.same({}, changes)
    assert.equal(once, kubeconfig.render(again))
  end)

  it("says which entries change: new credentials, a moved load balancer, another current context", function()
    local merged = kubeconfig.merge({}, entries())
    merged["current-context"] = "prod"
    local _, changes = kubeconfig.merge(merged, entries("c1", "10.0.0.6"))
    assert.same({ "change cluster c1", "set current-context c1" }, changes)
  end)

  it("merges into an empty or missing file, and refuses what is no kubeconfig", function()
    local merged, changes = kubeconfig.merge(assert(kubeconfig.parse("")), entries())
    assert.equal(4, #changes)
    assert.equal("Config", merged.kind)
    assert.equal("v1", merged.apiVersion)
    assert.is_nil(kubeconfig.parse("- a\n- b\n"))
    assert.is_nil(kubeconfig.parse("clusters: 3\n"))
    assert.is_nil(kubeconfig.parse("a: [\n"))
  end)
end)

-- The leader: k3s, whose admin kubeconfig answers `cat`; every other command is unexpected.
local function leader(admin)
  return support.host({ name = "cp1", role = "controller" }, { function(cmd)
    if cmd:find("cat -- '/etc/rancher/k3s/k3s.yaml'", 1, true) then
      if not admin then return "", "", 44 end
      return admin, "", 0
    end
    error("unexpected command on the leader: " .. cmd)
  end })
end

local function ctx_for(h, options, env, dry)
  local c, log = support.ctx({ h }, { options = options, dry_run = dry,
    cluster = { name = "c1", loadbalancer = "10.0.0.5", hosts = {}, profiles = {} },
    fields = { leader = h, engine = engine.load("k3s") } })
  c.env = function(k) return (env or {})[k] end
  return c, log
end

describe("phase 28 (update_kubeconfig)", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("has nothing to do without --update-kubeconfig", function()
    local h = leader(ADMIN)
    assert.same({}, update.prepare(ctx_for(h, {})))
    assert.same({ h }, update.prepare(ctx_for(h, { update_kubeconfig = true })))
  end)

  it("picks --kubeconfig, else $KUBECONFIG's first file, else ~/.kube/config", function()
    local function env(t) return function(k) return t[k] end end
    assert.equal("/x", update.target({ kubeconfig = "/x" }, env { KUBECONFIG = "/a:/b", HOME = "/h" }))
    assert.equal("/a", update.target({}, env { KUBECONFIG = "/a:/b", HOME = "/h" }))
    assert.equal("/h/.kube/config", update.target({}, env { KUBECONFIG = "", HOME = "/h" }))
    assert.is_nil(update.target({}, env {}))
  end)

  it("plans one local 0600 write naming the entries, with no credential in the plan or the log", function()
    local path = dir .. "/config"
    local f = assert(io.open(path, "w")); f:write(OTHER); f:close()
    local before = read(path)
    local h = leader(ADMIN)
    local c, log = ctx_for(h, { update_kubeconfig = true, kubeconfig = path })
    local plan = update.assess(c, h)
    assert.equal(1, #plan)
    local a = plan[1]
    assert.same({ "write", path, "0600", "local" }, { a.kind, a.path, a.mode, a.on })
    assert.equal("update " .. path .. " on this machine: add cluster c1, add user c1-admin, add context c1, "
      .. "set current-context c1", a.say)
    local public = cjson.encode(action.public(a))
    for _, secret in ipairs { KEY, CERT, CA } do
      assert.is_nil(public:find(secret, 1, true))
      assert.is_nil(log():find(secret, 1, true))
    end
    c.log:info("leaked %s", KEY)
    assert.is_nil(log():find(KEY, 1, true), "the key is redacted from the log")
    -- assess read the operator's file and wrote nothing: a dry run leaves it as it was
    assert.equal(before, read(path))
  end)

  it("the real run writes the file atomically, mode 0600, on this machine only; then nothing is pending", function()
    local path = dir .. "/new/config"
    local h = leader(ADMIN)
    local c = ctx_for(h, { update_kubeconfig = true }, { KUBECONFIG = path .. ":/elsewhere" }, false)
    local plan = update.assess(c, h)
    assert.matches("^create .* add cluster c1", plan[1].say)
    c._planned, c._outcomes = { [h] = plan }, {}
    assert.is_true(c:apply(h))
    assert.equal("done", c._outcomes[h][plan[1]].status)
    assert.equal(tonumber("600", 8), fs.mode(path))
    local doc = assert(yaml.load(read(path)))[1]
    assert.equal("https://10.0.0.5:6443", doc.clusters[1].cluster.server)
    assert.equal(0, h.writes_sent, "the one write went to this machine, not the leader")
    assert.same({}, update.assess(ctx_for(h, { update_kubeconfig = true, kubeconfig = path }), h))
    -- a wider mode is news: the file is rewritten 0600
    assert(os.execute("chmod 644 '" .. path .. "'"))
    local again = update.assess(ctx_for(h, { update_kubeconfig = true, kubeconfig = path }), h)
    assert.equal("update " .. path .. " on this machine: set mode 0600 (was 0644)", again[1].say)
  end)

  it("a host refuses a record meant for this machine", function()
    local h = leader(ADMIN)
    h.dry_run = false
    local outcomes, err = h:apply({ action.write { path = "/tmp/x", content = "", on = "local" } })
    assert.equal("failed", outcomes[1].status)
    assert.matches("operator's machine", err, 1, true)
  end)

  it("with -, keeps the cluster's own kubeconfig for the command to print and plans nothing", function()
    local h = leader(ADMIN)
    local c = ctx_for(h, { update_kubeconfig = true, kubeconfig = "-" })
    assert.same({}, update.assess(c, h))
    local doc = assert(yaml.load(c.kubeconfig.text))[1]
    assert.same({ "c1", "c1-admin", "c1", "c1" }, { doc.clusters[1].name, doc.users[1].name, doc.contexts[1].name,
      doc["current-context"] })
  end)

  it("fails naming the leader and the path when the cluster has no admin kubeconfig", function()
    local h = leader(nil)
    local ok, err = pcall(update.assess, ctx_for(h, { update_kubeconfig = true, kubeconfig = dir .. "/c" }), h)
    assert.is_false(ok)
    assert.matches("cp1: no admin kubeconfig at /etc/rancher/k3s/k3s.yaml", err, 1, true)
  end)
end)

describe("phase 29 (label_nodes)", function()
  local eng = engine.load("k3s")
  local function host(name, profile, labels)
    local h = support.host({ name = name, role = "worker", profile = profile })
    h.config.engine.labels = labels or {}
    h.facts.node_name = name
    return h
  end
  local function node(labels) return { labels = labels } end

  it("labels each node whose profile label is missing or not true, naming node and label", function()
    local hosts = { host("w1", "gpu"), host("w2", "gpu"), host("w3", "gpu"), host("w4", nil), host("w5", "edge") }
    local by_name = { w1 = node {}, w2 = node { ["node-role.kubernetes.io/gpu"] = "false" },
      w3 = node { ["node-role.kubernetes.io/gpu"] = "true" }, w4 = node {}, w5 = node {} }
    local recs = label.records(eng, hosts, by_name)
    local says = {}
    for i, r in ipairs(recs) do
      assert.same({ "kube", "label" }, { r.kind, r.verb })
      says[i] = r.say
    end
    assert.same({ "label node w1 node-role.kubernetes.io/gpu=true",
      "label node w2 node-role.kubernetes.io/gpu=true (was \"false\")",
      "label node w5 node-role.kubernetes.io/edge=true" }, says)
    assert.equal("env KUBECONFIG='/etc/rancher/k3s/k3s.yaml' '/usr/local/bin/k3s' 'kubectl' 'label' 'node' 'w1' "
      .. "'node-role.kubernetes.io/gpu=true' '--overwrite'", recs[1].cmd)
  end)

  it("plans a node this run registers, unless its engine labels set the label at registration", function()
    local preset = { ["node-role.kubernetes.io/gpu"] = "true" }
    local recs = label.records(eng, { host("w6", "gpu"), host("w7", "gpu", preset) }, {})
    assert.equal(1, #recs)
    assert.equal("w6", recs[1].node)
  end)

  it("has nothing to do without --label-nodes", function()
    local h = leader(ADMIN)
    assert.same({}, label.prepare(ctx_for(h, {})))
    assert.same({ h }, label.prepare(ctx_for(h, { label_nodes = true })))
  end)
end)
