-- Specs for every cluster-file rule: each with a document that breaks it and one that keeps it.
local support = require "unit.config.support"

local doc, host_doc = support.doc, support.host_doc
local SSH = "ssh: {address: 192.0.2.10}\n"

-- {description, failing document, expected error text (substring), passing document}
local function cases(list)
  for _, c in ipairs(list) do
    it(c[1], function()
      support.fails(c[2], c[3])
      support.ok(c[4])
    end)
  end
end

describe("document root and metadata", function()
  cases({
    { "apiVersion is zarf.dev/v1alpha1 when given",
      doc({ head = "apiVersion: v1\nkind: ZarfCluster\nmetadata: {name: t}" }),
      'apiVersion: expected "zarf.dev/v1alpha1", got string "v1"',
      doc({ head = "kind: ZarfCluster\nmetadata: {name: t}" }) },
    { "kind is required",
      doc({ head = "apiVersion: zarf.dev/v1alpha1\nmetadata: {name: t}" }),
      'test.yaml:1:1: missing required field "kind"',
      doc() },
    { "unknown root fields are errors",
      doc({ head = "kind: ZarfCluster\nmetadata: {name: t}\nstatus: {}" }),
      'test.yaml:3:1: status: unknown field "status"',
      doc() },
    { "metadata is required",
      doc({ head = "kind: ZarfCluster" }),
      'missing required field "metadata"',
      doc() },
    { "metadata.name follows [a-z0-9][a-z0-9-]*",
      doc({ head = "kind: ZarfCluster\nmetadata: {name: -lab}" }),
      'metadata.name: expected lower-case letters, digits and \'-\', starting with a letter or digit, got' ..
        ' string "-lab"',
      doc({ head = "kind: ZarfCluster\nmetadata: {name: 0lab-2}" }) },
    { "metadata.name is required",
      doc({ head = "kind: ZarfCluster\nmetadata: {}" }),
      'metadata: missing required field "name"',
      doc() },
    { "metadata.encryption.age.recipients is a list of strings",
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n  encryption: {age: {recipients: age1abc}}" }),
      "metadata.encryption.age.recipients: expected a sequence, got string",
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n"
        .. "  encryption: {age: {recipients: [age1abc]}}" }) },
    { "metadata.encryption.age.lastModified is RFC 3339",
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n  encryption: {age: {lastModified:" ..
        " 2025-01-01}}" }),
      "metadata.encryption.age.lastModified: expected an RFC 3339 time",
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n"
        .. "  encryption: {age: {lastModified: '2025-01-01T10:00:00.5+02:00'}}" }) },
    { "metadata.encryption has only age",
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n  encryption: {sops: {}}" }),
      'metadata.encryption.sops: unknown field "sops"',
      doc({ head = "kind: ZarfCluster\nmetadata:\n  name: t\n  encryption: {age: {}}" }) },
  })
end)

describe("spec.config", function()
  cases({
    { "loadbalancer is required", doc({ loadbalancer = false, config = "values: {}" }),
      'spec.config: missing required field "loadbalancer"', doc() },
    { "loadbalancer is a hostname (no port)", doc({ loadbalancer = "lb.example:6443" }),
      'spec.config.loadbalancer: expected a hostname or IP address (without port), got string' ..
        ' "lb.example:6443"',
      doc({ loadbalancer = "lb-1.example.internal" }) },
    { "loadbalancer may be an IP address", doc({ loadbalancer = "under_score.example" }),
      "expected a hostname or IP address", doc({ loadbalancer = "192.0.2.5" }) },
    { "unknown spec.config fields are errors", doc({ config = "manifests: []" }),
      'spec.config.manifests: unknown field "manifests"', doc({ config = "values: {}" }) },
    { "values is a mapping", doc({ config = "values: [a]" }),
      "spec.config.values: expected a mapping, got a sequence",
      doc({ config = "values:\n  anything: {goes: [1, 2]}" }) },
    { "spec.config must not be empty", doc({ loadbalancer = false }),
      "test.yaml:6:10: spec.config: expected a mapping, got null", doc() },
    { "spec.config is required", "kind: ZarfCluster\nmetadata: {name: t}\nspec:\n  hosts: []\n",
      'spec: missing required field "config"', doc() },
  })
end)

