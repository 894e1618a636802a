-- Specs of `cargoship version`: what it prints, and that it never invents a libssh2 version.
local support = require "unit.commands.support"

local function with_ssh(fake, fn)
  local saved = package.loaded["cargoship.ssh"]
  package.loaded["cargoship.ssh"] = fake
  local ok, e = pcall(fn)
  package.loaded["cargoship.ssh"] = saved
  if not ok then error(e, 0) end
end

describe("version", function()
  local version = require("cargoship.build").version

  it("prints cargoship's and Lua's versions and exits 0", function()
    local code, out, err = support.run({ "version" })
    assert.are.equal(0, code)
    assert.are.equal("", err)
    local want = "cargoship " .. version .. "\n" .. _VERSION .. "\n"
    assert.are.equal(want, out:sub(1, #want))
  end)

  it("adds libssh2's version when the runtime reports it", function()
    with_ssh({ version = function() return "1.11.0" end }, function()
      local _, out = support.run({ "version" })
      assert.matches("\nlibssh2 1.11.0\nlua files: [^\n]+\n$", out)
    end)
  end)

  it("leaves libssh2 out when the runtime does not say", function()
    with_ssh({}, function()
      local _, out = support.run({ "version" })
      assert.not_matches("libssh2", out, 1, true)
    end)
  end)

  it("answers --version before or after another command", function()
    for _, argv in ipairs({ { "--version" }, { "validate", "--version" } }) do
      local code, out = support.run(argv)
      assert.are.equal(0, code)
      assert.matches("^cargoship ", out)
    end
  end)

  it("answers to the Go tool's `v` as well, options included", function()
    local code, out, err = support.run({ "v", "-o", "json" })
    assert.are.equal(0, code, err)
    assert.are.equal(version, require("cjson").decode(out).version)
    local _, help = support.run({ "v", "--help" })
    assert.matches("^Usage: cargoship version", help)
    code, _, err = support.run({ "v", "x" })
    assert.are.equal(2, code)
    assert.matches("unexpected argument 'x'", err, 1, true)
  end)

  it("takes no arguments", function()
    local code, _, err = support.run({ "version", "extra" })
    assert.are.equal(2, code)
    assert.matches("unexpected argument 'extra'", err, 1, true)
  end)
end)
