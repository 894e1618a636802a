-- Specs for the kubeadm engine: node facts and a cluster view in, kubeadm documents and action records out.
local engine = require "distros.engine"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"
local yaml = require "cargoship.yaml"

local upstream = require "distros.upstream"

local CP1 = { name = "cp1", role = "controller", fqdn = "cp1.example.internal", private_address = "10.0.0.1" }
local CP2 = { name = "cp2", role = "controller", fqdn = "cp2.example.internal", private_address = "10.0.0.2" }
local W1 = { name = "w1", role = "worker", private_address = "10.0.0.3", labels = { pool = "gpu" },
             taints = { "dedicated=gpu:NoSchedule", "spot:PreferNoSchedule" } }
local SECRET = { token = "7t2weq.bjbawausm0jaxury",
                 ca_cert_hash = "sha256:3ed23f68bbf38cbb4850cc778f840c647c238d21af6cc433ab3a97b1af3940f3" }

local function cluster(o)
  local c = { leader = CP1, controllers = { CP1, CP2 }, loadbalancer = "lb.example.internal" }
  for k, v in pairs(o or {}) do c[k] = v end
  return c
end

local function docs(file)
  local out = {}
  for _, d in ipairs(assert(yaml.load(file.content))) do out[d.kind] = d end
  return out
end

local E = engine.for_package { type = "upstream", version = "1.35.3",
                               engine = { config = { networking = { podSubnet = "10.244.0.0/16" } } } }

