-- Specs for cargoship.config loading: files, documents, error reporting and the normalized shape.
local support = require "unit.config.support"
local config = support.config

describe("config.load", function()
  it("loads the spec's minimal and full examples unchanged", function()
    for _, name in ipairs({ "spec-minimal.yaml", "spec-full.yaml" }) do
      local c, errs = config.load(support.fixture(name))
      assert.is_nil(errs and config.format_errors(errs))
      assert.is_table(c)
    end
  end)

  it("loads the examples in contrib/examples", function()
    for _, name in ipairs({ "minimal.yaml", "full.yaml" }) do
      local c, errs = config.load(support.example(name))
      assert.is_nil(errs and config.format_errors(errs))
      assert.is_table(c)
    end
  end)

  it("reports a file that does not exist as one error naming the path", function()
    local path = support.fixture("does-not-exist.yaml")
    local c, errs = config.load(path)
    assert.is_nil(c)
    assert.equal(1, #errs)
    assert.equal(path, errs[1].file)
    assert.truthy(errs[1].text:find(path, 1, true))
  end)

  it("reports a YAML syntax error with file:line:col", function()
    local path = support.fixture("syntax-error.yaml")
    local c, errs = config.load(path)
    assert.is_nil(c)
    assert.equal(1, #errs)
    assert.equal(path, errs[1].file)
    assert.is_number(errs[1].line)
    assert.matches("^" .. path:gsub("%p", "%%%0") .. ":%d+:%d+: ", errs[1].text)
  end)

  it("reports an empty file clearly", function()
    local c, errs = config.load(support.fixture("empty.yaml"))
    assert.is_nil(c)
    assert.equal(1, #errs)
    assert.matches("empty file", errs[1].text)
    local _, errs2 = config.load_string("", "blank.yaml")
    assert.equal("blank.yaml:1:1: empty file: expected a document with kind: ZarfCluster", errs2[1].text)
  end)

  it("uses the first ZarfCluster document of a multi-document file", function()
    local c = assert(config.load(support.fixture("multi-document.yaml")))
    assert.equal("second", c.name)
  end)

  it("refuses a multi-document file without a ZarfCluster document", function()
    local c, errs = config.load(support.fixture("no-cluster-document.yaml"))
    assert.is_nil(c)
    assert.equal(1, #errs)
    assert.matches("none of the 2 documents has kind: ZarfCluster", errs[1].text)
  end)

  it("validates a single document of the wrong kind like any other", function()
    local errs = support.errors(support.doc({ head = "kind: ZarfPackage\nmetadata:\n  name: t" }))
    assert.same({ 'test.yaml:1:7: kind: expected "ZarfCluster", got string "ZarfPackage"' }, errs)
  end)

  it("refuses a document that is not a mapping", function()
    local errs = support.errors("- a\n- b\n")
    assert.same({ "test.yaml:1:1: expected a mapping at the top of the document, got a sequence" }, errs)
  end)
end)

describe("error reporting", function()
  it("reports all five mistakes of five-mistakes.yaml, each with position and path", function()
    local path = support.fixture("five-mistakes.yaml")
    local c, errs = config.load(path)
    assert.is_nil(c)
    assert.equal(5, #errs)
    local texts = {}
    for i, e in ipairs(errs) do
      assert.equal(path, e.file)
      assert.is_number(e.line)
      assert.is_number(e.col)
      texts[i] = e.text:sub(#path + 2)
    end
    assert.same({
      '9:5: spec.config: missing required field "loadbalancer"',
      '14:7: spec.hosts[0].privateAdress: unknown field "privateAdress" (did you mean "privateAddress"?)',
      "20:15: spec.hosts[1].ssh.port: expected an integer in 1..65535, got integer 70000",
      '21:13: spec.hosts[2].role: expected one of "controller", "worker", got string "master"',
      '31:23: spec.hosts[3].host.firewall.rules[0].action: expected one of "allow", "deny", "reject",'
        .. ' got string "permit"',
    }, texts)
  end)

  it("gives every error its fields and sorts them by line and column", function()
    local _, errs = support.load(support.doc({
      hosts = { "role: worker\nssh: {address: 192.0.2.1, port: 0}",
                "role: boss\nssh: {adress: x}" } }))
    local last_line, last_col = 0, 0
    for _, e in ipairs(errs) do
      assert.equal("test.yaml", e.file)
      assert.is_string(e.path)
      assert.is_string(e.message)
      assert.equal(string.format("%s:%d:%d: %s: %s", e.file, e.line, e.col, e.path, e.message), e.text)
      assert.is_true(e.line > last_line or (e.line == last_line and e.col >= last_col))
      last_line, last_col = e.line, e.col
    end
    assert.equal(4, #errs)
  end)

  it("points a missing field at its parent mapping", function()
    local errs = support.errors(support.host_doc("ssh: {user: admin}"))
    assert.same({ 'test.yaml:10:12: spec.hosts[0].ssh: missing required field "address"' }, errs)
  end)

  it("names the expected type", function()
    support.fails(support.host_doc("ssh: [192.0.2.1]"),
      "test.yaml:10:12: spec.hosts[0].ssh: expected a mapping, got a sequence")
    support.fails(support.host_doc("ssh: {address: 192.0.2.1, port: abc}"),
      'spec.hosts[0].ssh.port: expected an integer, got string "abc"')
    support.fails(support.host_doc("ssh: {address: 192.0.2.1}\nhostname: 12"),
      "spec.hosts[0].hostname: expected a string, got integer 12 (quote it to keep it as text)")
  end)

  it("suggests the field that was meant", function()
    support.fails(support.host_doc("ssh: {address: 192.0.2.1, keypath: /k}"),
      'test.yaml:10:33: spec.hosts[0].ssh.keypath: unknown field "keypath" (did you mean "keyPath"?)')
    support.fails(support.host_doc("ssh: {address: 192.0.2.1}\nprivateAdress: 10.0.0.1"),
      'unknown field "privateAdress" (did you mean "privateAddress"?)')
    support.fails(support.host_doc("ssh: {address: 192.0.2.1}\nROLE: worker"),
      'unknown field "ROLE" (did you mean "role"?)')
    local errs = support.fails(support.host_doc("ssh: {address: 192.0.2.1}\nzzzzzz: 1"),
      'unknown field "zzzzzz"')
    assert.falsy(errs[1]:find("did you mean", 1, true))
  end)

  it("explains a field written in the wrong block", function()
    support.fails(support.host_doc("ssh: {address: 192.0.2.1}\naddress: 192.0.2.1"),
      'unknown field "address" (it belongs inside the ssh or openSSH block)')
    support.fails(support.doc({ config = "hosts: []" }), 'unknown field "hosts"')
  end)

  it("formats errors one per line", function()
    local _, errs = support.load(support.doc({ loadbalancer = false, head = "kind: ZarfCluster" }))
    local text = config.format_errors(errs)
    assert.equal(#errs, select(2, text:gsub("\n", "")) + 1)
    assert.matches('missing required field "metadata"', text)
  end)
end)

describe("normalized cluster", function()
  local c
  setup(function()
    c = assert(config.load(support.example("full.yaml")))
  end)

  it("has the document-level fields", function()
    assert.equal(support.example("full.yaml"), c.file)
    assert.equal("zarf.dev/v1alpha1", c.api_version)
    assert.equal("plant-a", c.name)
    assert.equal("plant-a-api.example.internal", c.loadbalancer)
    assert.is_table(c.raw)
    assert.equal("ZarfCluster", c.raw.kind)
    assert.same({ "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p" }, c.encryption.recipients)
    assert.same({ "traefik" }, c.values.addons.disabled)
  end)

  it("keeps hosts in file order with index, source and name", function()
    assert.equal(4, #c.hosts)
    for i, h in ipairs(c.hosts) do
      assert.equal(i, h.index)
      assert.equal(string.format("spec.hosts[%d]", i - 1), h.source.path)
      assert.equal(c.file, h.source.file)
      assert.is_number(h.source.line)
    end
    assert.same({ "pa-cp1", "pa-cp2", "198.51.100.21", "localhost" },
      { c.hosts[1].name, c.hosts[2].name, c.hosts[3].name, c.hosts[4].name })
  end)

  it("normalizes connections with defaults", function()
    local ssh = c.hosts[1].connection
    assert.same({ kind = "ssh", address = "198.51.100.11", user = "admin", port = 2222,
      key_path = "~/.ssh/plant_a_ed25519",
      options = { ServerAliveInterval = "30", StrictHostKeyChecking = "yes" },
      bastion = { kind = "ssh", address = "198.51.100.2", user = "jump", port = 22, options = {},
        bastion = { kind = "ssh", address = "gw.example.net", user = "jump", port = 22, options = {} } } },
      ssh)
    assert.same({ kind = "openssh", address = "pa-cp2.example.internal",
      config_path = "~/.ssh/config.plant-a",
      disable_multiplexing = true, options = {} }, c.hosts[2].connection)
    assert.same({ kind = "ssh", address = "198.51.100.21", user = "root", port = 22, options = {} },
      c.hosts[3].connection)
    assert.equal("localhost", c.hosts[4].connection.kind)
  end)

  it("normalizes per-host settings", function()
    local w = c.hosts[3]
    assert.equal("worker", w.role)
    assert.equal("general", w.profile)
    assert.equal("10.20.0.21", w.private_address)
    assert.equal("eth1", c.hosts[1].private_interface)
    assert.equal("http://proxy.example.internal:3128", w.environment.HTTPS_PROXY)
    assert.same({ name = "motd", data = "managed by cargoship\n", dst = "/etc/motd", perm = "0644",
      mode = 420 },
      w.files[1])
    assert.same({ name = "site-ca", src = "files/site-ca.pem", dst_dir = "/etc/pki/ca-trust/source/anchors",
      perm = "0644", mode = 420, user = "root", group = "root" }, w.files[2])
    assert.same({ disk = "ssd", tier = "general" }, w.engine.labels)
    assert.same({ "gpu=true:NoSchedule" }, w.engine.taints)
    local fwd = w.host.firewall.rules[1]
    assert.same({ key = "ingress-http", name = "ingress-http", action = "allow", direction = "forward",
      source = "any", destination = "any", ingress = "eth0", egress = "cni0", port = "80", port_from = 80,
      port_to = 80, protocol = "tcp" }, fwd)
    assert.equal("deny", w.host.firewall.rules[2].action)
    assert.equal("out", w.host.firewall.rules[2].direction)
    assert.equal("ACCEPT", w.host.policy["ingress-web"].target)
    assert.equal("external", w.host.policy["ingress-web"].ingress)
    assert.same({ { port = "443", from = 443, to = 443, protocol = "tcp" } },
      w.host.policy["ingress-web"].ports)
    -- Unset blocks are present and empty, so merging can test emptiness.
    assert.same({ labels = {}, taints = {} }, c.hosts[4].engine)
    assert.same({ ports = {}, firewall = { rules = {} }, policy = {} }, c.hosts[4].host)
    assert.same({}, c.hosts[4].environment)
    assert.same({}, c.hosts[4].files)
  end)

  it("normalizes profiles", function()
    assert.same({ kind = "fixed", value = 1 }, c.profiles.control.concurrency)
    assert.same({ kind = "percent", value = 25 }, c.profiles.general.concurrency)
    assert.equal("control", c.profiles.control.name)
    assert.same({ "CriticalAddonsOnly=true:NoExecute" }, c.profiles.control.engine.taints)
    assert.same({ port = "2379-2381", from = 2379, to = 2381, protocol = "tcp" },
      c.profiles.control.host.ports[2])
    assert.equal("spec.config.profiles.control", c.profiles.control.source.path)
  end)

  it("normalizes registries in file order", function()
    local r = c.registries
    assert.equal(4, #r)
    assert.equal("docker.io", r[1].name)
    assert.equal("mirror.example.internal:5000", r[1].config_host)
    assert.equal("https://mirror.example.internal:5000", r[1].proxy.endpoint)
    assert.equal("mirror.example.internal:5000", r[1].proxy.url)
    assert.same({ { pattern = "^library/(.*)", replacement = "dockerhub/library/$1" },
                  { pattern = "^(rancher|longhorn)/(.*)", replacement = "dockerhub/$1/$2" } },
                    r[1].proxy.rewrite)
    assert.equal("puller", r[1].auth.user)
    assert.matches("^%$ANSIBLE_VAULT", r[1].auth.pass)
    assert.equal("/etc/pki/ca-trust/source/anchors/site-ca.pem", r[1].tls.ca_file)
    assert.matches("BEGIN CERTIFICATE", r[2].tls.ca)
    assert.equal("/etc/cargoship/tls/client.key", r[2].tls.key_file)
    assert.is_nil(r[2].proxy)
    assert.equal("registry.example.internal:5000", r[2].config_host)
    assert.is_true(r[4].tls.insecure_skip_verify)
    assert.is_nil(r[4].auth)
  end)

  it("defaults what is not written", function()
    local m = assert(config.load(support.example("minimal.yaml")))
    assert.same({}, m.profiles)
    assert.same({}, m.registries)
    assert.same({}, m.values)
    assert.equal("zarf.dev/v1alpha1", m.api_version)
    local h = m.hosts[1]
    assert.equal("root", h.connection.user)
    assert.equal(22, h.connection.port)
    assert.is_nil(h.profile)
    assert.is_nil(h.hostname)
    local fw = support.ok(support.host_doc("ssh: {address: 192.0.2.1}\nhost:\n  firewall:\n    rules:\n"
      .. "      - {action: allow}\n  policy:\n    p: {ingress: {name: a}, egress: {name: b}}"))
    local rule = fw.hosts[1].host.firewall.rules[1]
    assert.equal("in", rule.direction)
    assert.equal("any", rule.source)
    assert.equal("any", rule.destination)
    assert.equal("CONTINUE", fw.hosts[1].host.policy.p.target)
    local api = support.ok(support.doc({ head = "kind: ZarfCluster\nmetadata: {name: t}" }))
    assert.equal("zarf.dev/v1alpha1", api.api_version)
  end)

  it("makes host names unique with the port, then the user", function()
    local cl = support.ok(support.doc({ hosts = {
      "role: controller\nssh: {address: 192.0.2.1}",
      "role: worker\nssh: {address: 192.0.2.1, port: 2222}",
      "role: worker\nssh: {address: 192.0.2.2, user: a}",
      "role: worker\nssh: {address: 192.0.2.2, user: b}",
      "role: worker\nhostname: w5\nssh: {address: 192.0.2.3}",
    } }))
    local names = {}
    for i, h in ipairs(cl.hosts) do names[i] = h.name end
    assert.same({ "192.0.2.1:22", "192.0.2.1:2222", "a@192.0.2.2:22", "b@192.0.2.2:22", "w5" }, names)
  end)
end)
