-- Unit spec: the local rpm header reader (cargoship.package.rpm) and rpm's version rules (cargoship.facts.rpm_evr).
--
-- The .rpm files are built here by this machine's rpmbuild (Debian's rpm 4.18, as contrib/lab-distros
-- builds the lab's), and every answer is checked against the real rpm: `rpm -qp --qf` for what the
-- reader reads, rpm's own `rpm.vercmp` for the version order. Hostile input: every truncation of
-- a real file's headers, bit flips over them and hand-corrupted index entries each give a located
-- error, never a raise; the payload is never read. Last, the forecast of rpm files not on a host
-- yet: os.rhel's probe of their outside requirements run in this machine's shell against a real
-- rpm database (rpm --dbpath, packages entered with --justdb), judged by facts.predict.
local rpm = require "cargoship.package.rpm"
local evr = require "cargoship.facts.rpm_evr"
local predict = require "cargoship.facts.predict"
local os_registry = require "cargoship.os"
local util = require "cargoship.util"

local q = util.quote

local sh = require("unit.files").sh

local function read(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function write(p, s)
  local f = assert(io.open(p, "wb"))
  f:write(s)
  f:close()
  return p
end

local work
local built = {}

-- rpmbuild of a spec body (name first) -> path of the one .rpm it makes
local function build(name, body, arch)
  local spec = write(work .. "/" .. name .. ".spec", "Name: " .. name .. "\nSummary: t\nLicense: MIT\nAutoReqProv: no\n"
    .. "BuildArch: " .. (arch or "noarch") .. "\n" .. body)
  local out, code = sh(string.format("rpmbuild --quiet -bb %s --define %s --define %s --define %s --define %s",
    q(spec), q("_topdir " .. work .. "/top"), q("_rpmdir " .. work .. "/rpms"), q("_build_id_links none"),
    q("debug_package %{nil}")))
  assert(code == 0, out)
  local path = sh("find " .. q(work .. "/rpms") .. " -name " .. q(name .. "-[0-9]*.rpm")):match("[^\n]+")
  return assert(path, "no rpm built for " .. name)
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
  -- cs-tool: a file others need, an epoch, a virtual provide; cs-app needs it (inside the set),
  -- a file of it, a system capability and one nobody has; scriptlet and rpmlib requirements too
  built.tool = build("cs-tool", "Version: 2.4.1\nRelease: 3.el9\nEpoch: 2\nProvides: cs-virt = 5\n"
    .. "%description\nt\n%install\nmkdir -p %{buildroot}/usr/bin\necho x > %{buildroot}/usr/bin/cs-tool\n"
    .. "%files\n/usr/bin/cs-tool\n", "x86_64")
  built.app = build("cs-app", "Version: 1.0~rc1\nRelease: 1\nRequires: cs-tool >= 2:2.4, /usr/bin/cs-tool\n"
    .. "Requires: cs-virt >= 4, /bin/sh, python3, cs-absent >= 3\nRequires(post): cs-tool\n"
    .. "Recommends: cs-nice\n%description\nt\n%post\ntrue\n%files\n")
  built.old = build("cs-old", "Version: 1\nRelease: 1\nRequires: cs-virt >= 6, cs-tool < 2:2.4.1-3.el9\n"
    .. "%description\nt\n%files\n")
end)
teardown(function() os.execute("rm -rf " .. q(work)) end)