describe("upstream kubeadm-config.yaml", function()
  it("leader: ClusterConfiguration, InitConfiguration and the kubelet's cgroup driver", function()
    local f = E:render_config(CP1, cluster())
    assert.same({ "/etc/kubernetes/kubeadm-config.yaml", "0600" }, { f.path, f.mode })
    local d = docs(f)
    local cc = d.ClusterConfiguration
    assert.equal("kubeadm.k8s.io/v1beta4", cc.apiVersion)
    assert.equal("v1.35.3", cc.kubernetesVersion)
    assert.equal("lb.example.internal:6443", cc.controlPlaneEndpoint)
    assert.same({ serviceSubnet = "10.96.0.0/12", podSubnet = "10.244.0.0/16" }, cc.networking)
    assert.same({ "lb.example.internal", "cp1.example.internal", "cp2.example.internal" }, cc.apiServer.certSANs)
    local reg = d.InitConfiguration.nodeRegistration
    assert.same({ "cp1", "unix:///run/containerd/containerd.sock" }, { reg.name, reg.criSocket })
    assert.same({ { name = "node-ip", value = "10.0.0.1" } }, reg.kubeletExtraArgs)
    assert.equal("systemd", d.KubeletConfiguration.cgroupDriver)
    assert.is_nil(d.JoinConfiguration)
  end)

  it("a worker joins with the leader's token and CA hash, labels and taints in its registration", function()
    local d = docs(E:render_config(W1, cluster { secret = SECRET }))
    local j = d.JoinConfiguration
    assert.same({ token = SECRET.token, apiServerEndpoint = "lb.example.internal:6443",
                  caCertHashes = { SECRET.ca_cert_hash } }, j.discovery.bootstrapToken)
    assert.is_nil(j.controlPlane)
    assert.same({ { name = "node-ip", value = "10.0.0.3" }, { name = "node-labels", value = "pool=gpu" } },
      j.nodeRegistration.kubeletExtraArgs)
    assert.same({ { key = "dedicated", value = "gpu", effect = "NoSchedule" },
                  { key = "spot", effect = "PreferNoSchedule" } },
      j.nodeRegistration.taints)
    assert.is_nil(d.ClusterConfiguration)
    assert.equal("systemd", d.KubeletConfiguration.cgroupDriver)
  end)

  it("another controller joins as control plane, with the certificate key when there is one", function()
    local j = docs(E:render_config(CP2, cluster { secret = { token = SECRET.token, ca_cert_hash = SECRET.ca_cert_hash,
                                                              certificate_key = "3843c20e" } })).JoinConfiguration
    assert.same({ certificateKey = "3843c20e", localAPIEndpoint = { advertiseAddress = "10.0.0.2" } }, j.controlPlane)
  end)

  it("refuses to render a join without the leader's secret", function()
    assert.has_error(function() E:render_config(W1, cluster()) end)
  end)

  it("containerd reads hosts.toml only with config_path; crictl talks to containerd", function()
    local files = E:runtime_files()
    assert.equal("/etc/containerd/config.toml", files[1].path)
    assert.matches("SystemdCgroup = true", files[1].content, 1, true)
    assert.matches('config_path = "/etc/containerd/certs.d"', files[1].content, 1, true)
    assert.same({ "/etc/crictl.yaml", "runtime-endpoint: unix:///run/containerd/containerd.sock\n"
      .. "image-endpoint: unix:///run/containerd/containerd.sock\n" }, { files[2].path, files[2].content })
    assert.equal(3, #E:configure(CP1, cluster()))
    assert.is_nil(files[1].content:find("sandbox_image", 1, true))
    local pinned = engine.for_package { type = "upstream", version = "1.35.3",
                                        pause_image = "registry.k8s.io/pause:3.10" }
    assert.matches('\n  sandbox_image = "registry.k8s.io/pause:3.10"\n', pinned:runtime_files()[1].content, 1, true)
  end)
end)

describe("upstream join secret", function()
  it("reads token, CA hash and certificate key from real kubeadm init output", function()
    local out = support.fixture("engines/upstream/kubeadm-init-upload-certs.txt")
    assert.same({ token = "7t2weq.bjbawausm0jaxury", ca_cert_hash = SECRET.ca_cert_hash,
                  certificate_key = "3843c20e75ef54198c28d5051ef8a5a158bc5953329d47041bf9d29881a2bcb9" },
      upstream:parse_init_output(out))
    assert.same({ token = "6sdzxn.pvgby7g42xq59mfb",
                  ca_cert_hash = "sha256:c4de5f8322be732828565761ed82274d31f282591017b64ef70891f00bc838a8" },
      upstream:parse_init_output(support.fixture("engines/upstream/kubeadm-init.txt")))
    assert.is_nil(upstream:parse_init_output("[preflight] Some fatal errors occurred"))
  end)

  it("is saved on the leader, read back by the others, and never written as a file elsewhere", function()
    local acts = upstream:join_secret_save(SECRET)
    assert.same({ "/etc/kubernetes/pki/cargoship-join-token", "0600", true },
      { acts[1].path, acts[1].mode, acts[1].secret })
    assert.same({ "/etc/kubernetes/pki/cargoship-ca-cert-hash", SECRET.ca_cert_hash .. "\n" },
      { acts[2].path, acts[2].content })
    assert.same(SECRET,
      upstream:parse_join_secret("token=" .. SECRET.token .. "\nca_cert_hash=" .. SECRET.ca_cert_hash .. "\n"))
    assert.is_nil(upstream:parse_join_secret("token=x\n"))
    assert.same({}, upstream:join_secret_write(SECRET))
    assert.equal("kubeadm token create --print-join-command", upstream:token_create())
  end)
end)

describe("upstream start, images, upgrade, reset", function()
  it("the leader runs kubeadm init, the others kubeadm join, a bootstrapped node starts the kubelet", function()
    local init = E:start(CP1, cluster())
    assert.same({ "enable", "kubelet" }, { init[1].verb, init[1].service })
    assert.equal("kubeadm init --config '/etc/kubernetes/kubeadm-config.yaml' --upload-certs", init[2].cmd)
    assert.is_true(init[2].secret) -- its output carries the join token
    assert.equal("wait_ready", init[3].name)
    assert.equal("kubeadm join --config '/etc/kubernetes/kubeadm-config.yaml'", E:start(W1, cluster())[2].cmd)
    local again = E:start({ name = "w1", role = "worker", bootstrapped = true }, cluster())
    assert.same({ "service", "start", "kubelet" }, { again[2].kind, again[2].verb, again[2].service })
    assert.equal("test -e '/etc/kubernetes/kubelet.conf'", upstream:bootstrapped_probe())
  end)

  it("imports each image tarball into containerd's k8s.io namespace", function()
    local acts = upstream:image_import({ "/var/lib/kubernetes/images/a b.tar", "/var/lib/kubernetes/images/c.tar.zst" })
    -- containerd is started first (configure engine, which restarts it, comes after) and
    -- answering: runit's `sv up` returns before its socket does
    assert.same({ "enable", "start" }, { acts[1].verb, acts[2].verb })
    assert.equal("containerd", acts[2].service)
    assert.equal("wait for containerd to answer", acts[3].say)
    assert.matches("until ctr version >/dev/null 2>&1; do", acts[3].cmd, 1, true)
    assert.equal("ctr -n k8s.io images import '/var/lib/kubernetes/images/a b.tar'", acts[4].cmd)
    assert.equal("ctr -n k8s.io images import '/var/lib/kubernetes/images/c.tar.zst'", acts[5].cmd)
    assert.same({}, upstream:image_import({}))
  end)

  it("upgrade: drain, unhold, install, kubeadm upgrade apply (leader) or node, restart, uncordon", function()
    local deb = os_registry.by_name("debian"):new {}
    local staged = { method = "apt", paths = { "/var/lib/kubernetes/deb/kubeadm.deb" }, names = { "kubeadm" } }
    local cmds = {}
    for i, a in ipairs(E:upgrade(CP1, cluster(), staged, deb)) do
      cmds[i] = a.cmd or (a.kind .. ":" .. (a.verb or ""))
    end
    assert.same({ E:drain("cp1"), "apt-mark unhold 'kubeadm' 'kubelet' 'kubectl'",
                  "env DEBIAN_FRONTEND=noninteractive apt-get -q -y install '/var/lib/kubernetes/deb/kubeadm.deb'",
                  "apt-mark hold 'kubeadm'", "kubeadm upgrade plan", "kubeadm upgrade apply 'v1.35.3' -y",
                  "service:restart", E:ready_check("cp1"), E:uncordon("cp1") }, cmds)
    local node = E:upgrade(W1, cluster(), { method = "binary", moves = {} })
    assert.equal("kubeadm upgrade node", node[2].cmd)
  end)

  it("reset: kubeadm reset, best-effort network cleanup, containerd stopped, packages, then the dirs and "
    .. "containerd's files", function()
    local acts = upstream:reset(W1, os_registry.by_name("rocky"):new {}, { "kubeadm", "kubelet" })
    assert.equal("kubeadm reset -f", acts[1].cmd)
    assert.matches("ip link delete cni0", acts[2].cmd, 1, true)
    assert.same({ "service", "stop", "containerd" }, { acts[3].kind, acts[3].verb, acts[3].service })
    assert.equal("{ dnf versionlock delete 'kubeadm' 'kubelet'; } >/dev/null 2>&1 || true", acts[4].cmd)
    assert.equal("dnf remove -y 'kubeadm' 'kubelet'", acts[5].cmd)
    local removed = {}
    for i = 6, #acts - 1 do removed[#removed + 1] = acts[i].path end
    assert.same({ "/var/lib/kubelet", "/etc/kubernetes", "/var/lib/kubernetes", "/etc/containerd/certs.d",
      "/etc/cni/net.d", "/etc/containerd/config.toml", "/etc/crictl.yaml" }, removed)
    assert.matches("^rmdir /etc/cni ", acts[#acts].cmd)
  end)
end)

describe("upstream certificate key", function()
  it("a fresh key comes from `kubeadm init phase upload-certs`, read from its last line", function()
    assert.equal("kubeadm init phase upload-certs --upload-certs", upstream.certificate_key_create())
    local out = "I1201 10:00:00 uploadconfig.go:112] [upload-certs] Storing the certificates in Secret\n"
      .. "[upload-certs] Using certificate key:\n"
      .. "f8902e114ef118304e561c3ecd4d0b543adc226b7a07f675f56564185ffe0c07\n"
    assert.equal("f8902e114ef118304e561c3ecd4d0b543adc226b7a07f675f56564185ffe0c07",
      upstream:parse_certificate_key(out))
    assert.is_nil(upstream:parse_certificate_key("error execution phase upload-certs: no kubeconfig\n"))
  end)
end)
