-- Specs for the syntax helpers behind validation: paths, suggestions, addresses, RE2 patterns.
local errors = require "cargoship.config.errors"
local net = require "cargoship.config.net"
local regex = require "cargoship.config.regex"
local registries = require "cargoship.config.registries"
local firewall = require "cargoship.config.firewall"

describe("errors helpers", function()
  it("builds JSON-path style paths with 0-based indices", function()
    assert.equal("spec", errors.join("", "spec"))
    assert.equal("spec.hosts[2]", errors.join("spec.hosts", 3))
    assert.equal('labels["node.kubernetes.io/x"]', errors.join("labels", "node.kubernetes.io/x"))
    assert.equal('rewrite["^a\\"b"]', errors.join("rewrite", '^a"b'))
  end)
  it("suggests close names", function()
    assert.equal("keyPath", errors.suggest("keypath", { "address", "keyPath" }))
    assert.equal("privateAddress", errors.suggest("privateAdress", { "privateAddress", "privateInterface" }))
    assert.equal("labels", errors.suggest("lables", { "labels", "taints" }))
    assert.is_nil(errors.suggest("icmp", { "tcp", "udp" }))
    assert.is_nil(errors.suggest("zzz", { "role" }))
    assert.equal(3, errors.levenshtein("kitten", "sitting"))
  end)
  it("describes values for messages", function()
    assert.equal('string "a\\nb"', errors.describe("a\nb"))
    assert.equal("integer 5", errors.describe(5))
    assert.equal("a sequence", errors.describe({ 1 }))
    assert.equal("a mapping", errors.describe({ a = 1 }))
    assert.equal("boolean true", errors.describe(true))
  end)
end)

describe("net", function()
  it("knows IPv4 and IPv6 addresses", function()
    for _, ok in ipairs({ "192.0.2.1", "0.0.0.0", "::", "::1", "2001:db8::1", "fe80::1:2:3:4",
      "::ffff:192.0.2.1",
                          "1:2:3:4:5:6:7:8" }) do
      assert.truthy(net.ip_family(ok), ok)
    end
    for _, bad in ipairs({ "256.0.0.1", "01.2.3.4", "1.2.3", "1:2:3:4:5:6:7:8:9", "1::2::3",
      "2001:db8::1%eth0",
                           "example.com", "", ":::" }) do
      assert.falsy(net.ip_family(bad), bad)
    end
  end)
  it("knows CIDRs", function()
    assert.equal(4, net.cidr_family("10.0.0.0/8"))
    assert.equal(6, net.cidr_family("fd00::/8"))
    assert.is_nil(net.cidr_family("10.0.0.0/33"))
    assert.is_nil(net.cidr_family("10.0.0.0/"))
  end)
  it("knows RFC 1123 host names", function()
    assert.is_true(net.is_hostname("a-b.example"))
    assert.is_false(net.is_hostname("-a.example"))
    assert.is_false(net.is_hostname("a..b"))
    assert.is_false(net.is_hostname(string.rep("a", 64)))
  end)
  it("parses ports and ranges", function()
    assert.same({ 80, 80 }, { net.port_range("80") })
    assert.same({ 30000, 32767 }, { net.port_range("30000-32767") })
    assert.is_nil((net.port_range("0")))
    assert.is_nil((net.port_range("5-1")))
    assert.is_nil((net.port_range("http")))
  end)
  it("parses mirror URLs like the Go tool", function()
    local u = net.parse_url("mirror.example:5000")
    assert.equal("https://mirror.example:5000", u.url)
    assert.equal("mirror.example:5000", u.host)
    assert.equal(5000, u.port)
    assert.equal("[2001:db8::1]:443", net.parse_url("http://[2001:db8::1]:443/v2").host)
    assert.is_nil((net.parse_url("https://user:pw@m.example")))
    assert.is_nil((net.parse_url("ftp://m.example")))
    assert.is_nil((net.parse_url("https://")))
  end)
end)

describe("RE2 syntax check", function()
  it("accepts RE2 patterns", function()
    for _, p in ipairs({ "^library/(.*)", "a|b", "(?i)abc", "(?:x)+?", "(?P<n>a)", "(?<n>a)", "[[:alpha:]_-]",
                         "[]a]", "\\d{2,3}", "x{3}", "x{2,}", "\\pL\\p{Greek}", "\\x{41}\\x41", "\\Q(*\\E",
                         "\\.", "\\012", "a{", "{}", "^*", "[\\]]", "(?s-i:.)" }) do
      assert.is_true(regex.check(p), p)
    end
  end)
  it("refuses what RE2 refuses", function()
    for _, p in ipairs({ "(a", "a)", "*a", "a**", "(?=a)", "(?!a)", "(?<=a)", "\\1", "[a", "[z-a]",
                         "\\", "\\e", "x{1001}", "x{3,2}", "(?P<>a)", "(?)", "|*", "(?i)*", "\\C" }) do
      assert.is_nil((regex.check(p)), p)
    end
  end)
end)

describe("registry secrets", function()
  it("tells ciphertext apart by its header", function()
    assert.is_true(registries.is_encrypted("$ANSIBLE_VAULT;1.1;AES256\n00"))
    assert.is_true(registries.is_encrypted("  -----BEGIN AGE ENCRYPTED FILE-----\nx"))
    assert.is_false(registries.is_encrypted("-----BEGIN CERTIFICATE-----"))
  end)
  it("checks PEM certificates", function()
    assert.is_nil(registries.pem_problem("junk\n-----BEGIN CERTIFICATE-----\nMIIB\nAA==\n-----END" ..
      " CERTIFICATE-----\n"))
    assert.matches("base64",
      registries.pem_problem("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"))
    assert.matches("END", registries.pem_problem("-----BEGIN CERTIFICATE-----\nMIIB\n"))
  end)
end)

describe("firewall rule keys", function()
  it("sanitises names and derives keys for unnamed rules", function()
    assert.equal("web-80", firewall.sanitize("Web.80"))
    assert.equal("a-b--c", firewall.sanitize("a/b :c!"))
    assert.equal("forward-allow-any-any-eth0-cni0-80-tcp", firewall.rule_key({ direction = "forward",
      action = "allow", ingress = "eth0", egress = "cni0", port = "80", protocol = "tcp" }))
  end)
end)