-- what rpm itself reads from the file, in the reader's terms
local function rpm_says(path)
  local out = sh("rpm -qp --qf " .. q("%{NAME}\n%|EPOCH?{%{EPOCH}}:{}|\n%{VERSION}\n%{RELEASE}\n%{ARCH}\n"
    .. "[R\t%{REQUIRENAME}\t%{REQUIREFLAGS}\t%{REQUIREVERSION}\n]"
    .. "[P\t%{PROVIDENAME}\t%{PROVIDEFLAGS}\t%{PROVIDEVERSION}\n]")
    .. " " .. q(path) .. "; rpm -qpl " .. q(path))
  local lines = {}
  for l in out:gmatch("(.-)\n") do lines[#lines + 1] = l end
  local r = { name = lines[1], epoch = tonumber(lines[2]), version = lines[3], release = lines[4], arch = lines[5],
    requires = {}, provides = {}, files = {} }
  for l in out:gmatch("[^\n]+") do
    local kind, n, f, v = l:match("^([RP])\t([^\t]*)\t(%d+)\t(.*)$")
    local flags = tonumber(f)
    if kind == "R" and flags & ((1 << 24) | (1 << 19)) == 0 and not n:find("^rpmlib%(") then
      r.requires[#r.requires + 1] = { name = n, flags = flags, version = v ~= "" and v or nil }
    elseif kind == "P" then
      r.provides[#r.provides + 1] = { name = n, flags = flags, version = v ~= "" and v or nil }
    elseif l:match("^/") then
      r.files[l] = true
    end
  end
  return r
end

describe("package.rpm.read", function()
  it("reads what rpm -qp reads: name, epoch, version, release, arch, requires, provides, files", function()
    for _, which in ipairs { "tool", "app", "old" } do
      local info = assert(rpm.read(built[which]))
      local want = rpm_says(built[which])
      assert.are.same(want, { name = info.name, epoch = info.epoch, version = info.version, release = info.release,
        arch = info.arch, requires = info.requires, provides = info.provides, files = info.files })
    end
    local app = assert(rpm.read(built.app))
    -- rpmlib(...) and the Recommends left out; Requires(post) kept, %post's /bin/sh too
    assert.are.equal(8, #app.requires)
    assert.is_true(assert(rpm.read(built.tool)).files["/usr/bin/cs-tool"])
    for _, which in ipairs { "tool", "app" } do
      assert.are.equal(sh("rpm -qp --qf %{SHA256HEADER} " .. q(built[which])), rpm.read(built[which]).sha256header)
    end
  end)

  it("reads only the lead and the two headers, never the payload", function()
    local big = work .. "/big.rpm"
    -- the real file with 64 MiB more payload after it: the reader must not ask for it
    assert(os.execute("cp " .. q(built.tool) .. " " .. q(big) .. " && head -c 67108864 /dev/zero >> " .. q(big)))
    local real_open, asked = io.open, 0
    io.open = function(p, m)   -- luacheck: ignore 122
      local f, e = real_open(p, m)
      if not f then return f, e end
      return setmetatable({}, { __index = {
        read = function(_, n) asked = asked + n return f:read(n) end,
        close = function() return f:close() end } })
    end
    local ok, info = pcall(rpm.read, big)
    io.open = real_open        -- luacheck: ignore 122
    assert.is_true(ok, info)
    assert.are.equal("cs-tool", info.name)
    assert.is_true(asked < #read(built.tool), "asked for " .. asked .. " bytes")
  end)

  it("names the file and the byte for every truncation of the headers, and never raises", function()
    local whole = read(built.app)
    local h = assert(rpm.read(built.app))
    assert.is_truthy(h)
    -- the headers end where rpm's payload starts: every shorter prefix must fail, located
    local cut = work .. "/cut.rpm"
    local last_bad = 0
    for n = 0, #whole - 1, 7 do
      local info, why = rpm.read(write(cut, whole:sub(1, n)))
      if not info then
        last_bad = n
        assert.matches("^" .. cut:gsub("%p", "%%%0") .. ": byte %d+: ", why)
      end
    end
    assert.is_true(last_bad > 1000, "the headers end before byte " .. last_bad)
  end)

  it("turns corrupted index entries and bit flips into located errors", function()
    local whole = read(built.app)
    local sig_n = string.unpack(">I4", whole, 96 + 9)
    local p = work .. "/bad.rpm"
    local function at(off, bytes) return whole:sub(1, off) .. bytes .. whole:sub(off + #bytes + 1) end
    local cases = {
      { at(0, "\0\0\0\0"), "byte 0: not an rpm file" },
      { at(96, "\0\0\0"), "byte 96: no signature header here" },
      { at(96 + 8, "\255\255\255\255"), "byte 104: signature header claims 4294967295 index entries" },
      { at(96 + 12, "\127\255\255\255"), "byte 108: signature header claims 2147483647 bytes of data" },
      -- the first index entry's offset far outside the store
      { at(96 + 16 + 8, "\0\255\255\255"), "byte 112: signature header entry 0 (tag " },
      -- its type: 99
      { at(96 + 16 + 4, "\0\0\0\99"), "has unknown type 99" },
      -- its count, the whole store and more
      { at(96 + 16 + 12, "\0\255\255\255"), "byte 112: signature header entry 0" },
    }
    assert.is_true(sig_n >= 1)
    for _, c in ipairs(cases) do
      local info, why = rpm.read(write(p, c[1]))
      assert.is_nil(info)
      assert.matches(c[2], why, 1, true)
    end
    -- bit flips anywhere in the headers: an answer or a located error, never a raise
    math.randomseed(23)
    for _ = 1, 3000 do
      local i = math.random(1, math.min(#whole, 4096))
      local b = whole:byte(i) ~ (1 << math.random(0, 7))
      local ok, info, why = pcall(rpm.read, write(p, whole:sub(1, i - 1) .. string.char(b) .. whole:sub(i + 1)))
      assert.is_true(ok, info)
      assert.is_true(info ~= nil or why:match("^" .. p:gsub("%p", "%%%0") .. ": byte %d+: ") ~= nil, why)
    end
  end)

  it("names a file that is no rpm, or is missing", function()
    local info, why = rpm.read(write(work .. "/four", "test"))
    assert.is_nil(info)
    assert.are.equal(work .. "/four: byte 0: file ends inside the lead (96 bytes wanted, 4 there)", why)
    info, why = rpm.read(work .. "/absent.rpm")
    assert.is_nil(info)
    assert.matches("absent.rpm", why, 1, true)
  end)
end)

describe("facts.rpm_evr", function()
  it("orders versions as rpm's own rpm.vercmp does", function()
    local pairs_ = { { "1.0", "1.0" }, { "1.0", "2.0" }, { "2.0.1", "2.0" }, { "1.0~rc1", "1.0" },
      { "1.0^git1", "1.0" },
      { "1.0^git1", "1.0.1" }, { "1.0~rc1", "1.0~rc2" }, { "1.0a", "1.0" }, { "1.0a", "1.0.1" }, { "010", "10" },
      { "1.35.2~k3s1", "1.35.2" }, { "2.229.0", "2.164.2" }, { "a", "1" }, { "1_0", "1.0" }, { "1.0.", "1.0" },
      { "fc9", "fc10" }, { "1.el9", "1.el9_2" }, { "5.5p1", "5.5p10" }, { "1~", "1" }, { "1^", "1" }, { "1b", "1a" } }
    local lua = {}
    for i, p in ipairs(pairs_) do
      lua[#lua + 1] = string.format("print(%d, rpm.vercmp(%q, %q))", i, p[1], p[2])
    end
    local out, code = sh("rpm --eval " .. q("%{lua:" .. table.concat(lua, " ") .. "}"))
    assert.are.equal(0, code, out)
    local n = 0
    for i, want in out:gmatch("(%d+)\t(%-?%d)") do
      n = n + 1
      local p = pairs_[tonumber(i)]
      assert.are.equal(tonumber(want), evr.vercmp(p[1], p[2]), p[1] .. " vs " .. p[2])
      assert.are.equal(-tonumber(want), evr.vercmp(p[2], p[1]), p[2] .. " vs " .. p[1])
    end
    assert.are.equal(#pairs_, n, out)
  end)

  it("matches a requirement's range against a provide, epochs and releases as rpm does", function()
    local E, G, L = evr.EQUAL, evr.GREATER, evr.LESS
    local P = { name = "x", flags = E, version = "2:2.4.1-3.el9" }
    assert.is_true(evr.satisfies(P, { name = "x", flags = G | E, version = "2:2.4" }))
    assert.is_true(evr.satisfies(P, { name = "x", flags = G | E, version = "2.4" }))   -- no epoch: 0
    assert.is_false(evr.satisfies(P, { name = "x", flags = G | E, version = "3:1" }))
    assert.is_false(evr.satisfies(P, { name = "x", flags = L, version = "2:2.4.1-3.el9" }))
    assert.is_true(evr.satisfies(P, { name = "x", flags = L | E, version = "2:2.4.1" }))   -- no release: not compared
    assert.is_true(evr.satisfies({ name = "x", flags = 0 }, { name = "x", flags = G, version = "99" }))
    assert.is_false(evr.satisfies({ name = "x", flags = E, version = "5" },
      { name = "x", flags = G | E, version = "6" }))
  end)

  it("keeps the requirements the set itself does not satisfy, naming who needs them", function()
    local set = { assert(rpm.read(built.tool)), assert(rpm.read(built.app)), assert(rpm.read(built.old)) }
    local out = {}
    for _, r in ipairs(evr.outside(set)) do out[#out + 1] = r.text .. " <- " .. table.concat(r.by, ",") end
    -- in the headers' order (rpmbuild sorts them)
    assert.are.same({ "/bin/sh <- cs-app", "cs-absent >= 3 <- cs-app", "python3 <- cs-app",
      "cs-tool < 2:2.4.1-3.el9 <- cs-old", "cs-virt >= 6 <- cs-old" }, out)
  end)
end)

describe("the forecast of rpm files not on the host", function()
  local db
  setup(function()
    db = work .. "/db"
    built.base = build("cs-base", "Version: 9.3\nRelease: 1\nProvides: /bin/sh, python3\n%description\nt\n%files\n")
    local out, code = sh(string.format("rpm --dbpath %s --initdb && rpm --dbpath %s -i --justdb --nodeps %s %s",
      q(db), q(db), q(built.base), q(built.tool)))
    assert(code == 0, out)
  end)

  -- want.packages as phases.lib.predict builds it for these files, probed here against db
  local function foretell(which)
    local heads = {}
    for i, w in ipairs(which) do heads[i] = assert(rpm.read(built[w])) end
    local reqs = evr.outside(heads)
    local host_os = os_registry.by_name("rocky"):new {}
    local want = { packages = { method = "rpm", files = { { path = work .. "/not-there.rpm", size = 1 } },
      staged = "echo STAGED", meta = #reqs > 0 and assert(host_os:simulate_requires(reqs)) or nil,
      meta_tool = "rpm -q --whatprovides",
      requires = reqs } }
    local cmd = predict.probes(want).predict_packages
    local out = sh("sh -c " .. q("rpm() { command rpm --dbpath " .. q(db) .. " \"$@\"; }\n" .. cmd))
    return predict.problems(predict.parse({ predict_packages = { out = out, code = 0 } }, want), want), out
  end

  it("names each requirement the host's rpm database does not satisfy, and who needs it", function()
    local p, out = foretell { "app" }
    assert.are.same({ "the engine packages cannot install: cs-app needs cs-absent >= 3 (rpm -q --whatprovides)" }, p,
      out)
    p, out = foretell { "old" }
    assert.are.same({
      "the engine packages cannot install: cs-old needs cs-tool < 2:2.4.1-3.el9 (rpm -q --whatprovides)",
      "the engine packages cannot install: cs-old needs cs-virt >= 6 (rpm -q --whatprovides)" }, p, out)
  end)

  it("foretells nothing rpm lacks when a repository is configured (the install may fetch it)", function()
    local _, out = foretell { "app" }
    assert.matches("C 3 1", out, 1, true)   -- cs-absent
    local heads = { assert(rpm.read(built.app)) }
    assert.are.same({}, predict.parse_requires("R\n" .. out, evr.outside(heads)))
  end)

  it("takes a staged rpm for the package only when its header digest matches, not another of its size", function()
    local host_os = os_registry.by_name("rocky"):new {}
    local info = assert(rpm.read(built.app))
    local staged = work .. "/staged.rpm"
    local function mode()
      local w = { packages = { method = "rpm", staged = "echo STAGED", meta = "echo META", files = { { path = staged,
        size = #read(built.app), identity = info.sha256header, identity_cmd = host_os:package_identity(staged) } } } }
      return sh("sh -c " .. q(predict.probes(w).predict_packages)):match("^#(%a+)")
    end
    write(staged, read(built.app))
    assert.are.equal("staged", mode())
    -- one byte of the main header changed: same size, a header that no longer matches its digest
    local bytes = read(built.app)
    local i = bytes:find("MIT", 1, true)
    write(staged, bytes:sub(1, i - 1) .. "XIT" .. bytes:sub(i + 3))
    assert.are.equal("meta", mode())
  end)

  it("finds nothing when the set and the host together satisfy every requirement", function()
    local heads = { assert(rpm.read(built.tool)), assert(rpm.read(built.base)) }
    assert.are.same({}, evr.outside(heads))
    local p, out = foretell { "tool" }
    assert.are.same({}, p)
    assert.matches("^#none\n", out)
  end)
end)
