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

-- file -> list of "path: validator" the real validator reports
local function validate_with_schema(files)
  local dir = support.temp_dir()
  local code, out, err = support.run({ "schema" })
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

  it("says plainly that the distro schema is not in this build", function()
    local code, _, err = support.run({ "schema", "distro" })
    assert.equal(2, code)
    assert.matches("not available in this build", err, 1, true)
  end)
end)
