-- lab_distros_spec: the lab-distros archives (ctest lab-distros/build) verify and carry every flavour per role.
--
-- For build/lab-distros/{k3s,rke2,upstream}.tar.zst: `cargoship package verify` passes;
-- `package inspect` names the engine and version and lists, for each of the RPM, APT and binary
-- flavours and each role, the files a host of that role takes (lua/cargoship/phases/lib/uploads.lua's
-- selection); the .rpm and .deb files inside are real packages (rpm -qp, dpkg-deb) holding the
-- engine's files at the paths its configurer (distros/<engine>) looks at.
local build = os.getenv("CARGOSHIP_BUILD_DIR") or "build"
local bin = os.getenv("CARGOSHIP_BIN") or (build .. "/bin/cargoship")
local dir = build .. "/lab-distros"

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

-- inspect's text -> {engine = "k3s 1.35.2-k3s1", sections = {rpm = {lines}, apt = ..., binary = ..., none = ...}}
local function inspect(pkg)
  local out, code = run(q(bin) .. " package inspect " .. q(pkg))
  assert.are.equal(0, code, out)
  local r = { sections = {} }
  r.engine = out:match("\nengine:%s+([^\n]+)")
  local cur
  for line in out:gmatch("[^\n]+") do
    if line:match("^os files for RPM hosts") then cur = "rpm"
    elseif line:match("^os files for APT hosts") then cur = "apt"
    elseif line:match("^os files, binaries") then cur = "binary"
    elseif line:match("^os files no phase ships") then cur = "none"
    elseif line:match("^%S") then cur = nil
    elseif cur then
      r.sections[cur] = r.sections[cur] or {}
      table.insert(r.sections[cur], line)
    end
  end
  return r
end

