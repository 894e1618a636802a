-- Specs for config.select_hosts (--hosts / --role style filtering).
local support = require "unit.config.support"
local config = support.config

describe("config.select_hosts", function()
  local cluster
  setup(function()
    cluster = support.ok(support.doc({ hosts = {
      "role: controller\nhostname: cp1\nssh: {address: 192.0.2.1}",
      "role: worker\nssh: {address: 192.0.2.2}",
      "role: worker\nhostname: w3\nopenSSH: {address: w3-alias}",
    } }))
  end)

  local function names(list)
    local out = {}
    for i, h in ipairs(list) do out[i] = h.name end
    return out
  end

  it("returns every host without a filter", function()
    assert.same({ "cp1", "192.0.2.2", "w3" }, names(config.select_hosts(cluster, {})))
    assert.same({ "cp1", "192.0.2.2", "w3" }, names(config.select_hosts(cluster)))
  end)

  it("matches by name, hostname or address, in file order", function()
    assert.same({ "cp1", "w3" }, names(config.select_hosts(cluster, { hosts = "w3-alias, cp1" })))
    assert.same({ "cp1" }, names(config.select_hosts(cluster, { hosts = "192.0.2.1" })))
    assert.same({ "192.0.2.2" }, names(config.select_hosts(cluster, { hosts = { "192.0.2.2" } })))
  end)

  it("filters by role, together with names", function()
    assert.same({ "192.0.2.2", "w3" }, names(config.select_hosts(cluster, { role = "worker" })))
    assert.same({ "w3" }, names(config.select_hosts(cluster, { role = "worker", hosts = "cp1,w3" })))
  end)

  it("refuses an unknown host and lists the valid names", function()
    local list, err = config.select_hosts(cluster, { hosts = "cp1,w4" })
    assert.is_nil(list)
    assert.equal('unknown host "w4" (did you mean "w3"?); valid hosts: "cp1", "192.0.2.2", "w3"', err)
  end)

  it("refuses an unknown role", function()
    local list, err = config.select_hosts(cluster, { role = "master" })
    assert.is_nil(list)
    assert.matches("unknown role", err)
  end)
end)
