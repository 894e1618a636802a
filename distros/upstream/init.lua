-- distros.upstream: the kubeadm + containerd engine configurer (engines.md §1); the kubelet tells the version.
local engine = require "distros.engine"

return engine.define {
  name = "upstream",
  binary = "kubelet",
  binary_paths = { "/usr/bin/kubelet", "/usr/local/bin/kubelet" },
  version_prefix = "Kubernetes",     -- "Kubernetes v1.35.3"
  -- the kubelet is the node's service on both roles; the control plane runs as its pods
  services = { controller = "kubelet", worker = "kubelet" },
  kubeconfig = "/etc/kubernetes/admin.conf",
  kubectl_words = { "kubectl" },
  data_dir = "/var/lib/kubelet",
  config_path = "/etc/kubernetes/kubeadm-config.yaml",
  -- kubeadm cannot skip a minor version on upgrade
  max_minor_step = 1,
}