describe("profiles", function()
  local function profile(body) return doc({ config = "profiles:\n  p:\n" .. body }) end
  cases({
    { "profiles is a map, not the legacy list", doc({ config = "profiles:\n  - name: p" }),
      "spec.config.profiles: expected a mapping, got a sequence", doc({ config = "profiles: {p: {}}" }) },
    { "concurrency may be an integer >= 0", profile("    concurrency: -1"),
      'spec.config.profiles.p.concurrency: expected an integer >= 0, "N" or a percentage "N%" (0-100),' ..
        ' got integer -1',
      profile("    concurrency: 0") },
    { "concurrency may be \"N\"", profile("    concurrency: \"1.5\""),
      'got string "1.5"', profile("    concurrency: \" 3 \"") },
    { "concurrency \"N%\" is 0..100", profile("    concurrency: \"101%\""),
      'percentage must be 0-100, got "101%"', profile("    concurrency: \"100%\"") },
    { "a profile has concurrency, engine and host only", profile("    kubeletConfig: {}"),
      'spec.config.profiles.p.kubeletConfig: unknown field "kubeletConfig"',
      profile("    engine: {labels: {a: b}}\n    host: {ports: [{port: 1, protocol: udp}]}") },
    { "profile engine and host blocks are checked like a host's",
      profile("    engine: {taints: [\"x:Never\"]}"),
      "spec.config.profiles.p.engine.taints[0]: taint effect must be",
        profile("    engine: {taints: [\"x:NoExecute\"]}") },
    { "profile names can become node labels", doc({ config = "profiles: {\"-p\": {}}" }),
      "profile name must be 1-63 letters", doc({ config = "profiles: {p.1_x: {}}" }) },
  })
  it("treats an empty profile as no settings", function()
    local c = support.ok(doc({ config = "profiles:\n  p:" }))
    assert.same({ kind = "default" }, c.profiles.p.concurrency)
  end)
end)

