-- distros.k3s: the k3s engine configurer (engines.md §1): one binary that is also kubectl.
local engine = require "distros.engine"

return engine.define {
  name = "k3s",
  binary = "k3s",
  binary_paths = { "/usr/local/bin/k3s" },
  version_prefix = "k3s version",    -- "k3s version v1.35.2+k3s1 (<commit>)"
  -- cargoship's own unit names; the k3s install script would call them k3s / k3s-agent
  services = { controller = "k3s-server", worker = "k3s-agent" },
  kubeconfig = "/etc/rancher/k3s/k3s.yaml",
  kubectl_words = { "/usr/local/bin/k3s", "kubectl" },
  data_dir = "/var/lib/rancher/k3s",
  config_path = "/etc/rancher/k3s/config.yaml",
}
