-- Specs for the Rancher family (rke2, k3s): node facts and a cluster view in, config files and action records out.
local engine = require "distros.engine"
local os_registry = require "cargoship.os"
local yaml = require "cargoship.yaml"

local rke2, k3s = require "distros.rke2", require "distros.k3s"

local CP1 = { name = "cp1", role = "controller", hostname = "cp1.example.internal", fqdn = "cp1.example.internal",
              private_address = "10.0.0.1", labels = { zone = "a", ["node.kubernetes.io/pool"] = "infra" } }
local CP2 = { name = "cp2", role = "controller", fqdn = "cp2.example.internal", private_address = "10.0.0.2" }
local W1 = { name = "w1", role = "worker", private_address = "10.0.0.3", taints = { "dedicated=gpu:NoSchedule" } }

local function cluster(o)
  local c = { leader = CP1, controllers = { CP1, CP2 }, loadbalancer = "lb.example.internal" }
  for k, v in pairs(o or {}) do c[k] = v end
  return c
end

local function loaded(file) return assert(yaml.load(file.content))[1] end

describe("rancher config.yaml", function()
  local pkg = { type = "rke2", version = "1.34.3-rke2r3",
                engine = { config = { cni = "canal", disable = { "rke2-ingress-nginx" },
                                      ["kube-apiserver-arg"] = { "v=2" },
                                      ["write-kubeconfig-mode"] = "0600" } } }
  local e = engine.for_package(pkg)

  it("leader: node name, private address, SANs of every controller and the LB, token files, no server", function()
    local f = e:render_config(CP1, cluster())
    assert.same({ "/etc/rancher/rke2/config.yaml", "0600" }, { f.path, f.mode })
    local c = loaded(f)
    assert.equal("cp1", c["node-name"])
    assert.equal("10.0.0.1", c["node-ip"])
    assert.same({ "lb.example.internal", "cp1", "cp1.example.internal", "cp2", "cp2.example.internal" }, c["tls-san"])
    assert.equal("/etc/rancher/rke2/token", c["token-file"])
    assert.equal("/etc/rancher/rke2/agent-token", c["agent-token-file"])
    assert.is_nil(c.server)
    assert.same({ "node.kubernetes.io/pool=infra", "zone=a" }, c["node-label"])
    assert.equal("/var/lib/rancher/rke2", c["data-dir"])
    -- the package's own keys come through; a string that looks like a number stays a string
    assert.equal("canal", c.cni)
    assert.equal("0600", c["write-kubeconfig-mode"])
  end)

  it("another controller joins the leader's supervisor on 9345", function()
    local c = loaded(e:render_config(CP2, cluster()))
    assert.equal("https://cp1.example.internal:9345", c.server)
    assert.equal("/etc/rancher/rke2/token", c["token-file"])
  end)

  it("a worker joins through the LB with the agent token, without server-only keys", function()
    local c = loaded(e:render_config(W1, cluster()))
    assert.equal("https://lb.example.internal:9345", c.server)
    assert.equal("/etc/rancher/rke2/agent-token", c["token-file"])
    assert.same({ "dedicated=gpu:NoSchedule" }, c["node-taint"])
    for _, k in ipairs({ "disable", "kube-apiserver-arg", "tls-san", "agent-token-file" }) do
      assert.is_nil(c[k], k)
    end
    assert.equal("canal", c.cni)
  end)

  it("k3s joins on 6443, where its supervisor and API share the port", function()
    local k = engine.for_package { type = "k3s", version = "1.35.5-k3s1" }
    assert.equal("https://lb.example.internal:6443", loaded(k:render_config(W1, cluster())).server)
    assert.equal("https://cp1.example.internal:6443", loaded(k:render_config(CP2, cluster())).server)
    assert.equal("/etc/rancher/k3s/agent-token", loaded(k:render_config(W1, cluster()))["token-file"])
  end)

  it("without an LB a worker joins the leader; an IPv6 address is bracketed", function()
    local leader = { name = "cp6", role = "controller", private_address = "fd00::1" }
    local c = loaded(k3s:render_config(W1, { leader = leader, controllers = { leader } }))
    assert.equal("https://[fd00::1]:6443", c.server)
    assert.has_error(function() k3s:render_config(W1, {}) end)
  end)

  it("points at audit and PSA files when the package has them", function()
    local c = loaded(rke2:render_config(CP1, cluster { engine_config = { audit = { rules = {} },
                                                                          podSecurity = { plugins = {} } } }))
    assert.equal("/etc/rancher/rke2/audit.yaml", c["audit-policy-file"])
    assert.equal("/etc/rancher/rke2/pss.yaml", c["pod-security-admission-config-file"])
  end)
end)