describe("registries", function()
  local function reg(body) return doc({ config = "registries:\n" .. body }) end
  cases({
    { "name is required", reg("  - {tls: {insecureSkipVerify: true}}"),
      'spec.config.registries[0]: missing required field "name"',
      reg("  - {name: \"*\", tls: {insecureSkipVerify: true}}") },
    { "name has no scheme", reg("  - {name: \"https://docker.io\", auth: {token: t}}"),
      "spec.config.registries[0].name: registry name must be a registry host",
      reg("  - {name: \"reg.example:5000\", auth: {token: t}}") },
    { "name has no path", reg("  - {name: docker.io/library, auth: {token: t}}"),
      "registry name must be a registry host", reg("  - {name: docker.io, auth: {token: t}}") },
    { "name has no whitespace", reg("  - {name: \"docker io\", auth: {token: t}}"),
      "registry name must be a registry host", reg("  - {name: docker.io, auth: {token: t}}") },
    { "an entry sets at least one of proxy, auth or tls", reg("  - {name: docker.io, auth: {}, tls: {}}"),
      "spec.config.registries[0]: a registry entry needs at least one of proxy.url, auth or tls",
      reg("  - {name: docker.io, tls: {caFile: /ca.pem}}") },
    { "proxy needs url", reg("  - {name: docker.io, proxy: {rewrite: {a: b}}}"),
      'spec.config.registries[0].proxy: missing required field "url"',
      reg("  - {name: docker.io, proxy: {url: \"http://m.example\"}}") },
    { "proxy.url uses http or https", reg("  - {name: docker.io, proxy: {url: \"ftp://m\"}}"),
      'spec.config.registries[0].proxy.url: invalid mirror URL "ftp://m": scheme must be http or https,' ..
        ' not ftp',
      reg("  - {name: docker.io, proxy: {url: \"HTTPS://m.example:443/path\"}}") },
    { "proxy.url carries no user-info", reg("  - {name: docker.io, proxy: {url: \"u:p@m.example\"}}"),
      "must not carry user-info", reg("  - {name: docker.io, proxy: {url: \"m.example:5000\"}}") },
    { "proxy.url has a host", reg("  - {name: docker.io, proxy: {url: \"https:///x\"}}"),
      "has no host", reg("  - {name: docker.io, proxy: {url: \"[2001:db8::1]:5000\"}}") },
    { "proxy.url port is numeric", reg("  - {name: docker.io, proxy: {url: \"m.example:http\"}}"),
      "bad port", reg("  - {name: docker.io, proxy: {url: \"m.example:8080\"}}") },
    { "rewrite keys compile as RE2",
      reg("  - name: docker.io\n    proxy: {url: m.example, rewrite: {\"^(library/.*\": x}}"),
      'spec.config.registries[0].proxy.rewrite["^(library/.*"]: rewrite pattern does not compile as RE2:'
        .. " missing closing )",
      reg("  - name: docker.io\n    proxy: {url: m.example, rewrite: {\"^(?P<n>lib)/(\\\\w+)[a-z]{1" ..
        ",3}$\": x}}") },
    { "rewrite replacements are non-empty",
      reg("  - name: docker.io\n    proxy: {url: m.example, rewrite: {\"^a\": \"\"}}"),
      'rewrite["^a"]: expected a non-empty string',
      reg("  - name: docker.io\n    proxy: {url: m.example, rewrite: {\"^a\": b}}") },
    { "auth.user needs auth.pass", reg("  - {name: docker.io, auth: {user: u}}"),
      "spec.config.registries[0].auth: auth.user needs auth.pass",
      reg("  - {name: docker.io, auth: {user: u, pass: p}}") },
    { "auth.pass needs auth.user", reg("  - {name: docker.io, auth: {pass: p}}"),
      "auth.pass needs auth.user", reg("  - {name: docker.io, auth: {token: t}}") },
    { "tls.ca and tls.caFile are exclusive",
      reg("  - {name: docker.io, tls: {ca: $ANSIBLE_VAULT;x, caFile: /c}}"),
      "spec.config.registries[0].tls: ca and caFile are mutually exclusive",
      reg("  - {name: docker.io, tls: {caFile: /c}}") },
    { "tls.certFile and tls.keyFile go together", reg("  - {name: docker.io, tls: {certFile: /c}}"),
      "certFile and keyFile must be given together",
        reg("  - {name: docker.io, tls: {certFile: /c, keyFile: /k}}") },
    { "tls.ca is a PEM CERTIFICATE",
      reg("  - {name: docker.io, tls: {ca: \"-----BEGIN RSA PRIVATE KEY-----\\nAAAA\\n"
      .. "-----END RSA PRIVATE KEY-----\\n\"}}"),
      'tls.ca: expected a PEM block of type CERTIFICATE, got "RSA PRIVATE KEY"',
      reg("  - {name: docker.io, tls: {ca: \"-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END" ..
        " CERTIFICATE-----\\n\"}}") },
    { "tls.ca may be age-encrypted", reg("  - {name: docker.io, tls: {ca: \"not a cert\"}}"),
      "tls.ca: expected a PEM block",
      reg("  - {name: docker.io, tls: {ca: \"-----BEGIN AGE ENCRYPTED FILE-----\\nYWdl\\n"
        .. "-----END AGE ENCRYPTED FILE-----\\n\"}}") },
    { "tls.insecureSkipVerify is a boolean", reg("  - {name: docker.io, tls: {insecureSkipVerify: maybe}}"),
      "tls.insecureSkipVerify: expected a boolean (true or false), got string \"maybe\"",
      reg("  - {name: docker.io, tls: {insecureSkipVerify: yes}}") },
    { "names are unique",
      reg("  - {name: docker.io, auth: {token: t}}\n  - {name: docker.io, auth: {token: t}}"),
      'spec.config.registries[1].name: duplicate registry name "docker.io" (first at' ..
        ' spec.config.registries[0])',
      reg("  - {name: docker.io, auth: {token: t}}\n  - {name: quay.io, auth: {token: t}}") },
    { "entries for one config host carry identical auth",
      reg("  - {name: docker.io, proxy: {url: m.example}, auth: {token: a}}\n"
        .. "  - {name: quay.io, proxy: {url: \"https://m.example\"}, auth: {token: b}}"),
      'spec.config.registries[1]: registry config host "m.example" is also used by spec.config.registries[0]',
      reg("  - {name: docker.io, proxy: {url: m.example}, auth: {token: a}}\n"
        .. "  - {name: quay.io, proxy: {url: m.example}, auth: {token: a}}") },
    { "encrypted credentials count as identical",
      reg("  - {name: m.example, tls: {insecureSkipVerify: true}}\n"
        .. "  - {name: docker.io, proxy: {url: m.example}}"),
      "with different auth or tls",
      reg("  - {name: m.example, auth: {token: \"$ANSIBLE_VAULT;1.1;AES256\\n01\"}}\n"
        .. "  - {name: docker.io, proxy: {url: m.example}, auth: {token:" ..
          " \"$ANSIBLE_VAULT;1.1;AES256\\n02\"}}") },
  })
end)

