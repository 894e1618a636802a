-- Integration spec on the lab: a built package's files, a real .rpm (dnf) and .deb (apt) on Debian and Rocky hosts.
--
-- Issue 10 "Done when": from nothing the upload phases put every file in place with its
-- mode, owner and hash; the RPM's %post and the .deb's postinst ran; a second dry run has
-- nothing to do in the upload phases and a second real run changes no byte (overlay upper
-- dirs); an upload cut mid-way (link down) leaves no partial file at the target and the
-- re-run converges.
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"
local packages = require "integration.packages"

local q = util.quote
local N = math.min(4, #lab.hosts())
local read, write = lab.read, lab.write
local UPLOAD_PHASES = { "upload_files", "upload_rpm", "upload_apt", "upload_binaries", "install_staged" }

local work, pk, pkg_path
-- two tags of one repository on a registry with a port: the names upstream made collide
local IMAGES = { "registry.local:5000/team/app:1.0", "registry.local:5000/team/app:1.1" }

local function ssh(i, cmd)
  return lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " h" .. i .. " " .. q(cmd))
end

local function distro_yaml(p)
  return string.format([[
apiVersion: zarf.dev/v1alpha1
kind: ZarfDistro
metadata: {name: upload-test, version: 1.35.4-rke2r1, architecture: amd64}
spec:
  type: rke2
  version: 1.35.4-rke2r1
  config:
    files:
      - {source: site.pem, target: /etc/cs-test/site.pem, perm: "0640", user: daemon, group: daemon,
         symlinks: [/etc/cs-test/links/site.pem]}
      - {data: "inline data\n", target: /etc/cs-test/inline.txt}
      - {source: %s, target: /opt/cs-big/blob.bin, shasum: "%s"}
    imageConfig:
      path: /var/lib/rancher/rke2/agent/images
      sources: [oci]
      images: ["%s", "%s"]
    os:
      files:
        - {source: %s, target: /var/lib/rancher/rke2/rpm/cs-test-1.0-1.noarch.rpm, selector: {package: rpm}}
        - {source: %s, target: /var/lib/rancher/rke2/deb/cs-test_1.0_all.deb, selector: {package: apt}}
]], p.big, p.big_sha256, IMAGES[1], IMAGES[2], p.rpm, p.deb)
end

local function cluster()
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: uploads",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs { table.unpack(lab.hosts(), 1, N) } do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i, h.address, lab.key, lab.known_hosts)
    if i == 1 then
      lines[#lines + 1] = "      files:\n        - {name: note, data: \"for h1 only\\n\", dst: /etc/cs-test/note.txt, "
        .. "perm: \"0600\"}"
    end
  end
  return write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

local function apply(args, background, env)
  local out, err = work .. "/out.json", work .. "/err.txt"
  -- the engine phases left out: these packages carry stub engine files, not an engine
  local cmd = string.format("env HOME=%s %s %s apply --output json" .. run.NO_ENGINE .. " --distro %s %s %s"
    .. " </dev/null >%s 2>%s", q(work), env or "", q(lab.bin), q(pkg_path), args, q(work .. "/cluster.yaml"),
    q(out), q(err))
  if background then
    os.execute("(" .. cmd .. "; echo $? > " .. q(work .. "/rc") .. ") &")
    return
  end
  local _, how, code = os.execute(cmd)
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err) }
  local ok, doc = pcall(cjson.decode, r.stdout)
  assert(ok, "stdout is not JSON (exit " .. r.code .. "): " .. r.stdout:sub(1, 300) .. "\n" .. r.stderr)
  r.doc = doc
  return r
end

local function phase(doc, id)
  for _, p in ipairs(doc.phases) do if p.id == id then return p end end
  error("no phase " .. id .. " in the report")
end

local function actions_of(doc, id)
  local n = 0
  for _, h in ipairs(phase(doc, id).hosts) do n = n + #h.actions end
  return n
end

local LOCK = { "cargoship%.lock" }
local function uppers()
  local s = {}
  for i = 1, N do s[i] = lab.upper_tree(i, LOCK) end
  return s
end

-- The lab's SELinux stand-in reads its mode from /etc/selinux/config (Rocky hosts only).
local function selinux(i, mode)
  ssh(i, "[ ! -f /etc/selinux/config ] || sed -i 's/^SELINUX=.*/SELINUX=" .. mode .. "/' /etc/selinux/config")
end

