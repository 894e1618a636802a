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
  local cmd = string.format("cd %s && env -u SSH_AUTH_SOCK HOME=%s XDG_CACHE_HOME=%s timeout 20 %s %s"
    .. " </dev/null 2>&1; echo \"rc=$?\"", util.quote(dir), util.quote(dir), util.quote(dir .. "/cache"),
    util.quote(BIN), table.concat(words, " "))
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

describe("a host named by 100+ characters", function()
  setup(function() dir = support.temp_dir() end)
  teardown(function() support.remove_tree(dir) end)

  -- The name is the column width of every host's output; string.format refused widths over
  -- 99, so every host failed with "invalid conversion" before it was reached.
  for _, argv in ipairs({ { "exec", "long.yaml", "--", "true" }, { "apply", "long.yaml" } }) do
    it("does not break " .. argv[1] .. " for any host", function()
      local name = ("a"):rep(63) .. "." .. ("b"):rep(50)
      write("long.yaml", table.concat({
        "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata: {name: t}", "spec:",
        "  config: {loadbalancer: lb.example.internal}", "  hosts:",
        "    - {role: controller, hostname: " .. name .. ", ssh: {address: 127.0.0.1, port: 1}}",
        "    - {role: worker, ssh: {address: 127.0.0.2, port: 1}}", "" }, "\n"))
      local code, out = run(argv)
      assert.are.equal(1, code, out)
      assert.is_nil(out:find("invalid conversion", 1, true), out)
      assert.is_nil(out:find("%.lua:%d+:"), out)
      -- both hosts got as far as authentication (no key here), each under its own name
      assert.truthy(out:find(name .. ": auth: no keyPath given", 1, true), out)
      assert.truthy(out:find("127.0.0.2: auth: no keyPath given", 1, true), out)
    end)
  end
end)