describe("hosts", function()
  cases({
    { "at least one host", doc({ hosts = {} }):gsub("hosts:\n", "hosts: []\n"),
      "spec.hosts: expected at least one host", doc() },
    { "at least one controller", doc({ hosts = { "role: worker\n" .. SSH } }),
      "spec.hosts: expected at least one host with role: controller", doc() },
    { "role is controller or worker", host_doc(SSH):gsub("role: controller", "role: controller+worker"),
      'expected one of "controller", "worker", got string "controller+worker" (combined roles are not' ..
        ' supported)',
      host_doc(SSH) },
    { "role is required", doc({ hosts = { SSH } }), 'spec.hosts[0]: missing required field "role"', doc() },
    { "exactly one connection", host_doc(SSH .. "localhost: true"),
      'spec.hosts[0]: expected exactly one of ssh, openSSH, localhost; got "ssh", "localhost"',
      host_doc("localhost: true") },
    { "winRM is rejected clearly", host_doc("winRM: {address: 192.0.2.1}"),
      "spec.hosts[0].winRM: winRM connections are not supported", host_doc(SSH) },
    { "ssh.address is an IP or hostname", host_doc("ssh: {address: \"10.0.0.1:22\"}"),
      'spec.hosts[0].ssh.address: expected an IP address or hostname without port (set port: instead),' ..
        ' got string',
      host_doc("ssh: {address: \"2001:db8::10\"}") },
    { "ssh.address carries no user", host_doc("ssh: {address: root@h.example}"),
      "without user (set user: instead)", host_doc("ssh: {address: h_1.example}") },
    { "ssh.port is 1..65535", host_doc("ssh: {address: h, port: 0}"),
      "spec.hosts[0].ssh.port: expected an integer in 1..65535, got integer 0",
      host_doc("ssh: {address: h, port: 65535}") },
    { "ssh.user is not blank (\"\" is unset, spaces are a mistake)", host_doc("ssh: {address: h, user: \" \"}"),
      "spec.hosts[0].ssh.user: expected a non-empty string", host_doc("ssh: {address: h, user: \"\"}") },
    { "ssh.options is a map of scalars", host_doc("ssh: {address: h, options: {A: [1]}}"),
      "spec.hosts[0].ssh.options.A: expected a string, got a sequence",
      host_doc("ssh: {address: h, options: {Compression: true, ServerAliveInterval: 5}}") },
    { "ssh.bastion is an ssh block", host_doc("ssh: {address: h, bastion: {address: b, configPath: x}}"),
      'spec.hosts[0].ssh.bastion.configPath: unknown field "configPath"',
      host_doc("ssh: {address: h, bastion: {address: b, keyPath: /k, bastion: {address: c, port: 2}}}") },
    { "nested bastions are checked too",
      host_doc("ssh: {address: h, bastion: {address: b, bastion: {port: 2}}}"),
      'spec.hosts[0].ssh.bastion.bastion: missing required field "address"',
      host_doc("ssh: {address: h, bastion: {address: b, bastion: {address: c}}}") },
    { "openSSH fields", host_doc("openSSH: {address: h, bastion: {address: b}}"),
      'spec.hosts[0].openSSH.bastion: unknown field "bastion"',
      host_doc("openSSH: {address: my-alias, user: u, port: 2, keyPath: /k, configPath: /c,"
        .. " options: {A: b}, disableMultiplexing: false}") },
    { "openSSH.disableMultiplexing is a boolean", host_doc("openSSH: {address: h, disableMultiplexing: 1}"),
      "expected a boolean (true or false), got integer 1",
        host_doc("openSSH: {address: h, disableMultiplexing: on}") },
    { "localhost is a boolean", host_doc("localhost: [true]"),
      "spec.hosts[0].localhost: expected a boolean (true or false), got a sequence",
        host_doc("localhost: true") },
    { "localhost's block form says enabled, a boolean", host_doc("localhost: {enabled: 1}"),
      "spec.hosts[0].localhost.enabled: expected a boolean (true or false), got integer 1",
        host_doc("localhost: {enabled: true}") },
    { "localhost's block has enabled alone", host_doc("localhost: {enabled: true, user: x}"),
      'spec.hosts[0].localhost.user: unknown field "user"', host_doc("localhost: {enabled: true}") },
    { "profile is one word", host_doc(SSH .. "profile: \"a\\tb\""),
      "spec.hosts[0].profile: must not contain control characters", host_doc(SSH .. "profile: x") },
    { "hostname is a lower-case DNS name", host_doc(SSH .. "hostname: Node_1"),
      "spec.hosts[0].hostname: expected a lower-case DNS name", host_doc(SSH .. "hostname: node-1.lab") },
    { "privateAddress is an IP address", host_doc(SSH .. "privateAddress: 10.0.0.0/8"),
      'spec.hosts[0].privateAddress: expected an IPv4 or IPv6 address, got string "10.0.0.0/8"',
      host_doc(SSH .. "privateAddress: fd00::1") },
    { "os names a configurer or os-release ID", host_doc(SSH .. "os: Rocky Linux"),
      "spec.hosts[0].os: expected an OS configurer or os-release ID", host_doc(SSH .. "os: almalinux") },
    { "privateInterface is an interface name", host_doc(SSH
      .. "privateInterface: a-very-long-interface-name"),
      "spec.hosts[0].privateInterface: expected a network interface name", host_doc(SSH
        .. "privateInterface: enp0s3") },
    { "environment keys have no '='", host_doc(SSH .. "environment: {\"A=B\": c}"),
      "environment variable names must not be empty or contain '=' or control characters",
      host_doc(SSH .. "environment: {A: \"b=c\", N: 1, T: true}") },
    { "environment values have no newline", host_doc(SSH .. "environment: {A: \"b\\nc\"}"),
      "spec.hosts[0].environment.A: environment values must not contain newlines", host_doc(SSH
        .. "environment: {A: b}") },
    { "environment values are text", host_doc(SSH .. "environment: {V: 1.10}"),
      "expected a string, got a float (value hidden: the field is secret) (quote it to keep it as text)", host_doc(SSH
        .. "environment: {V: \"1.10\"}") },
    { "unique ssh login across hosts", doc({ hosts = { "role: controller\nssh: {address: h1}",
        "role: worker\nssh: {address: h1, user: root, port: 22}" } }),
      "spec.hosts[1].ssh.address: same login as spec.hosts[0] (address, port and user must not repeat" ..
        " across hosts)",
      doc({ hosts = { "role: controller\nssh: {address: h1}",
        "role: worker\nssh: {address: h1, user: other}" } }) },
    { "one localhost host", doc({ hosts = { "role: controller\nlocalhost: true",
      "role: worker\nlocalhost: true" } }),
      "spec.hosts[1].localhost: same login as spec.hosts[0]",
      doc({ hosts = { "role: controller\nlocalhost: true", "role: worker\n" .. SSH } }) },
    { "unique hostnames", doc({ hosts = { "role: controller\nhostname: a\nssh: {address: h1}",
        "role: worker\nhostname: a\nssh: {address: h2}" } }),
      'spec.hosts[1].hostname: hostname "a" is also used by spec.hosts[0]',
      doc({ hosts = { "role: controller\nhostname: a\nssh: {address: h1}",
        "role: worker\nhostname: b\nssh: {address: h2}" } }) },
    { "unique private addresses",
      doc({ hosts = { "role: controller\nprivateAddress: 10.0.0.1\nssh: {address: h1}",
        "role: worker\nprivateAddress: 10.0.0.1\nssh: {address: h2}" } }),
      'spec.hosts[1].privateAddress: private address "10.0.0.1" is also used by spec.hosts[0]',
      doc({ hosts = { "role: controller\nprivateAddress: 10.0.0.1\nssh: {address: h1}",
        "role: worker\nprivateAddress: 10.0.0.2\nssh: {address: h2}" } }) },
  })
end)

