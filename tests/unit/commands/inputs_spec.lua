-- Specs of hostile cluster files through every command, as the built executable runs them:
-- a located error and exit 1, never an internal error (exit 70).
local util = require "cargoship.util"
local support = require "unit.commands.support"

local BIN = os.getenv("CARGOSHIP_BIN") or "build/bin/cargoship"

local dir

-- Runs the executable with argv (a list); returns exit code, stdout and stderr together.
local function run(argv)
  local words = {}
  for i, a in ipairs(argv) do words[i] = util.quote(a) end
  local cmd = string.format("cd %s && XDG_CACHE_HOME=%s timeout 20 %s %s </dev/null 2>&1; echo \"rc=$?\"",
    util.quote(dir), util.quote(dir .. "/cache"), util.quote(BIN), table.concat(words, " "))
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  local code = tonumber(out:match("rc=(%d+)\n$"))
  return code, out:gsub("rc=%d+\n$", "")
end

local function write(name, text)
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(text)
  f:close()
  return dir .. "/" .. name
end

-- each command and what follows its CLUSTER argument
local COMMANDS = { { "validate" }, { "apply" }, { "exec", "--", "true" }, { "repl" }, { "unlock" } }

local function argv_for(cmd, path)
  return { cmd[1], path, table.unpack(cmd, 2) }
end

describe("a hostile cluster file in every command", function()
  setup(function() dir = support.temp_dir() end)
  teardown(function() support.remove_tree(dir) end)

  for _, doc in ipairs({ { "a bare scalar", "foo\n", "1:1: expected a mapping" },
                         { "a file cut inside its first key", "apiVer", "1:1: expected a mapping" } }) do
    for _, cmd in ipairs(COMMANDS) do
      it(doc[1] .. " is a located error in " .. cmd[1], function()
        local path = write("c.yaml", doc[2])
        local code, out = run(argv_for(cmd, path))
        assert.are.equal(1, code, out)
        assert.truthy(out:find(path .. ":" .. doc[3], 1, true), out)
        assert.is_nil(out:find("internal error", 1, true), out)
      end)
    end
  end
end)
