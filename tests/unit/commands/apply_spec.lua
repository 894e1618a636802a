-- Specs of `cargoship apply`'s command line: its flags, the validation, the honest exit 2 without phases.
-- (The pipeline itself, consent and reports: tests/unit/pipeline/apply_command_spec.lua.)
local args = require "cargoship.cli.args"
local apply = require "cargoship.commands.apply"
local support = require "unit.commands.support"

local CLUSTER = { name = "lab", hosts = { { role = "controller" }, { role = "worker" } }, profiles = {},
  registries = {} }
local ERRORS = {
  { file = "bad.yaml", line = 3, col = 5, path = "metadata.name", message = "expected a string" },
  { file = "bad.yaml", line = 9, col = 7, path = "spec.hosts[0].ssh.port",
    message = "expected an integer" },
}
local NOT_AVAILABLE = "cargoship: apply is not available in this build yet: the apply pipeline needs "
  .. "phase modules this build does not have yet: cargoship.phases.not_written_yet; nothing was done.\n"
-- A pipeline whose phase module is missing, whichever phases the build has by now.
local MISSING = { name = "apply", phases = { { 1, "cargoship.phases.not_written_yet" } } }

local function parsed(argv)
  local r, pos = args.parse(argv, apply.options)
  assert(r, pos)
  return { positional = pos, options = args.apply_defaults(r, apply.options) }
end

local function ctx_with_log(path)
  return { log = { file_path = function() return path end },
    env = function(name) return ({ HOME = "/home/op" })[name] end }
end