describe("host files", function()
  local function files(body) return host_doc(SSH .. "files:\n" .. body) end
  cases({
    { "name is required", files("  - {data: x, dst: /x}"),
      'spec.hosts[0].files[0]: missing required field "name"', files("  - {name: n, data: x, dst: /x}") },
    { "exactly one of src and data", files("  - {name: n, dst: /x}"),
      'spec.hosts[0].files[0]: expected exactly one of "src", "data", got neither',
        files("  - {name: n, src: ./a, dst: /x}") },
    { "not both src and data", files("  - {name: n, src: a, data: b, dst: /x}"),
      'expected exactly one of "src", "data", got both', files("  - {name: n, data: \"\", dst: /x}") },
    { "exactly one of dst and dstDir", files("  - {name: n, data: x, dst: /x, dstDir: /d}"),
      'expected exactly one of "dst", "dstDir", got both', files("  - {name: n, data: x, dstDir: /d}") },
    { "dst is absolute", files("  - {name: n, data: x, dst: etc/motd}"),
      'spec.hosts[0].files[0].dst: expected an absolute path, got string "etc/motd"',
        files("  - {name: n, data: x, dst: /etc/motd}") },
    { "perm is an octal string", files("  - {name: n, data: x, dst: /x, perm: \"0888\"}"),
      'spec.hosts[0].files[0].perm: expected an octal mode as a string like "0644", got string "0888"',
      files("  - {name: n, data: x, dst: /x, perm: \"644\"}") },
    { "perm must be quoted", files("  - {name: n, data: x, dst: /x, perm: 0755}"),
      'got integer 493 (quote it: YAML reads an unquoted mode as a number)',
      files("  - {name: n, data: x, dst: /x, perm: \"0755\"}") },
    { "user and group are strings", files("  - {name: n, data: x, dst: /x, user: [a]}"),
      "spec.hosts[0].files[0].user: expected a string, got a sequence",
      files("  - {name: n, data: x, dst: /x, user: app, group: app}") },
    { "names are unique per host", files("  - {name: n, data: x, dst: /x}\n  - {name: n, data: y, dst: /y}"),
      'spec.hosts[0].files[1].name: duplicate file name "n" (first at spec.hosts[0].files[0])',
      files("  - {name: n, data: x, dst: /x}\n  - {name: m, data: y, dst: /y}") },
  })
  it("normalizes perm to four digits and a mode", function()
    local c = support.ok(files("  - {name: n, data: x, dst: /x, perm: \"0755\"}\n  - {name: m, data: x," ..
      " dst: /y, perm: \"600\"}"))
    assert.equal("0755", c.hosts[1].files[1].perm)
    assert.equal(493, c.hosts[1].files[1].mode)
    assert.equal("0600", c.hosts[1].files[2].perm)
  end)
end)

