-- Specs of inputs found by hostile testing (issue 8): each gives a located error, fast,
-- and never prints back a secret or a huge value.
local S = require "unit.config.support"
local errors = require "cargoship.config.errors"

-- Asserts text fails with one error containing needle, located at file:line:col.
local function located(text, needle)
  local errs = S.fails(text, needle)
  for _, e in ipairs(errs) do
    if e:find(needle, 1, true) then
      assert.truthy(e:match("^test%.yaml:%d+:%d+: "), "not located: " .. e)
      return e
    end
  end
end

-- Seconds of CPU fn takes.
local function timed(fn)
  local t0 = os.clock()
  local r = fn()
  return os.clock() - t0, r
end

describe("a bare-scalar document", function()
  it("is a located error, not an internal error", function()
    assert.are.equal('test.yaml:1:1: expected a mapping at the top of the document, got string "foo"',
      located("foo\n", "expected a mapping"))
  end)

  it("that is false is a located error, not an internal error (found by fuzz/cluster)", function()
    assert.are.equal("test.yaml:1:1: expected a mapping at the top of the document, got boolean false",
      located("FALSE", "expected a mapping"))
  end)

  it("truncated inside its first key is a located error", function()
    located("apiVer", "expected a mapping at the top of the document, got string \"apiVer\"")
  end)

  it("is located at its own document's start", function()
    local e = located("# c\n\n---\n  42\n", "expected a mapping")
    assert.truthy(e:find("^test%.yaml:4:3: "), e)
    located("---\n~\n---\nfoo\n---\n- 1\n", "none of the 2 documents has kind: ZarfCluster")
  end)
end)

