-- Specs: every field of the shipped cluster files, left empty (YAML null) one at a time, loads to a
-- cluster or to located errors, never a raise (cargoship.config.load_string, validate's summary).
-- The package reader had such a raise (a CI fuzz finding); this walks every path instead of luck.
local config = require "cargoship.config"
local validate = require "cargoship.commands.validate"
local yaml = require "cargoship.yaml"
local nulls = require "unit.yaml_nulls"
local files = require "unit.files"

local ROOT = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local SOURCES = { "contrib/examples/full.yaml", "contrib/examples/minimal.yaml",
  "tests/fixtures/clusters/spec-full.yaml" }
local OPTS = { expand_env = true, env = function() return "x" end, decrypt = {} }

describe("a cluster file with one field left empty (YAML null)", function()
  for _, source in ipairs(SOURCES) do
    it("loads to a cluster or to located errors, never a raise: " .. source, function()
      local docs = assert(yaml.load(assert(files.read(ROOT .. "/" .. source))))
      assert.equal(1, docs.n or #docs, source .. ": one document expected")
      local all = nulls.paths(docs[1])
      assert.is_true(#all > 5, source .. ": only " .. #all .. " paths")
      local loaded = 0
      for _, path in ipairs(all) do
        local text = yaml.dump(nulls.nulled(docs[1], path))
        for _, opts in ipairs({ false, OPTS }) do
          local what = source .. ": " .. nulls.name(path) .. " null" .. (opts and " (--expand-env)" or "")
          local ok, cluster, errs = pcall(config.load_string, text, "cluster.yaml", opts or nil)
          assert(ok, what .. ": raised " .. tostring(cluster))
          if cluster then
            loaded = loaded + 1
            local sok, why = pcall(function()
              validate.summarize(cluster)
              validate.json_report(cluster, nil, "cluster.yaml")
            end)
            assert(sok, what .. ": validate's summary raised " .. tostring(why))
          elseif type(errs) == "string" then
            assert(errs:match("^cluster%.yaml:%d+:%d+: ."), what .. ": unlocated error: " .. errs)
          else
            assert(type(errs) == "table" and #errs > 0, what .. ": no cluster and no errors")
            for _, e in ipairs(errs) do
              assert(math.type(e.line) == "integer" and type(e.message) == "string",
                what .. ": unlocated error: " .. tostring(e.text or e.message))
              assert(not e.message:find("attempt to", 1, true), what .. ": " .. e.message)
            end
          end
        end
      end
      assert.is_true(loaded > 0, source .. ": no nulled variant loaded")
    end)
  end
end)
