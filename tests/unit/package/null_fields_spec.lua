-- Specs: every field of a real package definition, left empty (YAML null) one at a time, is read
-- and built without a raise (cargoship.package.read, cargoship.package.build.create).
--
-- `key:` with no value is a YAML null, and the schema lets many fields be null. A reader that
-- indexes one raises an internal error instead of naming the field: CI's fuzzer found one
-- (imageConfig) by chance at 20k inputs. This walks every path of the fixture packages and of the
-- fuzz corpus's example instead, so the next one is found by the suite, not by luck.
local package = require "cargoship.package"
local build = require "cargoship.package.build"
local yaml = require "cargoship.yaml"
local nulls = require "unit.yaml_nulls"
local files = require "unit.files"

local ROOT = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local SOURCES = {
  ROOT .. "/tests/fixtures/packages/upstream", ROOT .. "/tests/fixtures/packages/k3s-images",
  ROOT .. "/tests/fixtures/packages/os-selinux", ROOT .. "/tests/fixtures/packages/os-prepare",
  ROOT .. "/tests/fixtures/packages/os-fapolicyd", ROOT .. "/tests/fuzz/corpus/distro/example.yaml",
  ROOT .. "/contrib/examples/distro.yaml",
}

local function sh(cmd) assert(os.execute(cmd), cmd) end

describe("a package definition with one field left empty (YAML null)", function()
  local tmp
  setup(function()
    tmp = os.tmpname()
    os.remove(tmp)
    sh("mkdir -p " .. tmp)
  end)
  teardown(function() sh("rm -rf " .. tmp) end)

  for _, source in ipairs(SOURCES) do
    local label = source:match("[^/]+/[^/]+$")
    it("is read and built, or refused by name, never raised: " .. label, function()
      local is_dir = not source:match("%.yaml$")
      local file = is_dir and (source .. "/distro.yaml") or source
      local docs = assert(yaml.load_file(file))
      local doc = package.pick(docs)
      local all = nulls.paths(doc)
      assert.is_true(#all > 10, label .. ": only " .. #all .. " paths")
      local read_ok, built = 0, 0
      for n, path in ipairs(all) do
        local dir = tmp .. "/" .. n
        sh("rm -rf " .. dir .. " && mkdir -p " .. dir .. "/src " .. dir .. "/out")
        if is_dir then sh("cp -a " .. source .. "/. " .. dir .. "/src/") end
        files.write(dir .. "/src/distro.yaml", yaml.dump(nulls.nulled(doc, path)))
        local what = label .. ": " .. nulls.name(path) .. " null"
        local ok, pkg, why = pcall(package.read, dir .. "/src/distro.yaml")
        assert(ok, what .. ": package.read raised " .. tostring(pkg))
        assert(pkg or (type(why) == "string" and why:find(dir, 1, true)), what .. ": error names no file: "
          .. tostring(why))
        if pkg then read_ok = read_ok + 1 end
        if pkg and is_dir then
          local bok, out, berr = pcall(build.create, dir .. "/src", { out = dir .. "/out", now = 0 })
          assert(bok, what .. ": package create raised " .. tostring(out))
          assert(out or type(berr) == "string", what .. ": package create failed without a reason")
          if out then
            built = built + 1
            local rok, again, rwhy = pcall(package.read, out)
            assert(rok, what .. ": reading the built package raised " .. tostring(again))
            assert(again, what .. ": the built package does not read: " .. tostring(rwhy))
            package.release(again)
          end
        end
        sh("rm -rf " .. dir)
      end
      -- the walk reached the reader's and the builder's code, not only the schema's refusals
      assert.is_true(read_ok > 0, label .. ": no nulled variant read")
      if is_dir then assert.is_true(built > 0, label .. ": no nulled variant built") end
    end)
  end
end)
