-- Specs for ${VAR} expansion in cluster files.
local support = require "unit.config.support"
local expand = require "cargoship.config.expand"

local function env_of(t) return function(name) return t[name] end end

describe("expand.string", function()
  local env = env_of({ A = "x", EMPTY = "" })
  it("replaces ${NAME}", function()
    assert.equal("x-x", expand.string("${A}-${A}", env))
    assert.equal("", expand.string("${EMPTY}", env))
  end)
  it("turns $$ into $ and leaves other dollars alone", function()
    assert.equal("$5 ${A}", expand.string("$$5 $${A}", env))
    assert.equal("$ANSIBLE_VAULT;1.1;AES256", expand.string("$ANSIBLE_VAULT;1.1;AES256", env))
    assert.equal("lib/$1", expand.string("lib/$1", env))
    assert.equal("end$", expand.string("end$", env))
  end)
  it("refuses unset, unterminated and invalid references", function()
    assert.same({ nil, "environment variable NOPE is not set" }, { expand.string("a${NOPE}", env) })
    assert.matches("unterminated %${", select(2, expand.string("${A", env)))
    assert.matches('invalid variable name "1"', select(2, expand.string("${1}", env)))
  end)
end)

describe("expansion while loading", function()
  local env = env_of({ CLUSTER_NAME = "lab", LB_HOST = "lb.lab", CP_ADDR = "192.0.2.9", SSH_PORT = "2200",
                       SSH_USER = "ops", UNIT = "hour" })

  it("expands every string value after parsing", function()
    local c = assert(support.config.load(support.fixture("env-vars.yaml"), { env = env, expand_env = true }))
    assert.equal("lab", c.name)
    assert.equal("lb.lab", c.loadbalancer)
    assert.equal("192.0.2.9", c.hosts[1].connection.address)
    assert.equal("ops", c.hosts[1].connection.user)
    assert.equal("$5 per hour", c.hosts[1].environment.PRICE)
  end)

  it("reads an expanded integer field as the Go tool would after its textual expansion", function()
    local c = assert(support.config.load(support.fixture("env-vars.yaml"), { env = env, expand_env = true }))
    assert.equal(2200, c.hosts[1].connection.port)
    local cc = support.ok(support.doc({ config = "profiles: {p: {concurrency: \"${N}\"}}" }),
      env_of({ N = "4" }))
    assert.same({ kind = "fixed", value = 4 }, cc.profiles.p.concurrency)
    support.fails(support.host_doc("ssh: {address: h, port: \"${P}\"}"), 'got string "x"',
      env_of({ P = "x" }))
  end)

  it("reports an unset variable at its scalar with the field path, once", function()
    local e = support.errors(support.host_doc("ssh: {address: \"${NOPE}\"}"), env_of({}))
    assert.same({ "test.yaml:10:22: spec.hosts[0].ssh.address: environment variable NOPE is not set" }, e)
  end)

  it("reports every unset variable", function()
    local c, errs = support.config.load(support.fixture("env-vars.yaml"),
      { env = env_of({}), expand_env = true })
    assert.is_nil(c)
    assert.equal(6, #errs)
    assert.equal(support.fixture("env-vars.yaml")
      .. ":5:9: metadata.name: environment variable CLUSTER_NAME is not set",
      errs[1].text)
  end)

  it("does not expand mapping keys", function()
    local c = support.ok(support.host_doc("ssh: {address: h}\nenvironment: {\"${K}\": v}"),
      env_of({ K = "x" }))
    assert.equal("v", c.hosts[1].environment["${K}"])
  end)

  it("uses os.getenv by default", function()
    local home = os.getenv("HOME")
    if not home then return end
    local c = assert(support.config.load_string(support.host_doc("ssh: {address: h, keyPath: \"${HOME}" ..
      "/.ssh/k\"}"),
      "t.yaml", { expand_env = true }))
    assert.equal(home .. "/.ssh/k", c.hosts[1].connection.key_path)
  end)
end)