describe("rancher registries.yaml", function()
  local REGS = {
    { name = "docker.io", config_host = "mirror.example:5000",
      proxy = { endpoint = "https://mirror.example:5000",
                rewrite = { { pattern = "^(.*)$", replacement = "lib/$1" } } },
      auth = { user = "u", pass = "p" }, tls = { ca = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n" } },
    { name = "quay.io", config_host = "quay.io", auth = { token = "t0k" }, tls = { insecure_skip_verify = true } },
    { name = "ghcr.io", config_host = "ghcr.io", auth = { user = "only-user" },
      tls = { ca_file = "/etc/pki/ghcr.pem" } },
  }

  it("mirrors for proxies, configs per config host, auth and TLS as the engine reads them", function()
    local files = rke2:render_registries({ registries = REGS }).files
    assert.same({ "/etc/rancher/rke2/registries.yaml", "0600" }, { files[1].path, files[1].mode })
    local r = loaded(files[1])
    assert.same({ endpoint = { "https://mirror.example:5000" }, rewrite = { ["^(.*)$"] = "lib/$1" } },
      r.mirrors["docker.io"])
    assert.is_nil(r.mirrors["quay.io"])
    assert.same({ auth = { auth = "dTpw" }, tls = { ca_file = "/etc/cargoship/tls/mirror.example_5000.crt" } },
      r.configs["mirror.example:5000"])
    assert.same({ auth = { identity_token = "t0k" }, tls = { insecure_skip_verify = true } }, r.configs["quay.io"])
    assert.same({ auth = { username = "only-user" }, tls = { ca_file = "/etc/pki/ghcr.pem" } }, r.configs["ghcr.io"])
    assert.same({ "/etc/cargoship/tls/mirror.example_5000.crt", "0600", REGS[1].tls.ca },
      { files[2].path, files[2].mode, files[2].content })
    assert.equal(2, #files)
  end)

  it("an empty registries file when there are none; base64 is the standard one", function()
    assert.equal("{}\n", k3s:render_registries({}).files[1].content)
    assert.equal("/etc/rancher/k3s/registries.yaml", k3s:render_registries({}).files[1].path)
    assert.same({ "", "Zg==", "Zm8=", "Zm9v", "dXNlcjpwYXNz" },
      { rke2.base64(""), rke2.base64("f"), rke2.base64("fo"), rke2.base64("foo"), rke2.base64("user:pass") })
  end)

  it("configure writes every file, none of their content public", function()
    local acts = rke2:configure(W1, cluster { registries = REGS })
    assert.equal(3, #acts)
    for _, a in ipairs(acts) do
      assert.equal("write", a.kind)
      assert.is_nil(require("cargoship.action").public(a).content)
    end
  end)
end)

describe("rancher join secret", function()
  local dir, e
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir)
    e = rke2:extend { config_dir = dir } -- the same verbs over a scratch directory
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  local function sh(cmd)
    local p = io.popen("/bin/sh -c " .. require("cargoship.util").quote(cmd) .. "; echo rc=$?")
    local out = p:read("a")
    p:close()
    return out
  end

  it("reads the leader's token files, and nothing (not an error) before they exist", function()
    assert.equal(dir .. "/token", e.token_path)
    assert.equal("rc=0\n", sh(e:join_secret_read()))
    assert.is_nil(e:parse_join_secret(""))
    local bytes = {}
    for i = 1, 128 do bytes[i] = string.char((i * 7) % 256) end
    local s = e:new_secret(table.concat(bytes))
    for _, a in ipairs(e:join_secret_write(s)) do
      assert.same({ "write", "0600", true }, { a.kind, a.mode, a.secret })
      local f = assert(io.open(a.path, "w"))
      f:write(a.content)
      f:close()
    end
    local out = sh(e:join_secret_read())
    assert.same(s, e:parse_join_secret(out))
    assert.equal(64, #s.token)
    assert.are_not.equal(s.token, s.agent_token)
  end)

  it("refuses to write half a secret or to make one from too few bytes", function()
    assert.has_error(function() rke2:join_secret_write({ token = "x" }) end)
    assert.has_error(function() rke2:new_secret("short") end)
  end)
end)

describe("rancher install, stop, upgrade, reset", function()
  local rocky = os_registry.by_name("rocky"):new { service_manager = "systemd" }

  it("installs RPMs through the host's package manager and binaries by moving the staged file", function()
    local acts = rke2:install(W1, { method = "rpm", paths = { "/var/lib/rancher/rke2/rpm/rke2-agent.rpm" },
                                    names = { "rke2-agent" } }, rocky)
    assert.equal("dnf install -y --nogpgcheck '/var/lib/rancher/rke2/rpm/rke2-agent.rpm'", acts[1].cmd)
    assert.matches("versionlock add 'rke2-agent'", acts[2].cmd, 1, true)
    local bin = k3s:install(W1, { method = "binary",
                                  moves = { { from = "/usr/local/bin/k3s.tmp.17", to = "/usr/local/bin/k3s" } } })
    assert.equal("mv -f -- '/usr/local/bin/k3s.tmp.17' '/usr/local/bin/k3s'", bin[1].cmd)
    assert.has_error(function() rke2:install(W1, { method = "rpm", paths = {} }) end)
    assert.has_error(function() rke2:install(W1, { method = "snap" }, rocky) end)
  end)

  it("stop runs the killall script when present and drops the image cache index", function()
    local acts = k3s:stop(W1)
    assert.same({ "stop", "k3s-agent" }, { acts[1].verb, acts[1].service })
    assert.equal("if command -v 'k3s-killall.sh' >/dev/null 2>&1; then 'k3s-killall.sh'; fi", acts[2].cmd)
    assert.equal("/var/lib/rancher/k3s/agent/images/.cache.json", acts[3].path)
  end)

  it("upgrade: drain on the leader, stop, install, configure, start, wait Ready, uncordon", function()
    local acts = rke2:upgrade(W1, cluster(), { method = "binary", moves = { { from = "/a.tmp", to = "/a" } } })
    local shape = {}
    for i, a in ipairs(acts) do shape[i] = a.kind .. ":" .. (a.name or a.verb or a.path or a.cmd) end
    assert.same({ "step:drain", "service:stop", "run:if command -v 'rke2-killall.sh' >/dev/null 2>&1; then"
      .. " 'rke2-killall.sh'; fi", "remove:/var/lib/rancher/rke2/agent/images/.cache.json",
      "run:mv -f -- '/a.tmp' '/a'",
      "write:/etc/rancher/rke2/config.yaml", "write:/etc/rancher/rke2/registries.yaml", "service:start",
      "service:enable", "step:wait_ready", "step:uncordon" }, shape)
    assert.equal("leader", acts[1].on)
    assert.equal(rke2:drain("w1"), acts[1].cmd)
  end)

  it("reset stops, removes the packages and the data and config dirs", function()
    local deb = os_registry.by_name("debian"):new {}
    local acts = rke2:reset(CP1, deb, { "rke2-server" })
    -- unpinned first (apt refuses to remove a held package), then purged with its conffiles
    assert.equal("{ apt-mark unhold 'rke2-server'; } >/dev/null 2>&1 || true", acts[4].cmd)
    assert.equal("env DEBIAN_FRONTEND=noninteractive apt-get -q -y purge 'rke2-server'", acts[5].cmd)
    assert.same({ "/var/lib/rancher/rke2", true }, { acts[6].path, acts[6].recursive })
    assert.same({ "/etc/rancher/rke2", true }, { acts[7].path, acts[7].recursive })
  end)

  it("image tarballs go to the agent's images dir, which imports them itself", function()
    assert.equal("/var/lib/rancher/rke2/agent/images", rke2:image_dir())
    assert.equal("/var/lib/rancher/k3s/agent/images", k3s:image_dir())
    assert.same({}, k3s:image_import({ "/var/lib/rancher/k3s/agent/images/a.tar" }))
  end)
end)
