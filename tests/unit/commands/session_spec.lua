-- Specs that every command that connects gets its transport from cargoship.pipeline.session, with the same options.
local config = require "cargoship.config"
local session = require "cargoship.pipeline.session"
local support = require "unit.commands.support"

-- Hosts on loopback's discard port: were a command to build a real transport past the
-- session module, it would fail here, on this machine, and nowhere else.
local CLUSTER = { name = "lab", profiles = {}, registries = {}, hosts = {
  { index = 1, name = "ctrl-1", role = "controller",
    connection = { kind = "ssh", address = "127.0.0.1", port = 9, user = "root" } },
  { index = 2, name = "worker-1", role = "worker",
    connection = { kind = "ssh", address = "127.0.0.1", port = 9, user = "root" } },
} }

describe("the transport seam of the commands", function()
  local saved, made, home
  before_each(function()
    saved, made = session.transport_for, {}
    home = support.temp_dir()
    -- a transport that connects nowhere: every host is refused, which each command reports
    session.transport_for = function(o, env)
      local t = { options = o, env = env, connects = 0, closed = false }
      function t.connect(self, _, name)
        self.connects = self.connects + 1
        return nil, name .. ": connect: refused (stand-in)", "refused"
      end
      function t.close_all(self) self.closed = true end
      made[#made + 1] = t
      return t
    end
  end)
  after_each(function()
    session.transport_for = saved
    support.remove_tree(home)
  end)

  local function run(argv)
    local code, out, err
    local fake = support.fake_config(CLUSTER, {})
    fake.select_hosts = config.select_hosts
    support.with_config(fake, function()
      code, out, err = support.run(argv, { HOME = home, XDG_CACHE_HOME = home })
    end)
    return code, out, err
  end

  local CASES = {
    { argv = { "exec", "c.yaml", "--known-hosts", "/k", "--host-key-policy", "accept-new", "--", "true" },
      code = 1, passes = 1 },
    { argv = { "unlock", "c.yaml", "--known-hosts", "/k", "--host-key-policy", "accept-new" }, code = 1, passes = 1 },
    { argv = { "repl", "c.yaml", "--known-hosts", "/k", "--host-key-policy", "accept-new", "-e", "return 1" },
      code = 0, passes = 1 },
    { argv = { "apply", "--dry-run", "c.yaml", "--known-hosts", "/k", "--host-key-policy", "accept-new" },
      code = 1, passes = 1 },
  }
  for _, case in ipairs(CASES) do
    it(case.argv[1] .. " connects through pipeline.session with its host-key options", function()
      local code, _, err = run(case.argv)
      assert.are.equal(case.code, code, err)
      assert.are.equal(case.passes, #made)
      local t = made[1]
      assert.are.equal("/k", t.options.known_hosts)
      assert.are.equal("accept-new", t.options.host_key_policy)
      assert.are.equal("function", type(t.options.passphrase))
      assert.are.equal(2, t.connects)
      assert.is_true(t.closed)
    end)
  end

  it("defaults known_hosts to ~/.ssh/known_hosts for every command alike", function()
    for _, argv in ipairs({ { "exec", "c.yaml", "--", "true" }, { "unlock", "c.yaml" }, { "repl", "c.yaml", "-e", "1" },
      { "apply", "--dry-run", "c.yaml" } }) do
      made = {}
      run(argv)
      assert.are.equal(home .. "/.ssh/known_hosts", made[1].options.known_hosts, argv[1])
      assert.are.equal("strict", made[1].options.host_key_policy, argv[1])
    end
  end)
end)
