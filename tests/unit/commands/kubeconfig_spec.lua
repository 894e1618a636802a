-- Specs of `cargoship kubeconfig` (alias kube-config) over a fake pipeline: operands, `-` printing, the dry run.
local action = require "cargoship.action"
local cli = require "cargoship.cli"
local command = require "cargoship.commands.kubeconfig"
local support = require "unit.commands.support"
local S = require "unit.pipeline.support"

local CLUSTER = S.cluster({ { name = "ctrl-1", role = "controller" } })
CLUSTER.profiles, CLUSTER.registries = {}, {}
local SECRET = "client-key-data-that-is-long-enough-to-mask"

-- connect, then a phase 28 that keeps the kubeconfig (with a secret it redacts) or plans a write
local function fake_pipeline(seen)
  package.loaded["fake.kc.connect"] = { id = "connect", title = "Connect to hosts", dry_run = "read_only",
    creates = { "connection" },
    run = function(_, hosts) for _, h in ipairs(hosts) do h:attach(S.fake_conn()) end end }
  package.loaded["fake.kc.update"] = { id = "update_kubeconfig", title = "Updating kubeconfig file with the current"
    .. " cluster", reads = { "connection" },
    assess = function(ctx)
      seen[#seen + 1] = { dry_run = ctx.dry_run, target = ctx.options.kubeconfig }
      ctx.log:redact(SECRET)
      if ctx.options.kubeconfig == "-" then
        ctx.kubeconfig = { name = "lab", path = "-", text = "users:\n- user: {client-key-data: " .. SECRET .. "}\n" }
        return {}
      end
      return { action.write { path = ctx.env("HOME") .. "/kube", content = SECRET, mode = "0600", on = "local",
        say = "add cluster lab" } }
    end }
  return { name = "kubeconfig", command = "kubeconfig", phases = { { 1, "fake.kc.connect" }, { 28, "fake.kc.update" } },
    required = { 1, 28 } }
end

describe("cargoship kubeconfig", function()
  local cache, saved, seen
  before_each(function()
    cache, saved, seen = support.temp_dir(), command.pipeline, {}
    command.pipeline = fake_pipeline(seen)
  end)
  after_each(function()
    support.remove_tree(cache)
    command.pipeline = saved
    package.loaded["fake.kc.connect"], package.loaded["fake.kc.update"] = nil, nil
  end)

  local function run(argv)
    local out, err = support.capture(), support.capture()
    local code
    support.with_config(support.fake_config(CLUSTER, {}), function()
      code = cli.main(argv, {
        env = function(name) return ({ XDG_CACHE_HOME = cache, HOME = cache })[name] end,
        stdout = out, stderr = err, isatty = { stdin = false, stdout = false, stderr = false },
        now = function() return 1700000000 end, pid = 4242,
      })
    end)
    return code, out.text(), err.text()
  end

  it("- prints the cluster's kubeconfig as it is, credentials included, and nothing else; one dry pass", function()
    for _, argv in ipairs { { "kubeconfig", "c.yaml", "-" }, { "kube-config", "c.yaml", "--kubeconfig", "-" } } do
      seen = {}
      command.pipeline = fake_pipeline(seen)
      local code, out, err = run(argv)
      assert.are.equal(0, code, err)
      assert.are.equal("users:\n- user: {client-key-data: " .. SECRET .. "}\n", out)
      assert.are.same({ { dry_run = true, target = "-" } }, seen)
      assert.is_nil(err:find(SECRET, 1, true))
    end
  end)

  it("--dry-run reports the planned merge (no credential) and exits 3; a real run needs no --confirm", function()
    local code, out = run({ "kubeconfig", "--dry-run", "c.yaml", "--kubeconfig", "/k" })
    assert.are.equal(3, code)
    assert.matches("add cluster lab", out, 1, true)
    assert.is_nil(out:find(SECRET, 1, true))
    assert.are.same({ { dry_run = true, target = "/k" } }, seen)
    local f = io.open(cache .. "/kube")
    assert.is_nil(f, "a dry run writes nothing")
    seen = {}
    command.pipeline = fake_pipeline(seen)
    code, out = run({ "kubeconfig", "c.yaml", "--kubeconfig", "/k" })
    assert.are.equal(0, code, out)
    assert.are.same({ { dry_run = true, target = "/k" }, { dry_run = false, target = "/k" } }, seen)
    f = assert(io.open(cache .. "/kube"))
    assert.are.equal(SECRET, f:read("a"))
    f:close()
    assert.are.equal(tonumber("600", 8), require("cargoship.fs").mode(cache .. "/kube"))
  end)

  it("refuses an operand other than -, and - with --kubeconfig PATH", function()
    local code, _, err = run({ "kubeconfig", "c.yaml", "bogus" })
    assert.are.equal(cli.EXIT.usage, code)
    assert.matches('unknown operand "bogus"', err, 1, true)
    code = run({ "kubeconfig", "c.yaml", "--kubeconfig", "/k", "-" })
    assert.are.equal(cli.EXIT.usage, code)
    assert.are.same({}, seen)
  end)
end)
