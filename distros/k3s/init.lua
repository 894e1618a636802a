-- distros.k3s: the k3s engine configurer (engines.md §1): one binary that is also kubectl; joins on 6443.
local rancher = require "distros.rancher"

return rancher:extend {
  name = "k3s",
  binary = "k3s",
  binary_paths = { "/usr/local/bin/k3s" },
  version_prefix = "k3s version",    -- "k3s version v1.35.2+k3s1 (<commit>)"
  -- cargoship's own unit names; the k3s install script would call them k3s / k3s-agent
  services = { controller = "k3s-server", worker = "k3s-agent" },
  kubeconfig = "/etc/rancher/k3s/k3s.yaml",
  kubectl_words = { "/usr/local/bin/k3s", "kubectl" },
  data_dir = "/var/lib/rancher/k3s",
  config_dir = "/etc/rancher/k3s",
  -- k3s serves its supervisor and the API on one port (upstream's 9345 is rke2's; §6.1)
  join_port = 6443,
  killall = "k3s-killall.sh",
  -- peers' ports (engines.md §1.1): etcd, the embedded registry, the API, kubelet; flannel, wireguard
  peer_ports = { tcp = { "2379-2380", "5001", "6443", "10250" }, udp = { "8472", "51820-51821" } },
  -- what must be free where it does not run yet: the API/supervisor and the kubelet
  listen_ports = { controller = { 6443, 10250 }, worker = { 10250 } },
}
