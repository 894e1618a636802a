-- Specs for the Go tool's command line (issue 13 item 2): aliases, apply's two forms, log
-- options, version -o json, create/verify/sha256sum and inventory from-ansible.
local cjson = require "cjson"
local args = require "cargoship.cli.args"
local support = require "unit.commands.support"
local apply = require "cargoship.commands.apply"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

describe("option aliases", function()
  local spec = { { long = "firewall", short = "F", aliases = { "--update-firewall" }, go_name = "--firewall" },
                 { long = "work", value = "N", go_name = "--work-concurrency", short = "w" } }
  it("parse every spelling as the option itself", function()
    for _, argv in ipairs({ { "--firewall" }, { "--update-firewall" }, { "-F" } }) do
      local r = assert(args.parse(argv, spec))
      assert.is_true(r.firewall)
    end
    local r = assert(args.parse({ "--work-concurrency", "5" }, spec))
    assert.equal("5", r.work)
  end)
  it("are named in --help, with the Go tool's spelling", function()
    local h = args.help(spec)
    assert.matches("(also --update-firewall)", h, 1, true)
    assert.matches("(the Go tool's --work-concurrency)", h, 1, true)
  end)
  it("may not take another option's name", function()
    assert.has_error(function() args.parse({}, { { long = "a" }, { long = "b", aliases = { "--a" } } }) end)
  end)
end)

describe("apply's operands", function()
  local function ops(positional, options)
    return apply.operands({ positional = positional, options = options })
  end
  it("take CLUSTER --distro PACKAGE and the Go tool's PACKAGE --config CLUSTER", function()
    assert.same({ "c.yaml", "p.tar.zst" }, { ops({ "c.yaml" }, { distro = "p.tar.zst" }) })
    assert.same({ "c.yaml", "p.tar.zst" }, { ops({ "p.tar.zst" }, { config = "c.yaml" }) })
    assert.same({ "c.yaml" }, { ops({}, { config = "c.yaml" }) })
    assert.is_nil((ops({ "p" }, { config = "c", distro = "q" })))
    assert.is_nil((ops({}, {})))
  end)
  it("reject a bad -w as a profile's concurrency would be", function()
    local code, _, err = support.run({ "apply", "-w", "120%", "c.yaml" })
    assert.equal(2, code)
    assert.matches("percentage must be 0-100", err, 1, true)
    code, _, err = support.run({ "apply" })
    assert.equal(2, code)
    assert.matches("missing CLUSTER", err, 1, true)
  end)
  it("reach the package in either form, not a usage error", function()
    local dir = support.temp_dir()
    local cluster, pkg = dir .. "/c.yaml", dir .. "/missing.tar.zst"
    write(cluster, "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: c}\nspec:\n"
      .. "  config: {loadbalancer: lb.example}\n"
      .. "  hosts:\n    - {role: controller, ssh: {address: 127.0.0.1, user: root}}\n")
    for _, argv in ipairs({ { "apply", "--dry-run", cluster, "--distro", pkg },
                            { "apply", "--dry-run", pkg, "--config", cluster } }) do
      local code, _, err = support.run(argv)
      assert.equal(1, code, err)
      assert.matches("--distro: " .. pkg, err, 1, true)
    end
    support.remove_tree(dir)
  end)
end)