describe("apply", function()
  local cache, saved
  before_each(function()
    cache = support.temp_dir()
    saved = apply.pipeline
    apply.pipeline = MISSING
  end)
  after_each(function()
    support.remove_tree(cache)
    apply.pipeline = saved
  end)

  local function run(argv)
    return support.run(argv, { XDG_CACHE_HOME = cache, HOME = cache })
  end

  it("turns its flags into the apply_options the runner will take", function()
    local a = parsed({ "c.yaml", "--dry-run", "--confirm", "--concurrency", "5", "--output=json",
      "--timeout", "1m30s", "-FHf", "--allow-unmanaged-nodes", "--values", "a.yaml", "--values=b.yaml",
      "--upload-transport", "openssh", "--max-startups", "3" })
    assert.are.same({
      cluster_file = "c.yaml", dry_run = true, confirm = true, concurrency = 5, output = "json",
      timeout = 90, update_firewall = true, update_hosts = true, fapolicyd = true, allow_unmanaged_nodes = true,
      values = { "a.yaml", "b.yaml" }, log_file = "/tmp/run.log",
      known_hosts = "/home/op/.ssh/known_hosts", host_key_policy = "strict", ssh_timeout = 30, max_startups = 3,
      max_clock_skew = 30, allow_downgrade = false, concurrent_uploads = 8, upload_transport = "openssh",
      update_kubeconfig = false, label_nodes = false, ready_timeout = 300,
      no_drain = false, drain_grace_period = 120, drain_timeout = 300,
    }, apply.apply_options(ctx_with_log("/tmp/run.log"), a))
  end)

  it("has the documented defaults", function()
    assert.are.same({
      cluster_file = "c.yaml", dry_run = false, confirm = false, concurrency = 30, output = "text",
      update_firewall = false, update_hosts = false, fapolicyd = false, allow_unmanaged_nodes = false, values = {},
      known_hosts = "/home/op/.ssh/known_hosts", host_key_policy = "strict", ssh_timeout = 30, max_startups = 10,
      max_clock_skew = 30, allow_downgrade = false, concurrent_uploads = 8, upload_transport = "libssh2",
      update_kubeconfig = false, label_nodes = false, ready_timeout = 300,
      no_drain = false, drain_grace_period = 120, drain_timeout = 300,
    }, apply.apply_options(ctx_with_log(nil), parsed({ "c.yaml" })))
  end)

  it("takes the Go tool's flag names and keeps the older ones as aliases", function()
    for _, argv in ipairs({ { "--firewall", "--hosts", "--fapolicyd" },
                            { "--update-firewall", "--update-hosts", "-f" } }) do
      table.insert(argv, 1, "c.yaml")
      local o = apply.apply_options(ctx_with_log(nil), parsed(argv))
      assert.same({ true, true, true }, { o.update_firewall, o.update_hosts, o.fapolicyd })
    end
  end)

  it("takes the SSH and distro flags", function()
    local o = apply.apply_options(ctx_with_log(nil), parsed({ "c.yaml", "--known-hosts", "/kh",
      "--host-key-policy", "accept-new", "--ssh-timeout", "5s", "--max-clock-skew", "2m",
      "--distro", "pkg/", "--allow-downgrade", "--concurrent-uploads", "3" }))
    assert.are.equal(3, o.concurrent_uploads)
    assert.are.equal("/kh", o.known_hosts)
    assert.are.equal("accept-new", o.host_key_policy)
    assert.are.equal(5, o.ssh_timeout)
    assert.are.equal(120, o.max_clock_skew)
    assert.are.equal("pkg/", o.distro)
    assert.is_true(o.allow_downgrade)
  end)

  it("accepts the long spellings of -F and -H", function()
    local a = parsed({ "c.yaml", "--update-firewall", "--update-hosts" })
    local o = apply.apply_options(ctx_with_log(nil), a)
    assert.is_true(o.update_firewall)
    assert.is_true(o.update_hosts)
  end)

  for _, case in ipairs({
    { { "--output", "xml" }, "option --output: bad value 'xml' (expected one of text, json)" },
    { { "--concurrency", "0" }, "option --concurrency: bad value '0'" },
    { { "--concurrency", "abc" }, "option --concurrency: bad value 'abc'" },
    { { "--timeout", "5x" }, "option --timeout: bad value '5x'" },
    { { "--timeout" }, "option --timeout needs a value (DURATION)" },
    { { "--values" }, "option --values needs a value (FILE)" },
    { { "--dry-run=1" }, "option --dry-run takes no value" },
    { { "--confrim" }, "unknown option --confrim (did you mean --confirm?)" },
    { { "--concurrency", "2", "--concurrency", "3" }, "option --concurrency given more than once" },
  }) do
    it("exits 2 on " .. table.concat(case[1], " "), function()
      local argv = { "apply", "c.yaml" }
      for _, w in ipairs(case[1]) do argv[#argv + 1] = w end
      local code, out, err = run(argv)
      assert.are.equal(2, code)
      assert.are.equal("", out)
      assert.matches("cargoship: " .. case[2], err, 1, true)
      assert.matches("Run 'cargoship apply --help' for usage.", err, 1, true)
    end)
  end

  it("validates the cluster, then says plainly which phases are missing, and exits 2", function()
    support.with_config(support.fake_config(CLUSTER, ERRORS), function()
      local code, out, err = run({ "apply", "--dry-run", "--concurrency", "4", "c.yaml" })
      assert.are.equal(2, code)
      assert.are.equal("", out)
      assert.are.equal(NOT_AVAILABLE, err)
    end)
  end)

  it("fails an invalid cluster file as validate does, exit 1, every error", function()
    support.with_config(support.fake_config(CLUSTER, ERRORS), function()
      local code, out, err = run({ "apply", "bad.yaml" })
      assert.are.equal(1, code)
      assert.are.equal("", out)
      assert.matches("bad.yaml:3:5: metadata.name: expected a string\n", err, 1, true)
      assert.matches("bad.yaml:9:7: spec.hosts[0].ssh.port: expected an integer\n", err, 1, true)
      assert.matches("bad.yaml: 2 errors\n", err, 1, true)
      assert.matches("full log: " .. cache .. "/cargoship/", err, 1, true)
      assert.not_matches("not available", err, 1, true)
    end)
  end)

  it("keeps a log file of the run under $XDG_CACHE_HOME/cargoship, 0600", function()
    support.with_config(support.fake_config(CLUSTER, ERRORS), function()
      local code, _, err = run({ "apply", "-v", "c.yaml" })
      assert.are.equal(2, code)
      local path = err:match("full log: (%S+)")
      assert.matches("^" .. cache:gsub("%p", "%%%0") .. "/cargoship/%d+%-%d+%-4242%.log$", path)
      local f = assert(io.open(path))
      local text = f:read("a")
      f:close()
      assert.matches("DEBUG apply options: dry_run=false confirm=false concurrency=30", text, 1, true)
      local p = io.popen("stat -c %a " .. require("cargoship.util").quote(path))
      assert.are.equal("600", p:read("l"))
      p:close()
    end)
  end)

  it("registers the cluster's registry secrets for redaction before going on", function()
    local cluster = { name = "lab", hosts = {},
      registries = { { name = "r", auth = { user = "u", pass = "pw-123" } },
        { name = "t", auth = { token = "tk" } } } }
    local redacted = {}
    local ctx = {
      log = { redact = function(_, s) if s then redacted[#redacted + 1] = s end end,
        debug = function() end, verbose = function() end, file_path = function() end },
      stderr = support.capture(), stdout = support.capture(), env = function() end,
      exit = require("cargoship.cli").EXIT,
    }
    support.with_config(support.fake_config(cluster, ERRORS), function()
      assert.are.equal(2, apply.run(ctx, parsed({ "c.yaml" })))
    end)
    assert.are.same({ "pw-123", "tk" }, redacted)
  end)

  it("writes the log where --log-file says", function()
    support.with_config(support.fake_config(CLUSTER, ERRORS), function()
      local path = cache .. "/mine.log"
      assert.are.equal(2, (run({ "apply", "c.yaml", "--log-file", path })))
      assert.is_not_nil(io.open(path))
      assert.is_nil(io.open(cache .. "/cargoship"))
    end)
  end)
end)