describe("engine labels and taints", function()
  local function engine(body) return host_doc(SSH .. "engine: " .. body) end
  cases({
    { "labels is a map of strings", engine("{labels: [a]}"),
      "spec.hosts[0].engine.labels: expected a mapping, got a sequence",
        engine("{labels: {a: b, n: 1, t: true}}") },
    { "label keys follow Kubernetes syntax", engine("{labels: {\"-a\": b}}"),
      'spec.hosts[0].engine.labels["-a"]: label key name must be',
        engine("{labels: {\"example.com/a.b_c\": x}}") },
    { "label values follow Kubernetes syntax", engine("{labels: {a: \"b c\"}}"),
      "spec.hosts[0].engine.labels.a: label value must be", engine("{labels: {a: \"\"}}") },
    { "taints are key[=value]:Effect", engine("{taints: [\"dedicated=gpu\"]}"),
      'spec.hosts[0].engine.taints[0]: expected key[=value]:Effect, got "dedicated=gpu"',
      engine("{taints: [\"dedicated=gpu:NoSchedule\", \"spot:PreferNoSchedule\"]}") },
    { "taint effects are NoSchedule, PreferNoSchedule or NoExecute", engine("{taints: [\"a=b:noschedule\"]}"),
      '(did you mean "NoSchedule"?)', engine("{taints: [\"a=b:NoExecute\"]}") },
    { "engine has labels and taints only", engine("{lables: {}}"),
      'spec.hosts[0].engine.lables: unknown field "lables" (did you mean "labels"?)', engine("{}") },
  })
end)

