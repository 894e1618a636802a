-- cargoship.config.fields: the field names of every mapping of a cluster file, as data, so the
-- loader's unknown-field rule and `cargoship schema` (config/schema.lua) read one list each.
local M = {
  root = { "apiVersion", "kind", "metadata", "spec" },
  metadata = { "name", "encryption" },
  encryption = { "age" },
  age = { "recipients", "lastModified" },
  spec = { "config", "hosts", "phases" },
  config = { "loadbalancer", "profiles", "registries", "values" },
  profile = { "concurrency", "engine", "host" },
  registry = { "name", "auth", "proxy", "tls" },
  auth = { "user", "pass", "token" },
  proxy = { "url", "rewrite" },
  tls = { "ca", "caFile", "certFile", "keyFile", "insecureSkipVerify" },
  host = { "role", "profile", "hostname", "privateAddress", "privateInterface", "os",
    "environment", "files", "engine", "host", "ssh", "openSSH", "localhost", "winRM" },
  ssh = { "address", "user", "port", "keyPath", "options", "bastion" },
  openssh = { "address", "user", "port", "keyPath", "configPath", "options", "disableMultiplexing" },
  localhost = { "enabled" },
  file = { "name", "src", "data", "dst", "dstDir", "perm", "user", "group" },
  engine = { "labels", "taints" },
  hostcfg = { "ports", "firewall", "policy" },
  port = { "port", "protocol" },
  firewall = { "rules" },
  rule = { "name", "action", "direction", "source", "destination", "ingress", "egress", "port", "protocol" },
  policy = { "target", "ingress", "egress", "ports" },
  zone = { "name" },
  phase = { "file", "before", "after", "replace" },
}

return M
