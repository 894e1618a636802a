-- Specs of `cargoship validate`: every error with its place, the summary, the JSON for machines.
local cjson = require "cjson"
local support = require "unit.commands.support"
local validate = require "cargoship.commands.validate"

local CLUSTER = {
  name = "plant-a",
  hosts = { { role = "controller" }, { role = "controller" }, { role = "worker" } },
  profiles = { general = {}, control = {} },
  registries = { { name = "docker.io" }, { name = "registry.example.internal" } },
}
local ONE_ERROR = { { file = "bad.yaml", line = 4, col = 9, path = "spec.hosts[0].role",
  message = "expected \"x\"", text = "bad.yaml:4:9: spec.hosts[0].role: expected \"x\"" } }

describe("validate with a stand-in loader", function()
  local fake = support.fake_config(CLUSTER, ONE_ERROR)

  it("summarises a valid cluster and exits 0", function()
    support.with_config(fake, function()
      local code, out, err = support.run({ "validate", "c.yaml" })
      assert.are.equal(0, code)
      assert.are.equal("", err)
      assert.are.equal("c.yaml is valid.\n" ..
        "cluster:    plant-a\n" ..
        "hosts:      3 (2 controllers, 1 worker)\n" ..
        "profiles:   control, general\n" ..
        "registries: docker.io, registry.example.internal\n", out)
    end)
  end)

  it("prints the errors and a count, singular when there is one, and exits 1", function()
    support.with_config(fake, function()
      local code, out, err = support.run({ "validate", "bad.yaml" })
      assert.are.equal(1, code)
      assert.are.equal("", out)
      assert.are.equal("bad.yaml:4:9: spec.hosts[0].role: expected \"x\"\nbad.yaml: 1 error\n", err)
    end)
  end)

  it("reports JSON for machines, valid or not", function()
    support.with_config(fake, function()
      local code, out = support.run({ "validate", "--output", "json", "c.yaml" })
      assert.are.equal(0, code)
      assert.are.same({ valid = true, errors = {}, cluster = { name = "plant-a", hosts = 3, controllers = 2,
        workers = 1, profiles = { "control", "general" },
        registries = { "docker.io", "registry.example.internal" } } }, cjson.decode(out))
      assert.matches('"errors":[]', out, 1, true)
      code, out = support.run({ "validate", "--output=json", "bad.yaml" })
      assert.are.equal(1, code)
      local doc = cjson.decode(out)
      assert.is_false(doc.valid)
      assert.are.equal(cjson.null, doc.cluster)
      assert.are.same(ONE_ERROR, doc.errors)
    end)
  end)

  it("writes JSON strings safely", function()
    assert.are.equal('"a\\"b\\\\c\\nd\\u0001"', validate.json("a\"b\\c\nd\1"))
    local v = { b = { c = 1.5 }, a = validate.json_array({}), n = validate.json_null }
    assert.are.equal('{"a":[],"b":{"c":1.5},"n":null}', validate.json(v))
  end)
end)

-- The real loader (lua/cargoship/config) on the shipped examples and the five-mistakes fixture.
describe("validate with the cluster-file loader", function()
  local have_loader, why = pcall(require, "cargoship.config")
  if not have_loader then
    pending("the cluster-file loader does not load in this build: " .. tostring(why):match("^[^\n]*"))
    return
  end

  for _, example in ipairs({ "contrib/examples/minimal.yaml", "contrib/examples/full.yaml" }) do
    it("accepts " .. example, function()
      local code, out, err = support.run({ "validate", example })
      assert.are.equal("", err)
      assert.are.equal(0, code)
      assert.matches("^" .. example:gsub("%p", "%%%0") .. " is valid%.\ncluster: +%S+\nhosts: +%d+ %(", out)
    end)
  end

  it("reports all five mistakes of five-mistakes.yaml with place and field, and exits 1", function()
    local file = "tests/fixtures/clusters/five-mistakes.yaml"
    local code, out, err = support.run({ "validate", file })
    assert.are.equal(1, code)
    assert.are.equal("", out)
    local lines = {}
    for line in err:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal(6, #lines, err)
    local prefix = file:gsub("%p", "%%%0")
    for i = 1, 5 do
      assert.matches("^" .. prefix .. ":%d+:%d+: spec%.?[%w%.%[%]_\"-]*: %S", lines[i])
    end
    assert.are.equal(file .. ": 5 errors", lines[6])
  end)

  it("gives the same five errors as JSON", function()
    local file = "tests/fixtures/clusters/five-mistakes.yaml"
    local code, out = support.run({ "validate", "--output", "json", file })
    assert.are.equal(1, code)
    local doc = cjson.decode(out)
    assert.is_false(doc.valid)
    assert.are.equal(5, #doc.errors)
    for _, e in ipairs(doc.errors) do
      assert.is_number(e.line)
      assert.is_number(e.col)
      assert.is_string(e.path)
      assert.is_string(e.message)
    end
  end)

  it("reports a missing file as an error, exit 1", function()
    local code, _, err = support.run({ "validate", "no/such/cluster.yaml" })
    assert.are.equal(1, code)
    assert.matches("no/such/cluster.yaml", err, 1, true)
    assert.matches("no/such/cluster.yaml: 1 error\n", err, 1, true)
  end)

  -- Error texts quote values cut to 60 bytes, and values carry bytes from the environment:
  -- neither may make the JSON document invalid UTF-8.
  it("emits valid UTF-8 JSON for a value cut inside a character and for raw bytes", function()
    local dir = support.temp_dir()
    local path = dir .. "/c.yaml"
    local f = assert(io.open(path, "wb"))
    f:write("apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: t}\nspec:\n",
      "  config: {loadbalancer: lb.example.internal}\n  hosts:\n",
      "    - {role: controller, hostname: \"", ("é"):rep(80), "\", ssh: {address: 192.0.2.1}}\n",
      "    - {role: worker, ssh: {address: \"${BYTES}\"}}\n")
    f:close()
    local code, out = support.run({ "validate", "--output", "json", path }, { BYTES = "h\255\254\192.x" })
    support.remove_tree(dir)
    assert.are.equal(1, code)
    assert.truthy(utf8.len(out), "invalid UTF-8 in: " .. out)
    local doc = cjson.decode(out)
    assert.are.equal(2, #doc.errors)
    assert.truthy(doc.errors[2].message:find("h\u{FFFD}\u{FFFD}\u{FFFD}.x", 1, true), doc.errors[2].message)
  end)
end)
