-- Specs for `cargoship schema`: its output, checked by a real JSON Schema validator (Debian's
-- python3-jsonschema), accepts the contrib examples and every fixture the loader accepts, and
-- rejects the five classic mistakes at the places validate reports them.
local cjson = require "cjson"
local support = require "unit.commands.support"
local config = require "cargoship.config"

local CHECK = [[
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
for f in sys.argv[2:]:
    try:
        doc = yaml.safe_load(open(f))
    except Exception:
        continue
    errs = sorted(v.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    print(json.dumps({"file": f, "errors": ["/".join(str(p) for p in e.absolute_path) + ": " + e.validator
                                            for e in errs]}))
]]

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- file -> list of "path: validator" the real validator reports, against `cargoship schema KIND`
local function validate_with_schema(files, kind)
  local dir = support.temp_dir()
  local code, out, err = support.run({ "schema", kind })
  assert.equal(0, code, err)
  write(dir .. "/schema.json", out)
  write(dir .. "/check.py", CHECK)
  local args = {}
  for i, f in ipairs(files) do args[i] = "'" .. f .. "'" end
  local p = assert(io.popen("python3 " .. dir .. "/check.py " .. dir .. "/schema.json " .. table.concat(args, " ")))
  local result = {}
  for line in p:lines() do
    local o = cjson.decode(line)
    result[o.file] = o.errors
  end
  assert(p:close(), "the validator failed")
  support.remove_tree(dir)
  return result
end

local function listing(pattern)
  local p = assert(io.popen("ls " .. pattern))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

describe("cargoship schema", function()
  it("accepts the contrib examples", function()
    local r = validate_with_schema({ "contrib/examples/full.yaml", "contrib/examples/minimal.yaml" })
    assert.same({}, r["contrib/examples/full.yaml"])
    assert.same({}, r["contrib/examples/minimal.yaml"])
  end)

  it("rejects the five classic mistakes where validate reports them", function()
    local f = "tests/fixtures/clusters/five-mistakes.yaml"
    local _, errs = config.load(f)
    assert.equal(5, #errs)
    assert.same({ "spec/config: required", "spec/hosts/0: additionalProperties", "spec/hosts/1/ssh/port: maximum",
      "spec/hosts/2/role: enum", "spec/hosts/3/host/firewall/rules/0/action: pattern" }, validate_with_schema({ f })[f])
  end)

  it("accepts every fixture the loader accepts (the two cannot drift apart)", function()
    local files, loaded = {}, 0
    for _, f in ipairs(listing("tests/fixtures/clusters/*.yaml")) do
      if config.load(f) then files[#files + 1] = f; loaded = loaded + 1 end
    end
    assert.truthy(loaded >= 3, "too few loadable fixtures")
    for f, errs in pairs(validate_with_schema(files)) do assert.same({}, errs, f) end
  end)

  it("takes the Go tool's kind names, prints the cluster schema with none, and refuses `config`", function()
    local _, cluster = support.run({ "schema" })
    local _, distro = support.run({ "schema", "distro" })
    assert.same({ 0, cluster, "" }, { support.run({ "schema", "cluster" }) })
    assert.same({ 0, cluster, "" }, { support.run({ "schema", "inventory" }) })
    assert.same({ 0, distro, "" }, { support.run({ "schema", "package" }) })
    assert.equal("ZarfDistro", cjson.decode(distro).properties.kind.const)
    assert.equal("ZarfCluster", cjson.decode(cluster).properties.kind.const)
    local code, _, err = support.run({ "schema", "config" })
    assert.equal(2, code)
    assert.matches("reads no settings file", err, 1, true)
    code, _, err = support.run({ "schema", "clutser" })
    assert.equal(2, code)
    assert.matches("unknown kind 'clutser'", err, 1, true)
  end)

  it("-o FILE writes the schema there and says so on stderr", function()
    local dir = support.temp_dir()
    local code, out, err = support.run({ "schema", "distro", "-o", dir .. "/distro.json" })
    assert.equal(0, code, err)
    assert.equal("", out)
    assert.equal("Wrote " .. dir .. "/distro.json\n", err)
    local f = assert(io.open(dir .. "/distro.json"))
    assert.equal(select(2, support.run({ "schema", "distro" })), f:read("a"))
    f:close()
    support.remove_tree(dir)
  end)
end)

-- The distro file's schema and its loader: one rule tree (lua/cargoship/package/schema.lua) drives both.
describe("cargoship schema distro", function()
  local dschema = require "cargoship.package.schema"
  local rules = require "cargoship.package.rules"
  local FIVE = "tests/fixtures/distros/five-mistakes.yaml"

  -- every distro.yaml the repository holds, and one written by `package create`
  local function repo_distros()
    local files = listing("contrib/lab-distros/*/distro.yaml contrib/examples/distro.yaml "
      .. "tests/fixtures/distros/*.yaml")
    local out = {}
    for _, f in ipairs(files) do if f ~= FIVE then out[#out + 1] = f end end
    return out
  end

  local function built_distro(dir)
    write(dir .. "/distro.yaml", "kind: ZarfDistro\n"
      .. "metadata: {name: built, version: 1.35.2-k3s1, architectures: [amd64, arm64]}\n"
      .. "spec:\n  type: k3s\n  version: 1.35.2-k3s1\n  config:\n    files:\n"
      .. "      - {name: motd, data: \"hello\\n\", target: /etc/motd, perm: \"0644\"}\n"
      .. "    os:\n      files:\n        - {data: \"#!/bin/sh\\n\", target: /usr/local/bin/k3s, executable: true,"
      .. " selector: {package: binary}}\n")
    local archive = assert(require("cargoship.package.build").create(dir, { out = dir, now = 1700000000 }))
    assert(os.execute("mkdir -p " .. dir .. "/x && tar --zstd -xf " .. archive .. " -C " .. dir .. "/x distro.yaml"))
    return dir .. "/x/distro.yaml", archive
  end

  it("accepts every distro.yaml in the repository and a built one, as cargoship does", function()
    local dir = support.temp_dir()
    local files = repo_distros()
    local built, archive = built_distro(dir)
    files[#files + 1] = built
    assert.truthy(#files >= 4, "too few distro files")
    local seen = 0
    for f, errs in pairs(validate_with_schema(files, "distro")) do
      assert.same({}, errs, f)
      seen = seen + 1
    end
    assert.equal(#files, seen)
    for _, f in ipairs(files) do
      local code, out, err = support.run({ "validate", f })
      assert.equal(0, code, err)
      assert.matches(" is valid.", out, 1, true)
      -- a built distro.yaml is read as part of its package (it is verified against checksums.txt)
      local p = require("cargoship.package").read(f == built and archive or f)
      assert.truthy(p, f)
      require("cargoship.package").release(p)
    end
    local text = assert(io.open(files[#files])):read("a")
    assert.matches("aggregateChecksum", text, 1, true) -- the build section and checksum were checked too
    support.remove_tree(dir)
  end)

  it("rejects the five classic mistakes, each where cargoship reports it", function()
    assert.same({ "metadata: additionalProperties", "spec/config/imageConfig: additionalProperties",
      "spec/config/os/files/0: required", "spec/config/os/kernel: type", "spec/type: enum" },
      validate_with_schema({ FIVE }, "distro")[FIVE])
    local code, _, err = support.run({ "validate", FIVE })
    assert.equal(1, code)
    local want = {
      FIVE .. ':7:3: metadata.vendr: unknown field "vendr" (did you mean "vendor"?)',
      FIVE .. ':9:9: spec.type: expected one of "rke2", "k3s", "upstream", got string "rke3" (did you mean "rke2"?)',
      FIVE .. ':13:15: spec.config.os.kernel: expected a sequence, got string "br_netfilter"',
      FIVE .. ':15:11: spec.config.os.files[0]: missing required field "target"',
      FIVE .. ':18:7: spec.config.imageConfig.image: unknown field "image" (did you mean "images"?)',
      FIVE .. ": 5 errors", "" }
    assert.equal(table.concat(want, "\n"), err)
    -- and every command that loads a distro file refuses it the same way, before anything else
    local p, why = require("cargoship.package").read(FIVE)
    assert.is_nil(p)
    assert.equal(table.concat(want, "\n", 1, 5), why)
    local dir = support.temp_dir()
    assert(os.execute("cp " .. FIVE .. " " .. dir .. "/distro.yaml"))
    local built, berr = require("cargoship.package.build").create(dir, { out = dir })
    assert.is_nil(built)
    assert.matches('spec.config.imageConfig.image: unknown field "image"', berr, 1, true)
    support.remove_tree(dir)
  end)

  it("publishes a field the moment the rules have it, and the loader takes it (one source)", function()
    local meta = rules.field(dschema.ROOT, "metadata")[2]
    local doc = "kind: ZarfDistro\nmetadata: {name: one, colour: teal}\nspec: {type: k3s, version: 1.35.2-k3s1}\n"
    local docs = require("cargoship.yaml").load(doc, "one.yaml")
    local errs = dschema.check(docs[1], "one.yaml")
    assert.equal('one.yaml:2:23: metadata.colour: unknown field "colour"', errs[1].text)
    assert.is_nil(dschema.json_schema()["$defs"].metadata.properties.colour)
    table.insert(meta.fields, { "colour", rules.enum({ "teal", "ochre" }) })
    local ok, e = pcall(function()
      assert.same({ type = "string", enum = { "teal", "ochre" } },
        dschema.json_schema()["$defs"].metadata.properties.colour)
      assert.is_nil(dschema.check(docs[1], "one.yaml"))
      local bad = require("cargoship.yaml").load((doc:gsub("teal", "blue")), "one.yaml")
      assert.matches('metadata.colour: expected one of "teal", "ochre", got string "blue"',
        dschema.check(bad[1], "one.yaml")[1].text, 1, true)
    end)
    table.remove(meta.fields)
    assert(ok, e)
    assert.is_nil(dschema.json_schema()["$defs"].metadata.properties.colour)
  end)

  it("keeps its engine list equal to the engines cargoship has", function()
    assert.same(require("distros.engine").TYPES, dschema.ENGINES)
  end)

  it("writes each pattern as one regex that Lua and the real validator read alike", function()
    local cases = {
      { "^[a-z0-9][a-z0-9-]*$", { "a", "rke2-x", "0a-" }, { "", "-a", "A", "a_b", "a b" } },
      { "^[0-9a-fA-F]{64}$", { ("ab"):rep(32), ("F0"):rep(32) },
        { ("ab"):rep(31), ("ab"):rep(32) .. "a", ("g"):rep(64) } },
      { "^[A-Za-z0-9_][A-Za-z0-9_./-]*$", { "net.ipv4.ip_forward", "a/b-c" }, { ".x", "a b", "" } },
      { "^[0-7]?[0-7]{3}$", { "644", "0755" }, { "0800", "12345", "64" } },
      { "^\\.", { ".a.b" }, { "a.b", "" } },
    }
    for _, c in ipairs(cases) do
      local lua = rules.lua_pattern(c[1])
      for _, yes in ipairs(c[2]) do assert.truthy(yes:match(lua), c[1] .. " should match " .. yes) end
      for _, no in ipairs(c[3]) do assert.falsy(no:match(lua), c[1] .. " should not match " .. no) end
      local py = assert(io.popen("python3 -c 'import re,sys,json; p=sys.argv[1]; print(json.dumps("
        .. "[bool(re.search(p, s)) for s in sys.argv[2:]]))' '" .. c[1] .. "' " .. (function()
          local q = {}
          for _, v in ipairs(c[2]) do q[#q + 1] = "'" .. v .. "'" end
          for _, v in ipairs(c[3]) do q[#q + 1] = "'" .. v .. "'" end
          return table.concat(q, " ")
        end)()))
      local got = cjson.decode(py:read("a"))
      py:close()
      for i = 1, #c[2] do assert.is_true(got[i], c[1] .. " (python) " .. c[2][i]) end
      for i = 1, #c[3] do assert.is_false(got[#c[2] + i], c[1] .. " (python) " .. c[3][i]) end
    end
    assert.has_error(function() rules.lua_pattern("^(a|b)$") end)
  end)
end)