describe("apply --tmpdir", function()
  it("is where the package archive is unpacked on this machine, and nothing of it stays there", function()
    local dir = support.temp_dir()
    local pkg = assert(require("cargoship.package.build").create(
      (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/tests/fixtures/packages/k3s", { out = dir }))
    local cluster = dir .. "/c.yaml"
    write(cluster, "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: c}\nspec:\n"
      .. "  config: {loadbalancer: lb.example}\n"
      .. "  hosts:\n    - {role: controller, ssh: {address: 127.0.0.1, port: 1, user: root}}\n")
    -- a directory that is not there: the unpack fails there, before any host is touched
    local code, _, err = support.run({ "apply", "--dry-run", cluster, "--distro", pkg, "--tmpdir", dir .. "/nope" })
    assert.equal(1, code, err)
    assert.matches("cannot make a temp directory under " .. dir .. "/nope", err, 1, true)
    -- one that is: the run goes on (to the unreachable host) and leaves the directory empty
    assert(os.execute("mkdir " .. dir .. "/tmp"))
    code, _, err = support.run({ "apply", "--dry-run", cluster, "--distro", pkg, "--tmpdir", dir .. "/tmp" })
    assert.equal(1, code, err)
    assert.not_matches("temp directory", err)
    local p = assert(io.popen("ls -A " .. dir .. "/tmp"))
    assert.equal("", p:read("a"))
    p:close()
    support.remove_tree(dir)
  end)
end)

describe("global log options and version -o json", function()
  it("-L json writes one JSON object per log line; -l picks the level", function()
    local dir = support.temp_dir()
    local code, _, err = support.run({ "-L", "json", "-l", "debug", "validate", dir .. "/none.yaml" })
    support.remove_tree(dir)
    assert.equal(1, code)
    local n = 0
    for line in err:gmatch("[^\n]+") do
      if line:sub(1, 1) == "{" then
        local o = cjson.decode(line)
        assert.truthy(o.level and o.msg and o.time)
        n = n + 1
      end
    end
    assert.truthy(n >= 1, err)
  end)
  it("version -o json is one object", function()
    local code, out = support.run({ "version", "-o", "json" })
    assert.equal(0, code)
    assert.equal("Lua 5.4", cjson.decode(out).lua)
  end)
end)

describe("sha256sum", function()
  it("prints HASH  FILE and fails on an unreadable file", function()
    local dir = support.temp_dir()
    write(dir .. "/a", "abc")
    local code, out, err = support.run({ "sha256sum", dir .. "/a", dir .. "/missing" })
    support.remove_tree(dir)
    assert.equal(1, code)
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  " .. dir .. "/a\n", out)
    assert.matches("missing", err, 1, true)
  end)
end)

describe("inventory from-ansible", function()
  local INI = "[controllers]\ncp1 ansible_host=192.0.2.10 ansible_user=admin\n"
    .. "cp2 ansible_host=192.0.2.11 ansible_port=2222\n\n[workers]\nw[1:2].lab ansible_ssh_private_key_file=/k/id\n\n"
    .. "[workers:vars]\nansible_user=ops\n\n[k8s:children]\ncontrollers\nworkers\n"
  local YAML = "all:\n  children:\n    controllers:\n      hosts:\n        cp1: {ansible_host: 192.0.2.10}\n"
    .. "    workers:\n      vars: {ansible_user: ops, ansible_port: 2200}\n      hosts:\n"
    .. "        w1: {ansible_host: 192.0.2.20}\n        w2: {ansible_host: 192.0.2.21, ansible_user: root}\n"

  -- What Ansible itself makes of the inventory: host -> {address, user, port, key}.
  local function ansible_hosts(path)
    local p = assert(io.popen("ANSIBLE_INVENTORY_UNPARSED_WARNING=0 ansible-inventory -i '" .. path
      .. "' --list </dev/null 2>/dev/null"))   -- stdin its own: see secrets/real_tools_spec
    local doc = cjson.decode(p:read("a"))
    p:close()
    local out = {}
    for name, v in pairs(doc._meta.hostvars) do
      out[name] = { address = v.ansible_host or name, user = v.ansible_user,
        port = v.ansible_port and math.tointeger(tonumber(v.ansible_port)),
        key = v.ansible_ssh_private_key_file }
    end
    return out, doc
  end

  for _, case in ipairs({ { "INI", "inv.ini", INI, 4 }, { "YAML", "inv.yml", YAML, 3 } }) do
    it("turns an " .. case[1] .. " inventory Ansible parses into a cluster validate accepts, same hosts", function()
      local dir = support.temp_dir()
      local inv, out = dir .. "/" .. case[2], dir .. "/c.yaml"
      write(inv, case[3])
      local code, _, err = support.run({ "inventory", "from-ansible", inv, "-o", out, "--name", "lab" })
      assert.equal(0, code, err)
      code, _, err = support.run({ "validate", out })
      assert.equal(0, code, err)
      local cluster = assert(require("cargoship.config").load(out))
      local want, doc = ansible_hosts(inv)
      local got = {}
      for _, h in ipairs(cluster.hosts) do
        local c = h.connection
        local name = h.hostname or c.address
        for n, w in pairs(want) do if w.address == c.address then name = n end end
        got[name] = { address = c.address, user = c.user ~= "root" and c.user or want[name] and want[name].user,
          port = c.port ~= 22 and c.port or want[name] and want[name].port, key = c.key_path }
        local in_controllers = false
        for _, n in ipairs(doc.controllers.hosts) do in_controllers = in_controllers or n == name end
        assert.equal(in_controllers and "controller" or "worker", h.role)
      end
      assert.equal(case[4], #cluster.hosts)
      assert.same(want, got)
      support.remove_tree(dir)
    end)
  end

  it("needs a controllers group", function()
    local dir = support.temp_dir()
    write(dir .. "/i.ini", "[nodes]\na\n")
    local code, _, err = support.run({ "inventory", "from-ansible", dir .. "/i.ini" })
    support.remove_tree(dir)
    assert.equal(1, code)
    assert.matches("--controllers GROUP", err, 1, true)
  end)
end)