-- The targets a host of `role` takes from one flavour's lines.
local function for_role(lines, role)
  local out = {}
  for _, l in ipairs(lines or {}) do
    local target = l:match("^%s+%d+%s+(/%S+)")
    if target and (l:find("every role", 1, true) or l:find("role " .. role .. ",", 1, true)) then
      out[#out + 1] = target
    end
  end
  return out
end

local function has(list, pattern)
  for _, v in ipairs(list) do if v:match(pattern) then return true end end
  return false
end

local ENGINES = {
  k3s = {
    engine = "k3s 1.35.2-k3s1",
    rpm = { all = { "/k3s%-selinux%-1%.6%-1%.el9%.noarch%.rpm$", "/k3s%-common%-1%.35%.2~k3s1%-0%.el9%.x86_64%.rpm$" },
            controller = { "/k3s%-server%-1%.35%.2~k3s1" }, worker = { "/k3s%-agent%-1%.35%.2~k3s1" } },
    apt = { all = { "/k3s%-common_1%.35%.2%+k3s1%-1_amd64%.deb$" },
            controller = { "/k3s%-server_1%.35%.2%+k3s1" }, worker = { "/k3s%-agent_1%.35%.2%+k3s1" } },
    binary = { all = { "^/usr/local/bin/k3s$", "^/usr/bin/kubectl$", "^/usr/local/bin/openssl$" },
               controller = { "^/etc/systemd/system/k3s%-server%.service$", "^/etc/sv/k3s%-server/run$" },
               worker = { "^/etc/systemd/system/k3s%-agent%.service$", "^/etc/sv/k3s%-agent/run$" } },
    staging = "/var/lib/rancher/k3s",
    -- package file -> paths it must hold
    contents = {
      ["k3s%-common%-.*%.rpm$"] = { "/usr/local/bin/k3s", "/usr/bin/kubectl" },
      ["k3s%-server%-.*%.rpm$"] = { "/usr/lib/systemd/system/k3s-server.service", "/etc/sv/k3s-server/run" },
      ["k3s%-agent%-.*%.rpm$"] = { "/usr/lib/systemd/system/k3s-agent.service", "/etc/sv/k3s-agent/run" },
      ["k3s%-common_.*%.deb$"] = { "./usr/local/bin/k3s", "./usr/bin/kubectl" },
      ["k3s%-server_.*%.deb$"] = { "./lib/systemd/system/k3s-server.service", "./etc/sv/k3s-server/run" },
    },
  },
  rke2 = {
    engine = "rke2 1.35.4-rke2r1",
    rpm = { all = { "/rke2%-selinux%-0%.20%-1%.el9%.noarch%.rpm$",
                    "/rke2%-common%-1%.35%.4~rke2r1%-0%.el9%.x86_64%.rpm$" },
            controller = { "/rke2%-server%-1%.35%.4~rke2r1" }, worker = { "/rke2%-agent%-1%.35%.4~rke2r1" } },
    apt = { all = { "/rke2%-common_1%.35%.4%+rke2r1%-1_amd64%.deb$" },
            controller = { "/rke2%-server_1%.35%.4%+rke2r1" }, worker = { "/rke2%-agent_1%.35%.4%+rke2r1" } },
    binary = { all = { "^/usr/local/bin/rke2$", "^/var/lib/rancher/rke2/bin/kubectl$" },
               controller = { "^/etc/systemd/system/rke2%-server%.service$", "^/etc/sv/rke2%-server/run$" },
               worker = { "^/etc/systemd/system/rke2%-agent%.service$", "^/etc/sv/rke2%-agent/run$" } },
    staging = "/var/lib/rancher/rke2",
    contents = {
      ["rke2%-common%-.*%.rpm$"] = { "/usr/bin/rke2", "/var/lib/rancher/rke2/bin/kubectl" },
      ["rke2%-server%-.*%.rpm$"] = { "/usr/lib/systemd/system/rke2-server.service", "/etc/sysconfig/rke2-server",
                                     "/etc/sv/rke2-server/run" },
      ["rke2%-agent%-.*%.rpm$"] = { "/usr/lib/systemd/system/rke2-agent.service", "/etc/sv/rke2-agent/run" },
      ["rke2%-common_.*%.deb$"] = { "./usr/bin/rke2", "./var/lib/rancher/rke2/bin/kubectl" },
      ["rke2%-agent_.*%.deb$"] = { "./lib/systemd/system/rke2-agent.service", "./etc/sv/rke2-agent/run" },
    },
  },
  upstream = {
    engine = "upstream 1.35.3",
    rpm = { all = { "/kubeadm%-1%.35%.3%-150500%.1%.1%.x86_64%.rpm$", "/kubelet%-1%.35%.3%-150500%.1%.1%.x86_64%.rpm$",
                    "/kubectl%-1%.35%.3%-150500%.1%.1%.x86_64%.rpm$" } },
    apt = { all = { "/kubeadm_1%.35%.3%-1%.1_amd64%.deb$", "/kubelet_1%.35%.3%-1%.1_amd64%.deb$",
                    "/kubectl_1%.35%.3%-1%.1_amd64%.deb$" } },
    binary = { all = { "^/usr/bin/kubeadm$", "^/usr/bin/kubelet$", "^/usr/bin/kubectl$",
                       "^/usr/lib/systemd/system/kubelet%.service$", "^/etc/sv/kubelet/run$",
                       "^/usr/lib/systemd/system/kubelet%.service%.d/10%-kubeadm%.conf$" } },
    staging = "/var/lib/kubernetes",
    contents = {
      ["kubeadm%-1.*%.rpm$"] = { "/usr/bin/kubeadm", "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" },
      ["kubelet%-1.*%.rpm$"] = { "/usr/bin/kubelet", "/usr/lib/systemd/system/kubelet.service", "/etc/sv/kubelet/run" },
      ["kubectl%-1.*%.rpm$"] = { "/usr/bin/kubectl" },
      ["kubeadm_.*%.deb$"] = { "./usr/bin/kubeadm", "./usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" },
      ["kubelet_.*%.deb$"] = { "./usr/bin/kubelet", "./usr/lib/systemd/system/kubelet.service" },
    },
  },
}

describe("lab-distros packages", function()
  for _, name in ipairs({ "k3s", "rke2", "upstream" }) do
    local want = ENGINES[name]
    local pkg = dir .. "/" .. name .. ".tar.zst"

    describe(name, function()
      it("passes package verify", function()
        local out, code = run(q(bin) .. " package verify " .. q(pkg))
        assert.are.equal(0, code, out)
        assert.truthy(out:find(": ok", 1, true), out)
      end)

      it("names its engine and version, and carries each flavour's files for each role", function()
        local r = inspect(pkg)
        assert.are.equal(want.engine, r.engine)
        for _, flavour in ipairs({ "rpm", "apt", "binary" }) do
          for _, role in ipairs({ "controller", "worker" }) do
            local got = for_role(r.sections[flavour], role)
            assert.is_true(#got > 0, name .. " " .. flavour .. ": nothing for " .. role)
            local patterns = {}
            for _, p in ipairs(want[flavour].all or {}) do patterns[#patterns + 1] = p end
            for _, p in ipairs(want[flavour][role] or {}) do patterns[#patterns + 1] = p end
            for _, p in ipairs(patterns) do
              assert.is_true(has(got, p), string.format("%s %s %s lacks %s in:\n  %s", name, flavour, role, p,
                table.concat(got, "\n  ")))
            end
            -- the other role's service files are not shipped to this one
            local other = role == "controller" and "worker" or "controller"
            for _, p in ipairs(want[flavour][other] or {}) do
              assert.is_false(has(got, p), name .. " " .. flavour .. " " .. role .. " also gets " .. p)
            end
          end
          if flavour ~= "binary" then
            for _, l in ipairs(r.sections[flavour]) do
              local t = l:match("^%s+%d+%s+(/%S+)")
              assert.are.equal(want.staging .. "/" .. flavour:gsub("apt", "deb") .. "/",
                t:sub(1, #want.staging + 5), "staged outside the engine's staging dir: " .. t)
            end
          end
        end
      end)

      it("holds real rpm and deb files with the engine's files at its paths", function()
        local tmp = os.tmpname()
        os.remove(tmp)
        assert(os.execute("mkdir -p " .. q(tmp) .. " && tar -I zstd -xf " .. q(pkg) .. " -C " .. q(tmp)))
        local listing = run("cd " .. q(tmp) .. " && find os -type f -name '*.rpm' -o -type f -name '*.deb'")
        local checked = 0
        for pattern, paths in pairs(want.contents) do
          local file
          for f in listing:gmatch("[^\n]+") do if f:match(pattern) then file = f end end
          assert.is_truthy(file, name .. ": no package file matching " .. pattern)
          local cmd = file:match("%.rpm$") and ("rpm -qpl " .. q(tmp .. "/" .. file))
            or ("dpkg-deb -c " .. q(tmp .. "/" .. file) .. " | awk '{print $6}'")
          local out, code = run(cmd)
          assert.are.equal(0, code, out)
          for _, p in ipairs(paths) do
            local found = false
            for line in out:gmatch("[^\n]+") do if line == p then found = true end end
            assert.is_true(found, file .. " lacks " .. p .. ":\n" .. out)
          end
          checked = checked + 1
        end
        os.execute("rm -rf " .. q(tmp))
        assert.is_true(checked >= 4)
      end)

      -- the dry run's forecast reads these headers locally (cargoship.package.rpm) and asks a host
      -- only for what the set does not provide: the lab's rpm database (lab-el-base) has it
      it("has rpms the forecast reads as rpm does, needing from a host only lab-el-base's capabilities", function()
        local rpm, evr = require "cargoship.package.rpm", require "cargoship.facts.rpm_evr"
        local tmp = os.tmpname()
        os.remove(tmp)
        assert(os.execute("mkdir -p " .. q(tmp) .. " && tar -I zstd -xf " .. q(pkg) .. " -C " .. q(tmp)))
        local heads = {}
        for f in run("find " .. q(tmp) .. " -type f -name '*.rpm' | sort"):gmatch("[^\n]+") do
          local h = assert(rpm.read(f))
          local said = run("rpm -qp --qf " .. q("%{NAME} %|EPOCH?{%{EPOCH}:}|%{VERSION}-%{RELEASE} %{ARCH}"
            .. "[ %{REQUIRENAME}]") .. " " .. q(f))
          local reqs = {}
          for _, r in ipairs(h.requires) do reqs[#reqs + 1] = " " .. r.name end
          local mine = h.name .. " " .. (h.epoch and (h.epoch .. ":") or "") .. h.version .. "-" .. h.release .. " "
            .. h.arch
          -- rpm lists rpmlib(...) too, which the forecast leaves out
          assert.are.equal(mine .. table.concat(reqs), (said:gsub(" rpmlib%([^)]*%)", "")))
          heads[#heads + 1] = h
        end
        os.execute("rm -rf " .. q(tmp))
        local outside = {}
        for _, r in ipairs(evr.outside(heads)) do outside[#outside + 1] = r.text end
        assert.are.same(name == "upstream" and { "/bin/sh", "python3", "containerd" } or { "/bin/sh", "python3" },
          outside)
      end)
    end)
  end
end)

-- The upgrade packages (tests/CMakeLists.txt CS_LAB_DISTRO_NEXT): the same stand-ins at a later
-- version, every file name and the engine's own --version moved with it.
local NEXT = {
  { "k3s-next", "k3s 1.35.3-k3s1", "k3s", "v1.35.3+k3s1", "/k3s%-common%-1%.35%.3~k3s1%-0%.el9%.x86_64%.rpm$" },
  { "rke2-next", "rke2 1.35.5-rke2r1", "rke2", "v1.35.5+rke2r1", "/rke2%-common_1%.35%.5%+rke2r1%-1_amd64%.deb$" },
  { "upstream-next", "upstream 1.35.4", "kubelet", "v1.35.4", "/kubeadm_1%.35%.4%-1%.1_amd64%.deb$" },
  { "upstream-next-minor", "upstream 1.36.0", "kubelet", "v1.36.0", "/kubelet%-1%.36%.0%-150500%.1%.1%.x86_64%.rpm$" },
  { "upstream-skip-minor", "upstream 1.37.0", "kubelet", "v1.37.0", "/kubeadm_1%.37%.0%-1%.1_amd64%.deb$" },
  { "k3s-next2", "k3s 1.35.4-k3s1", "k3s", "v1.35.4+k3s1", "/k3s%-common_1%.35%.4%+k3s1%-1_amd64%.deb$" },
  { "rke2-next2", "rke2 1.35.6-rke2r1", "rke2", "v1.35.6+rke2r1",
    "/rke2%-common%-1%.35%.6~rke2r1%-0%.el9%.x86_64%.rpm$" },
}

describe("lab-distros upgrade packages", function()
  for _, t in ipairs(NEXT) do
    local name, engine, binary, version, file = table.unpack(t)
    local pkg = dir .. "/" .. name .. ".tar.zst"
    it(name .. " verifies, names " .. engine .. " and its binary reports " .. version, function()
      local out, code = run(q(bin) .. " package verify " .. q(pkg))
      assert.are.equal(0, code, out)
      local r = inspect(pkg)
      assert.are.equal(engine, r.engine)
      local all = {}
      for _, lines in pairs(r.sections) do
        for _, l in ipairs(lines) do all[#all + 1] = l:match("^%s+%d+%s+(/%S+)") or "" end
      end
      assert.is_true(has(all, file), name .. " lacks " .. file)
      local tmp = os.tmpname()
      os.remove(tmp)
      assert(os.execute("mkdir -p " .. q(tmp) .. " && tar -I zstd -xf " .. q(pkg) .. " -C " .. q(tmp)))
      local exe = run("find " .. q(tmp) .. " -type f -name " .. binary .. " | head -1"):gsub("%s+$", "")
      local v = run("/usr/bin/python3 " .. q(exe) .. " --version")
      os.execute("rm -rf " .. q(tmp))
      assert.truthy(v:find(version, 1, true), exe .. " --version: " .. v)
    end)
  end
end)
