-- Specs for profile concurrency and the merge of a profile into a host (cluster-yaml.md §3.2).
local support = require "unit.config.support"
local config = support.config

describe("config.parse_concurrency", function()
  it("reads integers, \"N\", \"N%\" and blanks", function()
    assert.same({ kind = "fixed", value = 3 }, config.parse_concurrency(3))
    assert.same({ kind = "unlimited", value = 0 }, config.parse_concurrency(0))
    assert.same({ kind = "fixed", value = 5 }, config.parse_concurrency(" 5 "))
    assert.same({ kind = "unlimited", value = 0 }, config.parse_concurrency("0"))
    assert.same({ kind = "percent", value = 25 }, config.parse_concurrency("25%"))
    assert.same({ kind = "percent", value = 0 }, config.parse_concurrency("0%"))
    assert.same({ kind = "default" }, config.parse_concurrency(nil))
    assert.same({ kind = "default" }, config.parse_concurrency("  "))
  end)
  it("refuses negatives, fractions, percentages over 100 and words", function()
    for _, bad in ipairs({ -1, "-1", "1.5", 2.5, "101%", "-5%", "five", "5 %", true }) do
      assert.is_nil((config.parse_concurrency(bad)))
    end
  end)
end)

describe("config.resolve_concurrency", function()
  it("uses a fixed size as written", function()
    assert.equal(2, config.resolve_concurrency({ kind = "fixed", value = 2 }, 10, 5))
    assert.equal(2, config.resolve_concurrency("2", 10, 5))
  end)
  it("treats 0 as the whole group", function()
    assert.equal(10, config.resolve_concurrency(0, 10, 5))
    assert.equal(1, config.resolve_concurrency(0, 0, 5))
  end)
  it("rounds percentages up and never goes below one", function()
    assert.equal(3, config.resolve_concurrency("25%", 10, 5))
    assert.equal(1, config.resolve_concurrency("0%", 10, 5))
    assert.equal(1, config.resolve_concurrency("10%", 3, 5))
    assert.equal(7, config.resolve_concurrency("66%", 10, 5))
    assert.equal(10, config.resolve_concurrency("100%", 10, 5))
  end)
  it("falls back to the command line value, parsed the same way", function()
    assert.equal(5, config.resolve_concurrency({ kind = "default" }, 10, 5))
    assert.equal(5, config.resolve_concurrency("", 10, "50%"))
    assert.equal(10, config.resolve_concurrency(nil, 10, "0"))
    assert.equal(10, config.resolve_concurrency(nil, 10, nil))
    local n, err = config.resolve_concurrency(nil, 10, "lots")
    assert.is_nil(n)
    assert.matches("command line concurrency", err)
  end)
  it("refuses an invalid spec", function()
    assert.is_nil((config.resolve_concurrency("x", 10, 5)))
  end)
end)

describe("config.merge_profile", function()
  local cluster
  setup(function()
    cluster = support.ok(support.doc({
      config = [[
profiles:
  p:
    concurrency: 2
    engine: {labels: {tier: p}, taints: ["t=p:NoSchedule"]}
    host:
      ports: [{port: 80, protocol: tcp}]
      policy: {pp: {ingress: {name: a}, egress: {name: b}}}
      firewall:
        rules:
          - {name: shared, action: allow, port: 22, protocol: tcp}
          - {name: profile-only, action: deny}
          - {action: allow, source: 10.0.0.0/8}]],
      hosts = {
        "role: controller\nprofile: p\nssh: {address: h1}",
        [[role: worker
profile: p
ssh: {address: h2}
engine: {labels: {tier: own}, taints: ["t=own:NoExecute"]}
host:
  ports: [{port: 443, protocol: tcp}]
  policy: {hp: {ingress: {name: c}, egress: {name: d}}}
  firewall:
    rules:
      - {name: shared, action: reject, port: 22, protocol: tcp}
      - {action: allow, source: 10.0.0.0/8}
      - {name: host-only, action: allow}]],
        "role: worker\nssh: {address: h3}\nengine: {labels: {a: b}}",
      } }))
  end)

  it("copies the profile's settings into a host without its own", function()
    local h = config.merge_profile(cluster, cluster.hosts[1])
    assert.same({ tier = "p" }, h.engine.labels)
    assert.same({ "t=p:NoSchedule" }, h.engine.taints)
    assert.same({ { port = "80", from = 80, to = 80, protocol = "tcp" } }, h.host.ports)
    assert.same({ "pp" },
      (function() local k = {} for n in pairs(h.host.policy) do k[#k + 1] = n end return k end)())
    local keys = {}
    for i, r in ipairs(h.host.firewall.rules) do keys[i] = r.key end
    assert.same({ "shared", "profile-only", "in-allow-10-0-0-0-8-any----" }, keys)
  end)

  it("lets the host's own non-empty values win wholesale and unions rules by key", function()
    local h = config.merge_profile(cluster, cluster.hosts[2])
    assert.same({ tier = "own" }, h.engine.labels)
    assert.same({ "t=own:NoExecute" }, h.engine.taints)
    assert.same({ { port = "443", from = 443, to = 443, protocol = "tcp" } }, h.host.ports)
    assert.is_nil(h.host.policy.pp)
    assert.is_table(h.host.policy.hp)
    local keys, actions = {}, {}
    for i, r in ipairs(h.host.firewall.rules) do keys[i], actions[i] = r.key, r.action end
    -- Host rules first, profile rules whose key the host did not use after; the identical
    -- unnamed rule collapses to one.
    assert.same({ "shared", "in-allow-10-0-0-0-8-any----", "host-only", "profile-only" }, keys)
    assert.equal("reject", actions[1])
  end)

  it("returns a new table and leaves the loaded host alone", function()
    local before = #cluster.hosts[1].host.firewall.rules
    local h = config.merge_profile(cluster, cluster.hosts[1])
    assert.are_not.equal(cluster.hosts[1], h)
    assert.equal(before, #cluster.hosts[1].host.firewall.rules)
    assert.same({}, cluster.hosts[1].engine.labels)
    h.engine.labels.x = "y"
    assert.is_nil(cluster.profiles.p.engine.labels.x)
  end)

  it("leaves a host without a profile as it is", function()
    local h = config.merge_profile(cluster, cluster.hosts[3])
    assert.same({ a = "b" }, h.engine.labels)
    assert.same({}, h.host.firewall.rules)
    assert.equal(cluster.hosts[3].name, h.name)
  end)
end)
