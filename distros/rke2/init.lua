-- distros.rke2: the RKE2 engine configurer (engines.md §1): the Rancher family, its paths, the 9345 supervisor.
local rancher = require "distros.rancher"

return rancher:extend {
  name = "rke2",
  binary = "rke2",
  -- tarball installs to /usr/local/bin, the RPM to /usr/bin
  binary_paths = { "/usr/local/bin/rke2", "/usr/bin/rke2" },
  version_prefix = "rke2 version",   -- "rke2 version v1.35.4+rke2r1 (<commit>)"
  services = { controller = "rke2-server", worker = "rke2-agent" },
  kubeconfig = "/etc/rancher/rke2/rke2.yaml",
  kubectl_words = { "/var/lib/rancher/rke2/bin/kubectl" },
  data_dir = "/var/lib/rancher/rke2",
  config_dir = "/etc/rancher/rke2",
  join_port = 9345,
  -- what must be free where it does not run yet: supervisor, API, etcd, kubelet
  listen_ports = { controller = { 9345, 6443, 2379, 2380, 10250 }, worker = { 10250 } },
  killall = "rke2-killall.sh",
  -- peers' ports (engines.md §1.1): BGP, etcd, cilium/calico health, calico typha, the API,
  -- canal health, the supervisor, kubelet; VXLAN, flannel, wireguard
  peer_ports = { tcp = { "179", "2379-2381", "4240", "5473", "6443", "9099", "9345", "10250" },
                 udp = { "4789", "8472", "51820-51821" } },
}
