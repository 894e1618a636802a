-- Specs for the verbs and fields phases ask an engine instead of naming it: every engine module, one contract.
local action = require "cargoship.action"
local engine = require "distros.engine"

local CP1 = { name = "cp1", role = "controller", fqdn = "cp1.example.internal", private_address = "10.0.0.1" }
local CP2 = { name = "cp2", role = "controller", fqdn = "cp2.example.internal", private_address = "10.0.0.2" }
local W1 = { name = "w1", role = "worker", private_address = "10.0.0.3" }
local SECRETS = {
  rancher = { token = string.rep("T", 64), agent_token = string.rep("A", 64) },
  kubeadm = { token = "7t2weq.bjbawausm0jaxury", ca_cert_hash = "sha256:" .. string.rep("3", 64),
              certificate_key = string.rep("c", 64) },
}
local VERSIONS = { rke2 = "1.35.4-rke2r1", k3s = "1.35.2-k3s1", upstream = "1.35.3" }

local function cluster(secret)
  return { leader = CP1, controllers = { CP1, CP2 }, nodes = { CP1, CP2, W1 }, loadbalancer = "lb.example.internal",
           secret = secret }
end

local function paths(files)
  local out = {}
  for _, f in ipairs(files) do out[#out + 1] = f.path end
  table.sort(out)
  return out
end

local function of(type_name)
  return assert(engine.for_package { type = type_name, version = VERSIONS[type_name],
    engine = { audit = { rules = { { level = "Metadata" } } }, podSecurity = { plugins = {} } } })
end

for _, t in ipairs(engine.TYPES) do
  describe(t .. " answers for itself:", function()
    local e = of(t)
    local secret = e.joins_by_command and SECRETS.kubeadm or SECRETS.rancher

    it("its fields are booleans, and an engine that joins by command spells both commands", function()
      for _, f in ipairs { "applies_manifests", "joins_by_command", "secret_at_configure" } do
        assert.equal("boolean", type(e[f]), f)
      end
      assert.is_true(e.joins_by_command ~= e.secret_at_configure, "one way to hand the join secret out")
      if e.joins_by_command then
        assert.equal("string", type(e:bootstrap_cmd()))
        assert.equal("string", type(e:join_cmd()))
      end
    end)

    it("static files plus join files are every file of the node, none twice", function()
      for _, n in ipairs { CP1, CP2, W1 } do
        local c = cluster(secret)
        local both = {}
        for _, f in ipairs(e:static_files(n, c)) do both[#both + 1] = f end
        for _, f in ipairs(e:join_files(n, c)) do both[#both + 1] = f end
        assert.same(paths(e:config_files(n, c)), paths(both), n.name)
        -- static files never need the secret: rendering them without one works
        assert.same(paths(e:static_files(n, cluster(nil))), paths(e:static_files(n, c)))
        if not e.joins_by_command then assert.same({}, e:join_files(n, c)) end
      end
    end)

    it("the policy files sit in its config dir, on controllers only", function()
      assert.same({ e.config_dir .. "/audit.yaml", e.config_dir .. "/pss.yaml" }, paths(e:policy_files(CP2, cluster())))
      assert.same({}, e:policy_files(W1, cluster()))
    end)

    it("first_start enables first and ends waiting for Ready; a node not joined is restarted", function()
      for _, n in ipairs { CP1, CP2, W1 } do
        local acts = e:first_start(n, cluster(secret), { leader = n == CP1, timeout = 42 })
        for _, a in ipairs(acts) do action.check(a) end
        assert.same({ "service", "enable", e:service(n.role) }, { acts[1].kind, acts[1].verb, acts[1].service })
        assert.same({ "step", "wait_ready", n.name }, { acts[#acts].kind, acts[#acts].name, acts[#acts].node })
        local middle = acts[2]
        if e.joins_by_command then
          assert.same({ "step", n == CP1 and "bootstrap" or "join" }, { middle.kind, middle.name })
        else
          assert.same({ "service", "start", 42 }, { middle.kind, middle.verb, middle.timeout })
          local again = e:first_start(n, cluster(secret), { running = true, timeout = 42 })
          assert.equal("restart", again[2].verb)
        end
      end
    end)

    it("a bootstrapped node only starts its service", function()
      local n = setmetatable({ bootstrapped = true }, { __index = W1 })
      local acts = e:first_start(n, cluster(secret), { timeout = 5 })
      assert.same({ "enable", "start" }, { acts[1].verb, acts[2].verb })
    end)

    it("secret_files: written where Configure engine hands the secret out, and never the server token to a worker",
      function()
        if not e.secret_at_configure then
          assert.same({}, e:secret_files(W1, secret))
          return
        end
        assert.same({ e.token_path, e.agent_token_path }, { e:secret_files(CP2, secret)[1].path,
                                                             e:secret_files(CP2, secret)[2].path })
        local w = e:secret_files(W1, secret)
        assert.equal(1, #w)
        assert.same({ e.agent_token_path, secret.agent_token .. "\n", true }, { w[1].path, w[1].content, w[1].secret })
        assert.has_error(function() e:secret_files(W1, nil) end, "no join secret: the cluster has no controller")
      end)

    it("upgrade drains first and uncordons last, on the leader", function()
      local os = require("cargoship.os").by_name("debian"):new { service_manager = "systemd" }
      local acts = e:upgrade(W1, cluster(secret), { method = "binary", moves = {} }, os)
      assert.same({ "drain", "leader" }, { acts[1].name, acts[1].on })
      assert.same({ "uncordon", "leader" }, { acts[#acts].name, acts[#acts].on })
    end)
  end)
end

describe("the engines that join by command", function()
  for _, t in ipairs(engine.TYPES) do
    local e = of(t)
    if e.joins_by_command then
      it(t .. ": its start and its steps run one spelling of bootstrap and join", function()
        local lead = e:start(CP1, cluster())
        local join = e:start(W1, cluster(SECRETS.kubeadm))
        assert.equal(e:bootstrap_cmd(), lead[2].cmd)
        assert.equal(e:join_cmd(), join[2].cmd)
        assert.equal(e.join_timeout, lead[2].timeout)
      end)

      it(t .. ": the join secret comes from the leader's answers; a control plane also needs a certificate key",
        function()
          assert.equal(1, #e:join_secret_cmds("worker"))
          assert.equal(2, #e:join_secret_cmds("controller"))
          local join = "kubeadm join lb:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:"
            .. string.rep("a", 64) .. "\n"
          local s = assert(e:join_secret_of({ join }, "worker"))
          assert.equal("abcdef.0123456789abcdef", s.token)
          assert.same({ nil, "printed no certificate key" }, { e:join_secret_of({ join, "nothing\n" }, "controller") })
          assert.same({ nil, "printed no join command" }, { e:join_secret_of({ "" }, "worker") })
          local c = assert(e:join_secret_of({ join, string.rep("b", 64) .. "\n" }, "controller"))
          assert.equal(string.rep("b", 64), c.certificate_key)
          assert.same({ nil, "kubeadm init printed no join command" }, { e:bootstrap_secret("") })
          assert.equal(2, #assert(e:bootstrap_secret(join)))
        end)
    end
  end
end)

describe("the engine list", function()
  it("is every module the package schema accepts, each loadable and named after its type", function()
    assert.same(engine.TYPES, require("cargoship.package.schema").ENGINES)
    for _, t in ipairs(engine.TYPES) do assert.equal(t, assert(engine.load(t)).name) end
  end)

  it("shares what they render alike: base64 and the inline CA path come from the base", function()
    local rancher = require "distros.rancher"
    assert.is_nil(rawget(rancher, "base64"))
    assert.is_nil(rawget(rancher, "policy_files"))
    assert.is_nil(rawget(rancher, "configure"))
    assert.equal("dXNlcjpwYXNz", engine.base64("user:pass"))
    assert.equal("/etc/cargoship/tls/reg.example_5000.crt", engine.ca_path("reg.example:5000"))
  end)
end)