describe("a host address", function()
  it("over 253 characters is refused for ssh and openSSH", function()
    local long = ("a"):rep(254)
    for _, block in ipairs({ "ssh", "openSSH" }) do
      local e = located(S.host_doc(block .. ": {address: " .. long .. "}"), "at most 253 characters")
      assert.truthy(e:find("(254 bytes)", 1, true), e)
      assert.is_nil(e:find(long, 1, true))
    end
  end)

  it("of 253 characters in DNS labels is accepted", function()
    local label = ("a"):rep(63)
    local name = table.concat({ label, label, label, ("b"):rep(61) }, ".")
    assert.are.equal(253, #name)
    S.ok(S.host_doc("ssh: {address: " .. name .. "}"))
  end)
end)

describe("control characters in identity fields", function()
  local cases = {
    { "ssh.user", 'ssh: {address: 192.0.2.1, user: "ro\\0ot"}', "ssh.user", "0x00 at position 3" },
    { "ssh.keyPath", 'ssh: {address: 192.0.2.1, keyPath: "/k\\0x"}', "ssh.keyPath", "0x00" },
    { "ssh.keyPath (other control)", 'ssh: {address: 192.0.2.1, keyPath: "/k\\x1b"}', "ssh.keyPath", "0x1b" },
    { "ssh.address", 'ssh: {address: "192.0.2.1\\0evil"}', "ssh.address", "0x00 at position 10" },
    { "openSSH.user", 'openSSH: {address: h, user: "a\\tb"}', "openSSH.user", "0x09" },
    { "openSSH.configPath", 'openSSH: {address: h, configPath: "/c\\0"}', "openSSH.configPath", "0x00" },
    { "an ssh option value", 'ssh: {address: 192.0.2.1, options: {ProxyJump: "j\\0h"}}',
      "ssh.options.ProxyJump", "0x00" },
    { "an ssh option value (escape)", 'ssh: {address: 192.0.2.1, options: {ProxyJump: "j\\x1bh"}}',
      "ssh.options.ProxyJump", "0x1b" },
    { "an ssh option name", 'ssh: {address: 192.0.2.1, options: {"A\\0B": x}}', "ssh.options", "\\x00" },
    { "a bastion user", 'ssh: {address: 192.0.2.1, bastion: {address: b, user: "u\\0"}}',
      "ssh.bastion.user", "0x00" },
    { "a file owner", 'files: [{name: f, data: x, dst: /f, user: "r\\0"}]', "files[0].user", "0x00" },
    { "an environment value", 'environment: {A: "x\\0y"}', "environment.A", "0x00" },
  }
  for _, c in ipairs(cases) do
    it("are refused in " .. c[1], function()
      local e = located(S.host_doc(c[2]), c[3])
      assert.truthy(e:find(c[4], 1, true), e)
    end)
  end

  it("are refused in registry names and auth users", function()
    located(S.doc({ config = 'registries:\n  - {name: "docker.io\\0x", auth: {token: t}}' }),
      "registries[0].name: must not contain control characters")
    located(S.doc({ config = 'registries:\n  - {name: r, auth: {user: "u\\0", pass: p}}' }),
      "registries[0].auth.user: must not contain control characters")
  end)

  it("are kept in file data, which is content, not a name", function()
    local c = S.ok(S.host_doc('ssh: {address: 192.0.2.1}\nfiles: [{name: f, data: "a\\0b\\tc", dst: /f}]'))
    assert.are.equal("a\0b\tc", c.hosts[1].files[1].data)
  end)
end)

describe("a huge value", function()
  local big = ("x"):rep(10 * 1024 * 1024)

  it("is refused fast: the did-you-mean does not compare it whole", function()
    local doc = S.host_doc("ssh: {address: 192.0.2.1}"):gsub("role: controller", "role: " .. big)
    local dt, errs = timed(function() return S.errors(doc) end)
    assert.is_true(dt < 1, string.format("took %.2f s", dt))
    local joined = table.concat(errs, "\n")
    assert.truthy(joined:find("spec.hosts[0].role: expected one of", 1, true), joined:sub(1, 500))
    assert.truthy(joined:find("(10485760 bytes)", 1, true))
    assert.is_true(#joined < 1000)
  end)

  it("as an unknown key is not printed back in full", function()
    local doc = S.host_doc("ssh: {address: 192.0.2.1}\n? " .. big .. "\n: 1")
    local dt, errs = timed(function() return S.errors(doc) end)
    assert.is_true(dt < 1, string.format("took %.2f s", dt))
    local joined = table.concat(errs, "\n")
    assert.truthy(joined:find('unknown field "xxxx', 1, true), joined:sub(1, 500))
    assert.truthy(joined:find("(10485760 bytes)", 1, true))
    assert.is_true(#joined < 1000, "error text is " .. #joined .. " bytes")
  end)
end)

describe("a long value in a pattern-checked field", function()
  local function reg(line) return S.doc({ config = "registries:\n" .. line }) end
  local cases = {
    -- the user-info search retried ".*@" at every byte: 20 KB took 2.6 s, 2 MB minutes
    { "a mirror URL of colons", reg('  - {name: r, proxy: {url: "' .. ("a:"):rep(1024 * 1024) .. '"}}'),
      "proxy.url: invalid mirror URL" },
    -- the PEM header pattern was retried at every "-----BEGIN ": 2 MB did not finish
    { "a CA of BEGIN markers", reg('  - {name: r, tls: {ca: "' .. ("-----BEGIN "):rep(200000) .. '"}}'),
      "tls.ca: expected a PEM block" },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " is refused in well under a second", function()
      local dt, e = timed(function() return located(c[2], c[3]) end)
      assert.is_true(dt < 1, string.format("took %.2f s", dt))
      assert.is_true(#e < 1000)
    end)
  end

  it("a PEM block after a malformed BEGIN line is still found, as pem.Decode finds it", function()
    local ca = "-----BEGIN x\n-----BEGIN CERTIFICATE-----  \nQUJD\n-----END CERTIFICATE-----\n"
    local registries = require "cargoship.config.registries"
    assert.is_nil(registries.pem_problem(ca))
    assert.are.equal('expected a PEM block of type CERTIFICATE, got "KEY"',
      registries.pem_problem("-----BEGIN KEY-----\nQUJD\n-----END KEY-----\n"))
  end)
end)

describe("errors.suggest", function()
  it("skips candidates whose length is too far off, without comparing", function()
    assert.are.equal("controller", errors.suggest("controler", { "controller", "worker" }))
    -- a full comparison of 1 MB with "worker" takes seconds; skipping it is instant
    local dt, s = timed(function() return errors.suggest(("w"):rep(1024 * 1024), { "worker" }) end)
    assert.is_nil(s)
    assert.is_true(dt < 0.1, string.format("took %.2f s", dt))
    assert.are.equal("worker", errors.suggest("workre", { "controller", "worker" }))
  end)
end)

describe("errors.quote", function()
  it("cuts a long value on a character boundary and says how long it was", function()
    local s = ("é"):rep(40)   -- 80 bytes of two-byte characters
    local q = errors.quote(s)
    assert.truthy(utf8.len(q), "quote cut inside a character: " .. q)
    assert.truthy(q:find("..." .. '"' .. " (80 bytes)", 1, true), q)
  end)

  it("escapes control characters", function()
    assert.are.equal('"a\\x00b\\x7f"', errors.quote("a\0b\127"))
  end)
end)

describe("secret values in validation errors", function()
  local function reg(line) return S.doc({ config = "registries:\n" .. line }) end

  it("a numeric password is not printed", function()
    local e = located(reg("  - {name: r, auth: {user: u, pass: 918273}}"), "auth.pass: expected a string")
    assert.is_nil(e:find("918273", 1, true), e)
  end)

  it("a token of the wrong type is not printed", function()
    local e = located(reg("  - {name: r, auth: {token: 5551234}}"), "auth.token: expected a string")
    assert.is_nil(e:find("5551234", 1, true), e)
    e = located(reg("  - {name: r, auth: {token: true}}"), "auth.token: expected a string")
    assert.is_nil(e:find("true", 1, true), e)
  end)

  it("a proxy URL with a password shows the URL without it", function()
    local e = located(reg('  - {name: r, proxy: {url: "https://alice:hunter2@m.example/x"}}'),
      "must not carry user-info")
    assert.is_nil(e:find("hunter2", 1, true), e)
    assert.is_nil(e:find("alice", 1, true), e)
    assert.truthy(e:find('"https://******@m.example/x"', 1, true), e)
    e = located(reg('  - {name: r, proxy: {url: "ftp://u:pw9@m"}}'), "proxy.url")
    assert.is_nil(e:find("pw9", 1, true), e)
  end)

  it("file data of the wrong type is not printed (files carry tokens and keys)", function()
    local e = located(S.host_doc("ssh: {address: 192.0.2.1}\nfiles: [{name: f, data: 424242, dst: /f}]"),
      "files[0].data: expected a string")
    assert.is_nil(e:find("424242", 1, true), e)
  end)

  it("an environment value of the wrong type is not printed", function()
    local e = located(S.host_doc("ssh: {address: 192.0.2.1}\nenvironment: {PASS: 3.14159}"), "environment.PASS")
    assert.is_nil(e:find("3.14159", 1, true), e)
  end)
end)

describe("a cluster file that is no file", function()
  it("/dev/zero is refused at the size cap, fast, without eating memory", function()
    local t0 = os.clock()
    local c, errs = S.config.load("/dev/zero")
    assert.is_nil(c)
    assert.are.equal("/dev/zero: read: larger than 33554432 bytes, which is no cluster file", errs[1].text)
    assert.is_true(os.clock() - t0 < 1)
    collectgarbage()
    assert.is_true(collectgarbage("count") < 256 * 1024)
  end)

  it("a directory is refused with the reason", function()
    local c, errs = S.config.load("/")
    assert.is_nil(c)
    assert.are.equal("/: read: Is a directory", errs[1].text)
  end)

  it("a pipe is read like a file (validate <(generator) keeps working)", function()
    local path = os.tmpname()
    os.remove(path)
    assert(os.execute("mkfifo " .. path .. " && (cat " .. S.example("minimal.yaml") .. " > " .. path .. " &)"))
    local c = assert(S.config.load(path))
    os.remove(path)
    assert.are.equal("lab", c.name)
  end)
end)
