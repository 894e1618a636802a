-- tests/unit/lint/layers_spec.lua: the layer lint passes on the tree and turns red on a planted forbidden require.
local check = require "lint.check_layers"
local rules = require "lint.layers"
local files = require "unit.files"

local root = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

local function read(path) return assert(files.read(root .. "/" .. path), path) end

-- The tree's modules, with one module's text replaced (a planted edge).
local function planted(path, text)
  return function(p) if p == path then return text end return read(p) end
end

describe("the layer lint", function()
  local modules = check.modules(root)
  local runtime = check.runtime_families(root)

  it("reads the tree and the C families", function()
    assert.is_true(#modules > 100)
    for _, fam in ipairs { "cargoship.loop", "cargoship.ssh", "cargoship.util", "cargoship.archive" } do
      local found = false
      for _, r in ipairs(runtime) do found = found or r == fam end
      assert.is_true(found, fam .. " is a runtime family")
    end
  end)

  it("finds no forbidden edge in the tree", function()
    local bad = check.check(rules, modules, runtime, read)
    assert.are.same({}, bad)
  end)

  it("reads literal requires only, with their lines", function()
    local r = check.requires('local a = require "x.y"\n-- require "in.comment"\nlocal b = require("z")\n'
      .. 'local c = require("distros." .. t)\n')
    assert.are.same({ { name = "x.y", line = 1 }, { name = "z", line = 3 } }, r)
  end)

  local cases = {
    { "a phase requiring the event loop", "lua/cargoship/phases/connect.lua", 'local loop = require "cargoship.loop"',
      "cargoship.loop (runtime)" },
    { "a phase requiring the transport", "lua/cargoship/phases/connect.lua", 'local t = require "cargoship.transport"',
      "cargoship.transport (transport)" },
    { "an engine requiring an OS configurer", "distros/k3s/init.lua", 'local os = require "cargoship.os.linux"',
      "cargoship.os.linux (os)" },
    { "an OS configurer requiring an engine", "lua/cargoship/os/linux.lua", 'local e = require("distros.engine")',
      "distros.engine (engines)" },
    { "the runner requiring the command line", "lua/cargoship/pipeline/report.lua",
      'local cli = require "cargoship.commands.apply"', "cargoship.commands.apply (cli)" },
    { "the config loader requiring the transport", "lua/cargoship/config/hosts.lua",
      'local t = require "cargoship.transport"', "cargoship.transport (transport)" },
  }
  for _, c in ipairs(cases) do
    it("turns red on " .. c[1], function()
      local before = {}
      for _, b in ipairs(check.check(rules, modules, runtime, read)) do before[b] = true end
      local text = read(c[2]) .. "\n" .. c[3] .. "\n"
      local new = {}
      for _, b in ipairs(check.check(rules, modules, runtime, planted(c[2], text))) do
        if not before[b] then new[#new + 1] = b end
      end
      assert.are.equal(1, #new, table.concat(new, "\n"))
      assert.truthy(new[1]:find(c[2] .. ":", 1, true), new[1])
      assert.truthy(new[1]:find(c[4], 1, true), new[1])
    end)
  end
end)