local function clean_hosts()
  for i = 1, N do
    ssh(i, "rm -rf /etc/cs-test /opt/cs-big /var/lib/rancher /var/lib/cs-test /var/lib/cargoship/manifest.txt "
      .. "/etc/cargoship/distro-release.json; dpkg -r cs-test >/dev/null 2>&1; rpm -e cs-test >/dev/null 2>&1; true")
  end
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work .. "/src")))
  pk = packages.build()
  write(work .. "/src/site.pem", "-----BEGIN CERTIFICATE-----\nlab\n-----END CERTIFICATE-----\n")
  packages.oci_layout(work .. "/src/oci", IMAGES)
  write(work .. "/src/distro.yaml", distro_yaml(pk))
  local code, out = lab.sh(q(lab.bin) .. " package create " .. q(work .. "/src") .. " -o " .. q(work))
  assert(code == 0, out)
  pkg_path = out:match("([^\n]+)\n?$")
  cluster()
  clean_hosts()
  -- this spec is about uploads: its Rocky hosts run with SELinux disabled, so phase 9 has no
  -- container-selinux to install (selinux_spec covers that phase on Enforcing hosts)
  for i = 1, N do selinux(i, "disabled") end
end)

teardown(function()
  for i = 1, N do selinux(i, "enforcing") end
  clean_hosts()
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("apply --distro: the upload phases on Debian and Rocky-flavoured hosts", function()
  local plan, first, second_plan, before, second, after

  setup(function()
    plan = apply("--dry-run")
    first = apply("--confirm")
    second_plan = apply("--dry-run")
    before = uppers()
    second = apply("--confirm")
    after = uppers()
  end)

  it("plans each file with its size in a dry run from nothing", function()
    assert.are.equal(3, plan.code, plan.stderr)
    local p = phase(plan.doc, "upload_files")
    assert.are.equal("would_act", p.verdict)
    assert.are.equal(N, #p.hosts)
    for _, h in ipairs(p.hosts) do
      local sizes = {}
      for _, a in ipairs(h.actions) do if a.kind == "upload" then sizes[a.path] = a.size end end
      assert.are.equal(64 * 1048576, sizes["/opt/cs-big/blob.bin"], h.host)
      assert.are.equal(12, sizes["/etc/cs-test/inline.txt"], h.host)
      assert.is_not_nil(sizes["/etc/cs-test/site.pem"], h.host)
      assert.are.equal(h.host == "h1", sizes["/etc/cs-test/note.txt"] ~= nil, h.host)
    end
  end)

  it("puts every file in place with its mode, owner, hash and links", function()
    assert.are.equal(0, first.code, first.stderr .. first.stdout:sub(1, 2000))
    for i = 1, N do
      local code, out = ssh(i, "cd /etc/cs-test && stat -c '%n %a %U:%G' site.pem inline.txt /opt/cs-big/blob.bin"
        .. " && readlink links/site.pem && sha256sum /opt/cs-big/blob.bin site.pem | cut -c1-64")
      assert.are.equal(0, code, out)
      assert.are.equal(string.format("site.pem 640 daemon:daemon\ninline.txt 644 root:root\n/opt/cs-big/blob.bin 644"
        .. " root:root\n/etc/cs-test/site.pem\n%s\n%s\n", pk.big_sha256, util.sha256(read(work .. "/src/site.pem"))),
        out, "h" .. i)
      local _, note = ssh(i, "stat -c '%a' /etc/cs-test/note.txt")
      assert.are.equal(i == 1 and "600\n" or "", i == 1 and note or "", "h" .. i)
      code, out = ssh(i, "stat -c '%a' /etc/cargoship/distro-release.json; cat /var/lib/cargoship/manifest.txt")
      assert.are.equal(0, code, out)
      assert.matches("^600\n", out)
      assert.matches("file\t/opt/cs%-big/blob%.bin\n", out)
      assert.matches("engine\t/var/lib/rancher/rke2/", out)
      -- one tarball per image, for the host's arch, each naming its own tag
      for _, ref in ipairs(IMAGES) do
        local name = require("cargoship.package.images").file_name(ref, "none")
        assert.matches("image\t/var/lib/rancher/rke2/agent/images/" .. name:gsub("%p", "%%%0"), out)
        local c, o = ssh(i, "cd /tmp && tar -xOf /var/lib/rancher/rke2/agent/images/" .. name .. " manifest.json")
        assert.are.equal(0, c, o)
        assert.are.same({ ref }, cjson.decode(o)[1].RepoTags)
      end
    end
  end)

  it("installs the real .rpm with dnf on Rocky hosts, the real .deb with apt on Debian, scriptlets ran", function()
    for i = 1, N do
      local h = lab.host(i)
      if h.os == "rocky" then
        local code, out = ssh(i, "rpm -q cs-test && cat " .. packages.RPM_MARK .. " /usr/share/cs-test/hello")
        assert.are.equal(0, code, out)
        assert.are.equal("cs-test-1.0-1.noarch\ncs-test %post ran\nrpm payload\n", out, "h" .. i)
      else
        local code, out = ssh(i, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Status}\\n' cs-test && cat "
          .. packages.DEB_MARK .. " /usr/share/cs-test/hello")
        assert.are.equal(0, code, out)
        assert.are.equal("cs-test 1.0 installed\ncs-test postinst ran\ndeb payload\n", out, "h" .. i)
      end
    end
  end)

  it("has nothing to do in the upload phases on a second dry run", function()
    for _, id in ipairs(UPLOAD_PHASES) do
      assert.are.equal(0, actions_of(second_plan.doc, id), id .. ": " .. cjson.encode(phase(second_plan.doc, id)))
    end
  end)

  it("uploads nothing and changes no byte on any host's disk the second time", function()
    assert.are.equal(0, second.code, second.stderr)
    for _, id in ipairs(UPLOAD_PHASES) do assert.are.equal(0, actions_of(second.doc, id), id) end
    for i = 1, N do
      local diff = {}
      for _, line in ipairs(lab.snapshot_diff(before[i], after[i])) do
        -- reading rpm's SQLite database (rpm -q, as any rpm reader does) re-stamps the mtime
        -- of its shared-memory index without changing a byte of it: same sha256 both sides
        local a, b = line:match("^~ /[%w/.]-rpmdb%.sqlite%-shm: .* (sha256:%x+) => .* (sha256:%x+)$")
        if not (a and a == b) then diff[#diff + 1] = line end
      end
      assert.are.same({}, diff, "h" .. i .. "'s upper dir")
    end
  end)
end)

describe("an upload cut mid-way", function()
  it("leaves no partial file at the target, and the re-run converges", function()
    local i = 2
    ssh(i, "rm -f /opt/cs-big/blob.bin")
    -- the cut run cannot release h2's lock: a short stale window lets the re-run take it over
    local short_lock = "CARGOSHIP_LOCK_STALE_AFTER=6 CARGOSHIP_LOCK_INTERVAL=1"
    apply("--confirm --timeout 40s", true, short_lock)
    -- wait until the big file's temp name exists on the host, then pull the link
    local seen
    for _ = 1, 200 do
      local _, out = ssh(i, "ls -a /opt/cs-big/ 2>/dev/null | grep -c cargoship")
      if tonumber(out) and tonumber(out) > 0 then seen = true break end
      os.execute("sleep 0.05")
    end
    assert.is_true(seen, "the upload started")
    local code, out = lab.lab("link " .. i .. " down")
    assert.are.equal(0, code, out)
    for _ = 1, 120 do
      if read(work .. "/rc") ~= "" then break end
      os.execute("sleep 0.5")
    end
    lab.lab("link " .. i .. " up")
    for _ = 1, 60 do
      if ssh(i, "true") == 0 then break end
      os.execute("sleep 0.5")
    end
    assert.are_not.equal("0\n", read(work .. "/rc"), "the cut run failed")
    os.remove(work .. "/rc")
    code, out = ssh(i, "test -e /opt/cs-big/blob.bin && echo present || echo absent")
    assert.are.equal("absent\n", out, "no partial file at the target (exit " .. tostring(code) .. ")")
    -- the lost run's lock stays on h2 until it is stale: the re-run says so, then takes it over.
    -- It can be fresh here although the link was down for most of a minute: the heartbeats the
    -- cut run queued while the link was down sit in its orphaned socket, and TCP's next
    -- retransmit delivers them (and sshd runs them) after the link is back up, even after the
    -- cut run has ended. The re-run then meets a fresh lock whose run is gone, and says that.
    local rerun = apply("--confirm", false, short_lock)
    if rerun.code == 4 then
      assert.matches("h" .. i .. ": the lock at [^\n]* is held by a run that is gone %(pid %d+", rerun.stderr)
      local more = assert(tonumber(rerun.stderr:match("stale after ([%d.]+) s more")), rerun.stderr)
      os.execute("sleep " .. math.ceil(more) + 1)
      rerun = apply("--confirm", false, short_lock)
    end
    assert.are.equal(0, rerun.code, rerun.stderr)
    code, out = ssh(i, "sha256sum /opt/cs-big/blob.bin | cut -c1-64; ls -a /opt/cs-big | grep -c cargoship")
    assert.are.equal(pk.big_sha256 .. "\n0\n", out, "whole, no temp file left (exit " .. tostring(code) .. ")")
  end)
end)
