-- Specs that the preflight phases keep the phase contract and read only, whatever they are given.
local contract = require "cargoship.pipeline.contract"

local PHASES = { "connect", "detect_os", "gather_facts", "validate_hosts", "distro_facts", "removed_nodes" }

local function spec_titles()
  local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
  -- the spec lives beside the checkout; without it the titles are not compared
  local f = io.open(src .. "/../shared/spec/apply-phases.txt")
  if not f then return nil end
  local titles = {}
  for line in f:lines() do
    local n, title = line:match("^(%d+)%. (.+)$")
    if n then titles[tonumber(n)] = title end
  end
  f:close()
  return titles
end

describe("preflight phases", function()
  for i, id in ipairs(PHASES) do
    it(id .. " keeps the contract and runs read-only in a dry run", function()
      local phase = require("cargoship.phases." .. id)
      assert.is_true(contract.check(phase))
      assert.equal(id, phase.id)
      assert.equal("read_only", phase.dry_run)
      local titles = spec_titles()
      if titles then assert.equal(titles[i], phase.title) end
    end)
  end
end)
