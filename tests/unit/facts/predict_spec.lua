-- Unit spec: the dry run's forecast (cargoship.facts.predict, cargoship.package.meta) on real packages and real tools.
--
-- The .debs are built here by Debian's dpkg-deb (gzip, xz and zstd control archives) and read
-- by the real archive module; the package managers' answers are what the real apt-get and
-- rpm printed (tests/fixtures/predict: apt-get -s satisfy / apt-get -s install of a .deb and
-- rpm -U --test of an .rpm, each with an unmet dependency); the probes for disk, kernel,
-- sysctl and the join address run in this machine's own shell.
local meta = require "cargoship.package.meta"
local predict = require "cargoship.facts.predict"
local util = require "cargoship.util"

local q = util.quote
local FIX = (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/tests/fixtures/predict/"

local function read(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local sh = require("unit.files").sh

-- runs a probe table the way host:probes does (one shell, markers between keys) -> res
local function probe_here(cmds)
  local res = {}
  for k, cmd in pairs(cmds) do
    local out, code = sh("sh -c " .. q("{ " .. cmd .. "\n} 2>/dev/null"))
    res[k] = { out = out, code = code }
  end
  return res
end

local work
setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
end)
teardown(function() os.execute("rm -rf " .. q(work)) end)

local function deb(name, fields, compress)
  local d = work .. "/" .. name .. "-" .. compress
  assert(os.execute("mkdir -p " .. q(d .. "/DEBIAN")))
  local f = assert(io.open(d .. "/DEBIAN/control", "w"))
  f:write("Package: " .. name .. "\nVersion: 1.2-3\nArchitecture: all\nMaintainer: t <t@example.org>\n", fields,
    "Description: test\n a continuation line\n")
  f:close()
  local out = d .. ".deb"
  local msg, code = sh(string.format("dpkg-deb -Z%s --build %s %s", compress, q(d), q(out)))
  assert(code == 0, msg)
  return out
end

describe("package.meta.deb", function()
  for _, z in ipairs { "gzip", "xz", "zstd" } do
    it("reads Package, Version and the relations of a " .. z .. " control archive", function()
      local info = assert(meta.deb(deb("cs-a", "Depends: python3, cs-missing (>= 2) | cs-other:any\n"
        .. "Pre-Depends: dpkg (>= 1.15)\nInstalled-Size: 12\n", z)))
      assert.are.same({ "cs-a", "1.2-3", "python3, cs-missing (>= 2) | cs-other:any", "dpkg (>= 1.15)", 12288 },
        { info.package, info.version, info.depends, info.pre_depends, info.installed_size })
    end)
  end
  it("splits a Depends field into clauses of alternatives", function()
    local r = meta.relations("python3, cs-missing (>= 2) | cs-other:any")
    assert.are.equal(2, #r)
    assert.are.same({ name = "cs-missing", rel = ">=", version = "2" }, r[2].alternatives[1])
    assert.are.same({ name = "cs-other" }, r[2].alternatives[2])
  end)
  it("names the file when it is no package", function()
    local p = work .. "/not-a.deb"
    local f = assert(io.open(p, "w")); f:write("plain text\n"); f:close()
    local info, why = meta.deb(p)
    assert.is_nil(info)
    assert.matches(p, why, 1, true)
  end)
end)

local function pkg_facts(out, mode)
  return predict.parse({ predict_packages = { out = "#" .. mode .. "\n" .. out .. "#rc 100\n", code = 0 } }, {})
end

describe("facts.predict: packages", function()
  local want = { packages = { method = "apt", staged_tool = "apt-get -s install", meta_tool = "apt-get -s satisfy",
    files = { { path = "/x/cs-a.deb", size = 1, package = "cs-a", depends = "python3, cs-nonexistent-xyz (>= 1)" } } } }

  it("names the missing dependency apt's simulation of declared dependencies reports, and who needs it", function()
    local out = read(FIX .. "apt-satisfy-unmet.stdout") .. read(FIX .. "apt-satisfy-unmet.stderr")
    local p = predict.problems(pkg_facts(out, "meta"), want)
    assert.are.same({ "the engine packages cannot install: cs-a needs cs-nonexistent-xyz (>= 1): not installable"
      .. " (apt-get -s satisfy)" }, p)
  end)

  it("names apt's unmet dependency of a staged .deb, alternatives joined", function()
    local out = read(FIX .. "apt-install-unmet.stdout") .. read(FIX .. "apt-install-unmet.stderr")
    local p = predict.problems(pkg_facts(out, "staged"), want)
    assert.are.same({ "the engine packages cannot install: cs-pred needs cs-missing (>= 2): not installable or"
      .. " cs-other:any: not installable (apt-get -s install)" }, p)
  end)

  it("names rpm's failed dependency", function()
    local w = { packages = { method = "rpm", staged_tool = "rpm -U --test", files = {} } }
    local p = predict.problems(pkg_facts(read(FIX .. "rpm-test-unmet.out"), "staged"), w)
    assert.are.same(
      { "the engine packages cannot install: cs-pred-1.0-1.noarch needs cs-missing >= 2 (rpm -U --test)" }, p)
  end)

  it("finds nothing when the simulation succeeds, or when nothing was simulated", function()
    local ok = "Reading package lists...\n0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n"
    assert.are.same({}, predict.problems(predict.parse({ predict_packages = { out = "#meta\n" .. ok .. "#rc 0\n" } },
      want), want))
    assert.are.same({}, predict.problems(predict.parse({ predict_packages = { out = "#none\n#rc 0\n" } }, want), want))
  end)

  it("simulates the staged files only when every one is at its target with its size", function()
    local a = work .. "/staged-a"
    local f = assert(io.open(a, "w")); f:write("12345"); f:close()
    local w = { packages = { method = "apt", staged = "echo STAGED", meta = "echo META",
      files = { { path = a, size = 5 } } } }
    assert.matches("#staged\nSTAGED\n#rc 0", probe_here(predict.probes(w)).predict_packages.out, 1, true)
    w.packages.files[2] = { path = work .. "/absent", size = 1 }
    assert.matches("#meta\nMETA\n#rc 0", probe_here(predict.probes(w)).predict_packages.out, 1, true)
  end)
end)

describe("facts.predict: disk", function()
  it("sums what still has to be uploaded per filesystem against its free bytes", function()
    local present = work .. "/present"
    local f = assert(io.open(present, "w")); f:write("abc"); f:close()
    local huge = 1 << 60
    local want = { disk = { { path = work .. "/new/dir/a", size = huge }, { path = present, size = 3 } } }
    local facts = predict.parse(probe_here(predict.probes(want)), want)
    local p = predict.problems(facts, want)
    assert.are.equal(1, #p)
    assert.matches("^no space left for the uploads on /%S* %(" .. work:gsub("%p", "%%%0") .. "/new/dir%): .* free, "
      .. "%d+%.%d TiB needed$", p[1])
    -- already there at its size: nothing to upload, nothing needed
    want.disk[1].size = 1
    assert.are.same({}, predict.problems(predict.parse(probe_here(predict.probes(want)), want), want))
  end)
end)

describe("facts.predict: ports, kernel, sysctl", function()
  it("reads LISTEN sockets from the kernel's table and names the engine's busy ports", function()
    local tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      .. "   0: 00000000:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
      .. "   1: 0100007F:2A02 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
    local want = { ports = { 6443, 10754, 10250 } }
    local f = predict.parse({ predict_ports = { out = tcp }, predict_engine = { code = 1 } }, want)
    assert.are.same({ "TCP port 6443 the engine listens on is already in use by another program" },
      predict.problems(f, want))
    f = predict.parse({ predict_ports = { out = tcp }, predict_engine = { code = 0 } }, want)
    assert.are.same({}, predict.problems(f, want), "the engine's own ports where it runs")
  end)

  it("names a kernel module the host cannot load and a sysctl key its kernel lacks", function()
    local want = { kernel = { "cs_no_such_module" }, sysctl = { "net.cs.no_such_key", "kernel.hostname" } }
    local f = predict.parse(probe_here(predict.probes(want)), want)
    local p = predict.problems(f, want)
    assert.matches("^kernel module cs_no_such_module cannot be loaded", p[1])
    assert.are.equal("sysctl net.cs.no_such_key cannot be set: the kernel has no such key", p[2])
    assert.are.equal(2, #p)
  end)
end)

describe("facts.predict: the join address", function()
  it("names a name that does not resolve", function()
    local t = { host = "lb.cargoship-predict.invalid", port = 6443, what = "the load balancer" }
    local out = sh("sh -c " .. q(predict.join_probe(t)))
    assert.are.equal("cannot resolve lb.cargoship-predict.invalid:6443 (the load balancer): the engine could not join",
      predict.join_problem(out, t))
  end)
  it("accepts an address that refuses (nothing listens yet) and names one that does not answer", function()
    local t = { host = "127.0.0.1", port = 9, what = "the leader h1" }
    local out = sh("sh -c " .. q(predict.join_probe(t)))
    assert.matches("^J 1 127%.0%.0%.1 .*refused", out)
    assert.is_nil(predict.join_problem(out, t))
    assert.are.equal("cannot reach 10.9.9.9:6443 (the leader h1) at 10.9.9.9: no answer within 2 s",
      predict.join_problem("J 124 10.9.9.9 \n", { host = "10.9.9.9", port = 6443, what = "the leader h1" }))
    assert.are.equal("cannot reach lb:6443 (the load balancer) at 10.9.9.9: No route to host",
      predict.join_problem("J 1 10.9.9.9 bash: connect: No route to host\nbash: line 1: /dev/tcp/x: No route\n",
        { host = "lb", port = 6443, what = "the load balancer" }))
    -- a cluster host whose firewall this run opens (-F) rejects or drops the port until then
    local fw = { host = "lb", port = 6443, what = "the load balancer", firewalled = true }
    assert.is_nil(predict.join_problem("J 1 10.9.9.9 bash: connect: No route to host\n", fw))
    assert.is_nil(predict.join_problem("J 124 10.9.9.9 \n", fw))
    assert.are.equal("cannot resolve lb:6443 (the load balancer): the engine could not join",
      predict.join_problem("J unresolved\n", fw))
  end)
end)
