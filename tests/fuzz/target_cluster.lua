-- target_cluster.lua - fuzz target: a cluster file, loaded and validated whole (cargoship.config.load_string).
-- Fine: a cluster, or nil + a located message / a list of located errors. A finding: any raise.
local config = require "cargoship.config"

local env = { HOME = "/nonexistent" }
local opts = { expand_env = true, env = function(name) return env[name] end, decrypt = {} }

local function run(data)
  -- odd lengths with --expand-env, even ones without: one load per input, both paths fuzzed
  do
    local cluster, errs = config.load_string(data, "cluster.yaml", #data % 2 == 1 and opts or nil)
    if cluster then
      assert(type(cluster.hosts) == "table", "a cluster without hosts")
    elseif type(errs) == "string" then
      assert(errs:match("^cluster%.yaml:%d+:%d+: ."), "unlocated error: " .. errs)
    else
      assert(type(errs) == "table" and #errs > 0, "no cluster and no errors")
      for _, e in ipairs(errs) do
        assert(math.type(e.line) == "integer" and e.line >= 1 and type(e.message) == "string",
          "unlocated error: " .. tostring(e.text or e.message))
      end
    end
  end
end

return { run = run }
