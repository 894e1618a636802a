-- Specs that the preflight phases keep the phase contract and read only, whatever they are given.
local contract = require "cargoship.pipeline.contract"

local PHASES = { "connect", "detect_os", "gather_facts", "validate_hosts", "distro_facts", "removed_nodes" }

local function spec_titles()
  -- the spec lives beside the checkout (CI lays shared/ beside the clone), or where
  -- CARGOSHIP_SHARED_DIR says (cmake -DCS_SHARED_DIR=..., for a worktree elsewhere): without it this fails
  local shared = os.getenv("CARGOSHIP_SHARED_DIR")
  if not shared or shared == "" then shared = (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/../shared" end
  local path = shared .. "/spec/apply-phases.txt"
  local f = io.open(path)
  assert(f, path .. " is missing: the phase titles are checked against it (shared/ must sit beside the checkout)")
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
      assert.is_string(titles[i], "apply-phases.txt has no phase " .. i)
      assert.equal(titles[i], phase.title)
    end)
  end
end)
