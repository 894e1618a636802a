-- tests/integration/apply_run.lua: running `cargoship apply` on the lab and comparing its JSON plan with the run.
--
-- M.work() -> a fresh local directory; M.cluster(work, hosts, extra) writes work/cluster.yaml
-- with every given lab host (the first a controller), `extra(i, h)` adding YAML under a host;
-- M.apply(work, args) -> {code, stdout, stderr, doc} (M.command(work, command, args): another pipeline
-- command's); M.package(name) -> a lab-distros package's path; M.ssh(i, cmd) -> code, output (a new
-- login every time); M.compare(plan, run) asserts a dry run's plan is what the run did,
-- phase by phase, host by host, action by action (up to phase index `last` when given: a run
-- that failed there skipped the rest; only phases of the set `unassessed` may be unassessed
-- on hosts of the plan, and those hosts are left out there), and returns the run's actions flat;
-- M.phase(doc, id) -> that phase of a report.
local cjson = require "cjson"
local assert = require "luassert"
local util = require "cargoship.util"
local lab = require "integration.lab"

local M = {}
local q = util.quote

function M.work()
  local work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
  return work
end

function M.cluster(work, hosts, extra)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: prep",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs(hosts) do
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", h.address, lab.key, lab.known_hosts)
    if extra then
      local more = extra(i, h)
      if more then lines[#lines + 1] = more end
    end
  end
  return lab.write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

function M.apply(work, args)
  return M.command(work, "apply", args)
end

-- M.command(work, command, args) -> as M.apply, for another pipeline command (engine-config-sync, prepare).
function M.command(work, command, args)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("env HOME=%s %s %s --output json %s %s </dev/null >%s 2>%s",
    q(work), q(lab.bin), command, args, q(work .. "/cluster.yaml"), q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = lab.read(out), stderr = lab.read(err) }
  os.remove(out)
  os.remove(err)
  local ok, doc = pcall(cjson.decode, r.stdout)
  assert(ok, "stdout is not JSON (exit " .. r.code .. "): " .. r.stdout:sub(1, 300) .. "\n" .. r.stderr)
  r.doc = doc
  return r
end

-- M.package(name) -> the path of lab-distros/<name>.tar.zst in the build, which must exist.
function M.package(name)
  local build = os.getenv("CARGOSHIP_BUILD_DIR") or (lab.src .. "/build")
  local path = build .. "/lab-distros/" .. name .. ".tar.zst"
  assert(io.open(path), path .. " is missing: build the lab-distros target (cmake --build build -t lab-distros)")
  return path
end

function M.ssh(i, cmd)
  return lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " h" .. i .. " " .. q(cmd))
end

function M.phase(doc, id)
  for _, p in ipairs(doc.phases) do
    if p.id == id then return p end
  end
end

local function planned_part(a)
  local p = {}
  for k, v in pairs(a) do
    if k ~= "outcome" and k ~= "error" then p[k] = v end
  end
  return p
end

-- A real run that stopped at its plan because nothing was pending ("nothing to apply", "... to sync"):
-- it ran no phase, took no lock, and its plan had no work.
function M.stopped_at_plan(doc)
  return doc.dry_run == false and doc.outcome == "ok" and type(doc.error) == "string"
    and doc.error:find("^nothing to %a+$") ~= nil
end

-- A phase's verdict in a run, or, for a run that stopped at a plan with nothing to do,
-- in that plan (where the phase was assessed and had nothing to do).
function M.verdict(doc, id)
  if M.stopped_at_plan(doc) then return M.phase(doc.plan, id).verdict end
  return M.phase(doc, id).verdict
end

function M.compare(plan, run, last, unassessed)
  assert.are.equal(#plan.phases, #run.phases, "the same phases")
  if M.stopped_at_plan(run) then
    -- nothing planned but the lock (around the others), nothing run: the plan is what ran
    assert.is_false(plan.pending, "a run stopped at a plan with pending work")
    for _, p in ipairs(run.phases) do assert.are.equal("skipped", p.verdict, p.id) end
    return {}
  end
  local all = {}
  for i, pp in ipairs(plan.phases) do
    if last and i > last then break end
    local rp = run.phases[i]
    assert.are.same({ pp.number, pp.id }, { rp.number, rp.id }, "phase " .. i)
    -- hosts the plan could not assess there (it reads what an earlier phase would create)
    -- say why, and the run does what it assesses then; the phases of `unassessed` must
    -- have such hosts, every other host is compared
    local skip = {}
    for _, h in ipairs(pp.hosts) do
      if h.reason ~= cjson.null then skip[h.host] = true end
    end
    if unassessed and unassessed[pp.id] then
      assert(next(skip) or #pp.hosts == 0, pp.id .. " was assessed on every host")
    end
    local ph, rh = {}, {}
    for _, h in ipairs(pp.hosts) do if #h.actions > 0 and not skip[h.host] then ph[#ph + 1] = h end end
    for _, h in ipairs(rp.hosts) do if #h.actions > 0 and not skip[h.host] then rh[#rh + 1] = h end end
    assert.are.equal(#ph, #rh, pp.id .. ": hosts with actions")
    for j, h in ipairs(ph) do
      local r = rh[j]
      assert.are.equal(h.host, r.host, pp.id)
      local function says(list)
        local out = {}
        for _, a in ipairs(list) do out[#out + 1] = tostring(a.say) end
        return table.concat(out, " | ")
      end
      assert.are.equal(#h.actions, #r.actions, pp.id .. " on " .. h.host .. ": as many actions run as planned"
        .. "\nplanned: " .. says(h.actions) .. "\nran: " .. says(r.actions))
      for k, a in ipairs(h.actions) do
        assert.are.equal(cjson.null, a.outcome, "a plan's action has no outcome")
        assert.are.same(planned_part(a), planned_part(r.actions[k]), string.format("%s on %s, action %d", pp.id,
          h.host, k))
        all[#all + 1] = { phase = pp.id, host = h.host, action = r.actions[k] }
      end
    end
  end
  return all
end

-- M.container_selinux(work, pkgdir) -> the YAML of a spec.config.os.files list carrying a stub
-- container-selinux rpm (built here with rpmbuild), staged where a built package keeps it
-- (pkgdir/os/0/): the lab's rocky hosts are Enforcing (the SELinux stand-in) and air-gapped,
-- so phase 9 needs the package's own rpm there, as an air-gapped operator's package has it.
function M.container_selinux(work, pkgdir)
  local rpm = work .. "/rb/RPMS/noarch/container-selinux-2.229.0-1.lab.noarch.rpm"
  if not io.open(rpm) then
    local spec = lab.write(work .. "/container-selinux.spec", table.concat({ "Name: container-selinux",
      "Version: 2.229.0", "Release: 1.lab", "Summary: lab stand-in of container-selinux", "License: MIT",
      "BuildArch: noarch", "%description", "Stand-in.", "%files", "" }, "\n"))
    assert(os.execute(string.format("rpmbuild --quiet --define %s -bb %s >/dev/null 2>&1",
      q("_topdir " .. work .. "/rb"), q(spec))), "rpmbuild failed")
  end
  assert(os.execute("mkdir -p " .. q(pkgdir .. "/os/0") .. " && cp " .. q(rpm) .. " "
    .. q(pkgdir .. "/os/0/container-selinux.noarch.rpm") .. " && cp " .. q(rpm) .. " "
    .. q(pkgdir .. "/container-selinux.noarch.rpm")))
  return "[{source: container-selinux.noarch.rpm, target: /opt/cs/container-selinux.noarch.rpm,"
    .. " selector: {package: rpm}}]"
end

-- The engine phases (18-22) left out, for specs whose packages carry no engine: what they
-- test is preparing and uploading; install_spec installs engines from lab-distros packages.
M.NO_ENGINE = " --skip-phases 18-22"

-- M.built(distro_yaml) -> the path of a package archive built from it with `cargoship package
-- create`, as an operator ships one: apply uploads a package's files only from a built package.
-- Built again only when the distro.yaml changed (a spec may edit it between runs): one
-- package, one release record on the hosts, so a second apply has nothing to write.
local builds, cache = 0, {}
function M.built(distro_yaml)
  local dir = distro_yaml:match("^(.*)/[^/]*$") or "."
  local text = lab.read(distro_yaml)
  local hit = cache[distro_yaml]
  if hit and hit.text == text then return hit.path end
  builds = builds + 1
  -- inside the package's own directory (the build takes only the files distro.yaml lists), so
  -- the spec's work directory takes it when it goes: beside it, every run left one in /tmp
  local out = string.format("%s/.built-%d", dir, builds)
  local p = io.popen(string.format("mkdir -p %s && %s package create %s -o %s 2>&1", q(out), q(lab.bin), q(dir),
    q(out)))
  local out_text = p:read("a")
  local ok = p:close()
  assert(ok, "package create " .. dir .. ": " .. out_text)
  local path = assert(out_text:match("([^\n]+%.tar[%.%w]*)\n?$"), "package create printed no archive: " .. out_text)
  cache[distro_yaml] = { text = text, path = path }
  return path
end

-- Every host's upper dir, the lock's files aside, and the rpm database's SQLite side files:
-- any reader (`rpm -q`, which phase 9 asks where SELinux is on) creates the write-ahead log
-- empty and touches the shared-memory index, changing no package's record (a real EL host
-- has both already); the directories copied up to hold them are left out with them, so
-- anything else written under /var/lib still shows.
-- fapolicyd's rpm backend likewise rewrites its own trust database when the rpm database
-- changed (its own state, at its own pace, after the run that installed a package).
M.IGNORE = { "cargoship%.lock", "rpmdb%.sqlite%-shm$", "rpmdb%.sqlite%-wal$", "^/var$", "^/var/lib$",
  "^/var/lib/rpm$", "^/var/lib/fapolicyd/[%w.]+%.mdb$" }
function M.uppers(n)
  local s = {}
  for i = 1, n do s[i] = lab.upper_tree(i, M.IGNORE) end
  return s
end

function M.assert_unchanged(before, after, n)
  for i = 1, n do
    assert.are.same({}, lab.snapshot_diff(before[i], after[i]), "h" .. i .. "'s upper dir")
  end
end

return M
