-- Specs for the cluster files the Go tool accepts (issue 13 item 1): each class loads, with
-- the values that tool would use; its silent mistakes stay located errors here.
local support = require "unit.config.support"
local config = require "cargoship.config"

local doc, host_doc = support.doc, support.host_doc
local SSH = "ssh: {address: 192.0.2.10}\n"

local function literal(text)
  return config.load_string(text, "test.yaml", { env = function() return "EXPANDED" end })
end

describe("a profile the file does not define", function()
  it("loads when spec.config.profiles is absent: the name stays, a verbose warning says so", function()
    local c = support.ok(host_doc(SSH .. "profile: gpu"))
    assert.equal("gpu", c.hosts[1].profile)
    assert.equal(1, #c.warnings)
    assert.equal("verbose", c.warnings[1].level)
    assert.matches('test.yaml:11:16: spec.hosts[0].profile: profile "gpu" is not defined', c.warnings[1].text,
      1, true)
    assert.matches("nothing is merged", c.warnings[1].text, 1, true)
    local merged = config.merge_profile(c, c.hosts[1])
    assert.same({}, merged.engine.labels)
  end)

  it("loads when profiles lacks it, naming the defined ones", function()
    local c = support.ok(host_doc(SSH .. "profile: contrl", "profiles: {control: {engine: {labels: {a: b}}}}"))
    assert.equal("contrl", c.hosts[1].profile)
    assert.matches('(defined: "control") (did you mean "control"?)', c.warnings[1].message, 1, true)
    assert.same({}, config.merge_profile(c, c.hosts[1]).engine.labels)
  end)
end)

describe("empty strings in the Go tool's plain-string fields", function()
  it("are unset, as Go's zero value is", function()
    local c = support.ok(doc({
      config = "registries:\n"
        .. "  - {name: docker.io, proxy: {url: m.example}, auth: {token: \"\", user: \"\", pass: \"\"},"
        .. " tls: {ca: \"\", caFile: /etc/ca.pem, certFile: \"\", keyFile: \"\"}}",
      hosts = {
        "role: controller\nprofile: \"\"\nhostname: \"\"\nprivateAddress: \"\"\nprivateInterface: \"\"\n"
          .. "os: \"\"\nssh: {address: 192.0.2.10, user: \"\", keyPath: \"\"}\n"
          .. "files: [{name: f, data: \"\", dst: /etc/f, dstDir: \"\", src: \"\", user: \"\", group: \"\"}]\n"
          .. "host: {firewall: {rules: [{action: allow, direction: \"\", source: \"\", destination: \"\","
          .. " port: \"\", protocol: \"\", ingress: \"\", egress: \"\"}]}}",
        "role: worker\nopenSSH: {address: w, user: \"\", keyPath: \"\", configPath: \"\"}",
      } }))
    local h = c.hosts[1]
    assert.is_nil(h.profile); assert.is_nil(h.hostname); assert.is_nil(h.private_address)
    assert.is_nil(h.private_interface); assert.is_nil(h.os)
    assert.equal("root", h.connection.user); assert.is_nil(h.connection.key_path)
    assert.equal("", h.files[1].data); assert.equal("/etc/f", h.files[1].dst)
    local r = h.host.firewall.rules[1]
    assert.equal("in", r.direction); assert.equal("any", r.source); assert.is_nil(r.port)
    assert.is_nil(c.registries[1].auth)
    assert.equal("/etc/ca.pem", c.registries[1].tls.ca_file)
    assert.is_nil(c.hosts[2].connection.user)
    assert.same({}, c.warnings)
  end)

  it("stay errors where they would do harm", function()
    support.fails(host_doc("ssh: {address: \"\"}"), "spec.hosts[0].ssh.address: expected a non-empty string")
    support.fails(host_doc(SSH .. "files: [{name: \"\", data: x, dst: /f}]"), "files[0].name: expected a non-empty")
    support.fails(host_doc(SSH .. "host: {firewall: {rules: [{action: allow, direction: forward, ingress: \"\","
      .. " egress: e}]}}"), 'missing required field "ingress"')
    support.fails(host_doc(SSH .. "files: [{name: f, src: \"\", dst: /f}]"), 'exactly one of "src", "data"')
    support.fails(doc({ config = "registries: [{name: \"\", tls: {caFile: /c}}]" }),
      "registries[0].name: expected a non-empty string")
    support.fails(doc({ config = "registries: [{name: r, auth: {user: u, pass: \"\"}}]" }), "auth.user needs auth.pass")
  end)
end)

describe("a host without a connection block", function()
  it("loads with a warning; unconnected names it", function()
    local c = support.ok(doc({ hosts = { "role: controller\n" .. SSH, "role: worker\nhostname: w1" } }))
    assert.is_nil(c.hosts[2].connection)
    assert.equal("w1", c.hosts[2].name)
    assert.equal("warn", c.warnings[1].level)
    assert.matches("spec.hosts[1]: no connection", c.warnings[1].text, 1, true)
    local list, msg = config.unconnected(c)
    assert.equal(1, #list)
    assert.matches("w1 (spec.hosts[1])", msg, 1, true)
    assert.is_nil(config.unconnected(c, { c.hosts[1] }))
  end)
end)

describe("dollars in values", function()
  local values = { "a$$b", "${", "x${UNTERMINATED", "${HOME}", "${1bad}", "$$${X}$", "say \"${A}\" and 'b'" }
  it("reach the cluster exactly as written by default", function()
    for _, v in ipairs(values) do
      local c, errs = literal(host_doc(SSH .. "environment: {V: " .. string.format("%q", v) .. "}"))
      assert(c, errs and config.format_errors(errs))
      assert.equal(v, c.hosts[1].environment.V)
    end
  end)

  it("are expanded only with expand_env", function()
    local text = host_doc(SSH .. "environment: {V: \"a$$b-${X}\"}")
    local c = assert(config.load_string(text, "t.yaml", { expand_env = true, env = function() return "x" end }))
    assert.equal("a$b-x", c.hosts[1].environment.V)
    local _, errs = config.load_string(host_doc(SSH .. "environment: {V: \"${\"}"), "t.yaml",
      { expand_env = true, env = function() return nil end })
    assert.matches("unterminated ${", errs[1].text, 1, true)
  end)
end)

describe("the Go tool's silent mistakes", function()
  it("stay located errors", function()
    support.fails(host_doc(SSH .. "profil: x"), 'test.yaml:11:7: spec.hosts[0].profil: unknown field "profil"')
    support.fails(host_doc("ssh: {address: h, prot: 22}"), 'unknown field "prot"')
    support.fails(doc({ hosts = { "role: master\n" .. SSH } }), 'spec.hosts[0].role: expected one of')
    support.fails(host_doc(SSH .. "host: {firewall: {rules: [{action: permit}]}}"), "action: expected one of")
  end)
end)
