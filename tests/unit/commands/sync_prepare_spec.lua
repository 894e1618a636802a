-- Specs for `cargoship engine-config-sync` (alias registry-sync) and `cargoship prepare`: operands in both spellings,
-- the package each needs, their pipelines, and the options they share with apply.
local support = require "unit.commands.support"
local sync_cmd = require "cargoship.commands.engine-config-sync"
local prepare_cmd = require "cargoship.commands.prepare"
local apply = require "cargoship.commands.apply"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local CLUSTER = "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: c}\nspec:\n"
  .. "  config: {loadbalancer: lb.example}\n"
  .. "  hosts:\n    - {role: controller, ssh: {address: 127.0.0.1, user: root}}\n"

describe("engine-config-sync", function()
  it("needs the distro package, in either spelling, and says so before touching anything", function()
    for _, name in ipairs({ "engine-config-sync", "registry-sync" }) do
      local code, _, err = support.run({ name, "c.yaml" })
      assert.equal(2, code)
      assert.matches("cargoship engine-config-sync: the distro package is needed", err, 1, true)
      code, _, err = support.run({ name, "--config", "c.yaml" })
      assert.equal(2, code)
      assert.matches("the distro package is needed", err, 1, true)
      code, _, err = support.run({ name })
      assert.equal(2, code)
      assert.matches("missing CLUSTER", err, 1, true)
    end
  end)

  it("reaches the package as CLUSTER --distro PACKAGE and as the Go tool's PACKAGE --config CLUSTER", function()
    local dir = support.temp_dir()
    local cluster, pkg = dir .. "/c.yaml", dir .. "/missing.tar.zst"
    write(cluster, CLUSTER)
    for _, argv in ipairs({ { "engine-config-sync", "--dry-run", cluster, "--distro", pkg },
                            { "registry-sync", "--dry-run", pkg, "--config", cluster },
                            { "prepare", "--dry-run", cluster, "--distro", pkg },
                            { "prepare", "--dry-run", pkg, "--config", cluster } }) do
      local code, _, err = support.run(argv)
      assert.equal(1, code, err)
      assert.matches(argv[1]:gsub("registry%-sync", "engine-config-sync") .. ": --distro: " .. pkg, err, 1, true)
    end
    support.remove_tree(dir)
  end)

  it("walks apply's reads, lock, sync, kubeconfig, labels, unlock, disconnect: nothing installs or uploads", function()
    local numbers, modules = {}, {}
    for _, e in ipairs(sync_cmd.pipeline.phases) do
      numbers[#numbers + 1] = e[1]
      modules[e[2]] = true
    end
    assert.same({ 1, 2, 3, 4, 5, 6, 7, 26, 27, 28, 29, 30, 31 }, numbers)
    for _, m in ipairs({ "upload_files", "upload_binaries", "configure_engine", "initialize_controller",
                         "upgrade_controller", "upgrade_worker", "install_staged" }) do
      assert.is_nil(modules["cargoship.phases." .. m], m)
    end
    assert.equal("engine-config-sync", sync_cmd.pipeline.command, "the lock record names the command")
  end)

  it("shares apply's options, spelled and checked alike", function()
    local by = {}
    for _, o in ipairs(apply.options) do by[o.long] = o end
    for _, o in ipairs(sync_cmd.options) do
      if by[o.long] then assert.equal(by[o.long].check, o.check, o.long) end
    end
    local _, out = support.run({ "engine-config-sync", "--help" })
    for _, flag in ipairs({ "--no-drain", "--drain-timeout", "--label-nodes", "--update-kubeconfig", "--config",
                            "--skip-phases LIST", "-w, --work-concurrency" }) do
      assert.matches(flag, out, 1, true)
    end
    assert.matches("1-7 and 26-31", out, 1, true)
  end)
end)

describe("prepare", function()
  it("walks §4.3's list, kernel modules opt-in, no facts gathered and no engine", function()
    local titles = {}
    for _, e in ipairs(prepare_cmd.pipeline.phases) do titles[#titles + 1] = e[1] .. " " .. require(e[2]).title end
    assert.same({ "1 Connect to hosts", "2 Detect host operating systems", "3 Acquire exclusive host lock",
      "4 Prepare hosts", "5 Prepare hosts - Enterprise Linux support",
      "6 Prepare hosts - Enterprise Linux support - Fapolicyd",
      "7 Prepare hosts - Enterprise Linux support - SELinux policy", "8 Enable the requested kernel modules",
      "9 Release exclusive host lock", "10 Disconnect from hosts" }, titles)
    local _, out = support.run({ "prepare", "--help" })
    assert.matches("--enable-kernel-modules", out, 1, true)
    assert.matches("-f, --fapolicyd", out, 1, true)
    assert.is_nil(out:find("--no-drain", 1, true))
  end)
end)