describe("host ports, firewall rules and policy", function()
  local function hostcfg(body) return host_doc(SSH .. "host:\n" .. body) end
  local function rules(body) return hostcfg("  firewall:\n    rules:\n" .. body) end
  cases({
    { "ports need port and protocol", hostcfg("  ports: [{port: 80}]"),
      'spec.hosts[0].host.ports[0]: missing required field "protocol"',
        hostcfg("  ports: [{port: 80, protocol: tcp}]") },
    { "ports protocol is tcp or udp", hostcfg("  ports: [{port: 80, protocol: sctp}]"),
      'spec.hosts[0].host.ports[0].protocol: expected one of "tcp", "udp", got string "sctp"',
      hostcfg("  ports: [{port: \"8472\", protocol: udp}]") },
    { "ports ranges ascend", hostcfg("  ports: [{port: \"32767-30000\", protocol: tcp}]"),
      'spec.hosts[0].host.ports[0].port: expected an ascending port range, got string "32767-30000"',
      hostcfg("  ports: [{port: \"30000-32767\", protocol: tcp}]") },
    { "ports are within 1..65535", hostcfg("  ports: [{port: \"1-70000\", protocol: tcp}]"),
      "expected a port in 1..65535", hostcfg("  ports: [{port: 65535, protocol: tcp}]") },
    { "rule action is allow, deny or reject", rules("      - {action: permit}"),
      'spec.hosts[0].host.firewall.rules[0].action: expected one of "allow", "deny", "reject", got string' ..
        ' "permit"',
      rules("      - {action: REJECT}") },
    { "rule action is required", rules("      - {direction: in}"),
      'spec.hosts[0].host.firewall.rules[0]: missing required field "action"',
        rules("      - {action: deny}") },
    { "rule direction is in, out or forward", rules("      - {action: allow, direction: inbound}"),
      'rules[0].direction: expected one of "in", "out", "forward"',
        rules("      - {action: allow, direction: out}") },
    { "rule source is an IP, CIDR or any", rules("      - {action: allow, source: example.com}"),
      'rules[0].source: expected an IP address, a CIDR or "any", got string "example.com"',
      rules("      - {action: allow, source: 2001:db8::/32, destination: ANY}") },
    { "rule destination is an IP, CIDR or any", rules("      - {action: allow, destination: 10.0.0.0/40}"),
      "rules[0].destination: expected an IP address, a CIDR or \"any\"",
        rules("      - {action: allow, destination: 10.1.2.3}") },
    { "source and destination share an IP family",
      rules("      - {action: allow, source: 10.0.0.0/8, destination: \"fd00::1\"}"),
      "rules[0]: source and destination are of different IP families",
      rules("      - {action: allow, source: 10.0.0.0/8, destination: 10.0.0.1}") },
    { "forward rules need ingress and egress",
      rules("      - {action: allow, direction: forward, ingress: eth0}"),
      'rules[0]: missing required field "egress" (forward rules need both ingress and egress)',
      rules("      - {action: allow, direction: forward, ingress: eth0, egress: cni0}") },
    { "only forward rules have ingress/egress", rules("      - {action: allow, egress: cni0}"),
      "rules[0].egress: egress is only allowed on forward rules (direction: forward)",
      rules("      - {action: allow}") },
    { "a rule port needs a protocol", rules("      - {action: allow, port: 22}"),
      "rules[0]: a rule with a port needs a protocol (tcp, udp, sctp or dccp)",
      rules("      - {action: allow, port: \"1000-2000\", protocol: dccp}") },
    { "rule protocol is tcp, udp, sctp or dccp", rules("      - {action: allow, protocol: icmp}"),
      'rules[0].protocol: expected one of "tcp", "udp", "sctp", "dccp", got string "icmp"',
      rules("      - {action: allow, protocol: sctp}") },
    { "rule names are unique per host after sanitising",
      rules("      - {name: Web.Port, action: allow}\n      - {name: web-port, action: deny}"),
      'rules[1].name: rule key "web-port" is already used by spec.hosts[0].host.firewall.rules[0]',
      rules("      - {name: web-port, action: allow}\n      - {name: web-port-2, action: deny}") },
    { "policy needs ingress and egress zones", hostcfg("  policy:\n    p: {ingress: {name: a}}"),
      'spec.hosts[0].host.policy.p: missing required field "egress"',
      hostcfg("  policy:\n    p: {ingress: {name: a}, egress: {name: b}}") },
    { "policy target is CONTINUE, ACCEPT, REJECT or DROP",
      hostcfg("  policy:\n    p: {target: ALLOW, ingress: {name: a}, egress: {name: b}}"),
      'spec.hosts[0].host.policy.p.target: expected one of "CONTINUE", "ACCEPT", "REJECT", "DROP"',
      hostcfg("  policy:\n    p: {target: drop, ingress: {name: a}, egress: {name: b}}") },
    { "policy ports need a protocol",
      hostcfg("  policy:\n    p: {ingress: {name: a}, egress: {name: b}, ports: [{port: 1, protocol:" ..
        " icmp}]}"),
      "spec.hosts[0].host.policy.p.ports[0].protocol: expected one of",
      hostcfg("  policy:\n    p: {ingress: {name: a}, egress: {name: b}, ports: [{port: 1, protocol:" ..
        " dccp}]}") },
    { "policy names are file names",
      hostcfg("  policy:\n    \"a/b\": {ingress: {name: a}, egress: {name: b}}"),
      "spec.hosts[0].host.policy[\"a/b\"]: policy name must be letters",
      hostcfg("  policy:\n    a_b-1: {ingress: {name: a}, egress: {name: b}}") },
  })

  it("derives the key of an unnamed rule from its fields", function()
    local c = support.ok(rules("      - {action: Allow, source: 10.0.0.0/8, port: 22, protocol: tcp}\n"
      .. "      - {name: \"My Rule: 1/2\", action: deny}"))
    local r = c.hosts[1].host.firewall.rules
    assert.equal("in-allow-10-0-0-0-8-any---22-tcp", r[1].key)
    assert.is_nil(r[1].name)
    assert.equal("my-rule--1-2", r[2].key)
    assert.equal("My Rule: 1/2", r[2].name)
  end)

  it("collapses identical unnamed rules of one host", function()
    local c = support.ok(rules("      - {action: allow, port: 22, protocol: tcp}\n"
      .. "      - {action: allow, port: 22, protocol: tcp}"))
    assert.equal(1, #c.hosts[1].host.firewall.rules)
  end)
end)
