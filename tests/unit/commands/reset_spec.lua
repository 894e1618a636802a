-- Specs of `cargoship reset`: the refusals before any connection, the Go tool's form, and the pipeline's shape.
--
-- The cluster file is a real one, read by the real loader; the session module's
-- transport_for is swapped for a counter, so "no host was connected to" is a count of 0.
local support = require "unit.commands.support"
local files = require "unit.files"
local check_targets = require "cargoship.phases.check_targets"
local pipeline = require "cargoship.pipelines.reset"

local function cluster_file(dir, hosts)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: lab", "spec:",
    "  config: {loadbalancer: 192.0.2.11}", "  hosts:" }
  for _, h in ipairs(hosts) do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: %s\n      ssh: {address: %s, user: root}",
      h[2], h[1], h[3])
  end
  local path = dir .. "/cluster.yaml"
  files.write(path, table.concat(lines, "\n") .. "\n")
  return path
end

local HOSTS = { { "c1", "controller", "192.0.2.11" }, { "c2", "controller", "192.0.2.12" },
                { "w1", "worker", "192.0.2.21" }, { "w2", "worker", "192.0.2.22" } }

describe("cargoship reset refuses before any host is connected to", function()
  local dir, file, session, saved, connects
  before_each(function()
    dir = support.temp_dir()
    file = cluster_file(dir, HOSTS)
    session = require "cargoship.pipeline.session"
    saved, connects = session.transport_for, 0
    session.transport_for = function()
      connects = connects + 1
      return nil, "this spec connects to nothing"
    end
  end)
  after_each(function()
    session.transport_for = saved
    support.remove_tree(dir)
  end)

  local function reset(...)
    return support.run({ "reset", ... }, { HOME = dir, XDG_CACHE_HOME = dir })
  end

  it("an unknown host name: exit 2, naming it and the valid ones", function()
    local code, _, err = reset("--dry-run", "--target-hosts", "w1,w9", file)
    assert.are.equal(2, code)
    assert.matches('--target-hosts: unknown host "w9"', err, 1, true)
    assert.matches("no host was contacted", err, 1, true)
    assert.are.equal(0, connects)
  end)

  it("every controller of the cluster file named while other hosts stay (in the Go tool's form too)", function()
    local code, _, err = reset("--confirm", "--target-hosts", "c1,c2", file)
    assert.are.equal(2, code)
    assert.matches("names every controller while other hosts stay", err, 1, true)
    code, _, err = reset("--confirm", "--target-hosts", "192.0.2.11,c2,w1", "--config", file)
    assert.are.equal(2, code, err)
    assert.are.equal(0, connects)
  end)

  it("CLUSTER missing, or given twice: a usage error, nothing connected", function()
    assert.are.equal(2, (reset("--dry-run")))
    assert.are.equal(2, (reset("--dry-run", "--config", file, file)))
    assert.are.equal(0, connects)
  end)

  it("accepted names go on to the command path, which connects (here: to nothing, and says so)", function()
    local code = reset("--dry-run", "--target-hosts", "w1", "--config", file)
    assert.are.equal(1, connects)
    assert.are_not.equal(2, code)
  end)
end)

describe("reset's refusals that need to know which controllers run (phase 6, before the lock)", function()
  local function host(name, role, running)
    return { name = name, role = role, facts = { engine = { running = running } } }
  end
  local hosts = { host("c1", "controller", true), host("c2", "controller", true), host("c3", "controller", false),
                  host("w1", "worker", true) }

  it("more than one running controller in one run", function()
    assert.matches("more than one running controller in one run %(c1, c2%)",
      check_targets.refusal(hosts, { c1 = true, c2 = true }))
  end)

  it("every running controller while other hosts stay; a stopped controller does not count as one that stays",
    function()
      local two = { host("c1", "controller", true), host("c3", "controller", false), host("w1", "worker", true) }
      assert.matches("every running controller %(c1%) while other hosts stay",
        check_targets.refusal(two, { c1 = true }))
    end)

  it("lets one running controller go while another stays, workers, and the whole cluster", function()
    assert.is_nil(check_targets.refusal(hosts, { c2 = true }))
    assert.is_nil(check_targets.refusal(hosts, { w1 = true, c3 = true }))
    assert.is_nil(check_targets.refusal(hosts, nil))
  end)

  it("runs in the plan (reads only) and before the lock: a refusal writes nothing anywhere", function()
    assert.are.equal("read_only", check_targets.dry_run)
    local at = {}
    for i, e in ipairs(pipeline.phases) do at[e[2]] = i end
    assert.is_true(at["cargoship.phases.check_targets"] < at["cargoship.phases.acquire_lock"])
    assert.is_true(at["cargoship.phases.distro_facts"] < at["cargoship.phases.check_targets"])
    local ok, why = check_targets.run({ options = { target_hosts = { c1 = true, c2 = true } } }, hosts)
    assert.is_nil(ok)
    assert.matches("nothing was changed$", why)
  end)
end)
