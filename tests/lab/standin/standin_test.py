#!/usr/bin/python3
# standin_test: the stand-in engines as processes on loopback, driven by the real openssl and Debian's real kubectl.
# Each node is a process with its own STANDIN_ROOT (its "/"), its own 127.77.x.y address, and real ports.
import fcntl
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "standin.py")
PY = "/usr/bin/python3"
KUBECTL = os.environ.get("STANDIN_TEST_KUBECTL", "/usr/bin/kubectl")
ENV = {"STANDIN_NODE_GRACE": "8", "STANDIN_HEARTBEAT": "1"}


class Lab:
    """Temporary roots and processes; everything started here is stopped by its pid."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="standin-test-")
        self.procs = []
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)

    def root(self, name):
        r = os.path.join(self.dir, name)
        os.makedirs(r, exist_ok=True)
        return r

    def write(self, root, path, text, mode=0o600):
        p = root + path
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)

    def env(self, root):
        e = dict(os.environ, STANDIN_ROOT=root, HOME=self.home, **ENV)
        e.pop("NOTIFY_SOCKET", None)
        return e

    def start(self, root, *args, loop=False):
        log = open(os.path.join(root, "log"), "ab")
        cmd = [PY, PROG] + list(args)
        if loop:  # like a service manager: restart when it exits
            cmd = ["sh", "-c", 'while :; do [ -r "$STANDIN_ROOT/var/lib/kubelet/kubeadm-flags.env" ] && . '
                   '"$STANDIN_ROOT/var/lib/kubelet/kubeadm-flags.env"; "$0" "$@" $KUBELET_KUBEADM_ARGS; sleep 0.5; '
                   'done'] + cmd
        p = subprocess.Popen(cmd, env=self.env(root), stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def run(self, root, *args, check=True, timeout=120):
        r = subprocess.run([PY, PROG] + list(args), env=self.env(root), capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode:
            raise AssertionError("%s failed (%d):\n%s\n%s" % (args, r.returncode, r.stdout, r.stderr))
        return r

    def stop(self, p):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def close(self):
        for p in self.procs:
            self.stop(p)
        if not os.environ.get("STANDIN_TEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def kubectl(self, kubeconfig, *args, check=True):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=kubeconfig)
        r = subprocess.run([KUBECTL] + list(args), env=env, capture_output=True, text=True, timeout=120)
        if check and r.returncode:
            raise AssertionError("kubectl %s failed (%d):\n%s\n%s" % (" ".join(args), r.returncode, r.stdout,
                                                                      r.stderr))
        return r


def wait(fn, timeout=30, what="condition"):
    timeout *= float(os.environ.get("STANDIN_TEST_SLOW", "2"))  # the machine may be busy: be patient, not flaky
    t0 = time.time()
    last = None
    while time.time() - t0 < timeout:
        try:
            v = fn()
            if v:
                return v
        except (AssertionError, OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.3)
    raise AssertionError("timed out waiting for %s (%s)" % (what, last))


def docker_archive(path, tags, valid=True):
    with tarfile.open(path, "w") as tf:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if valid:
            add("manifest.json", json.dumps([{"Config": "c.json", "RepoTags": tags, "Layers": []}]).encode())
        add("c.json", b"{}")


class Base(unittest.TestCase):
    def setUp(self):
        self.lab = Lab()

    def tearDown(self):
        self.lab.close()

    def nodes(self, kc):
        return {n["metadata"]["name"]: n for n in
                json.loads(self.lab.kubectl(kc, "get", "nodes", "-o", "json").stdout)["items"]}

    def ready(self, kc, node):
        return self.lab.kubectl(kc, "get", "node", node, "-o",
                                'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False).stdout


class Versions(Base):
    def test_version_formats(self):
        r = self.lab.root("v")
        out = self.lab.run(r, "rke2", "--version").stdout.splitlines()
        self.assertRegex(out[0], r"^rke2 version v1\.\d+\.\d+\+rke2r\d+ \([0-9a-f]{40}\)$")
        self.assertRegex(out[1], r"^go version go1\.\d+\.\d+ X:boringcrypto$")
        out = self.lab.run(r, "k3s", "--version").stdout.splitlines()
        self.assertRegex(out[0], r"^k3s version v1\.\d+\.\d+\+k3s\d+ \([0-9a-f]{8}\)$")
        self.assertRegex(out[1], r"^go version go1\.\d+\.\d+$")
        self.assertRegex(self.lab.run(r, "kubeadm", "version", "-o", "short").stdout, r"^v1\.\d+\.\d+\n$")
        self.assertRegex(self.lab.run(r, "kubelet", "--version").stdout, r"^Kubernetes v1\.\d+\.\d+\n$")
        self.assertIn('GitVersion:"v1.', self.lab.run(r, "kubeadm", "version").stdout)

    def test_stamped_binary_reports_its_version(self):
        d = self.lab.root("bin")
        for ver, name in (("v1.30.1+k3s2", "k3s"), ("v1.31.7+rke2r3", "rke2"), ("v1.32.5", "kubelet")):
            out = os.path.join(d, name)
            subprocess.run([PY, PROG, "stamp", ver, out], check=True)
            got = subprocess.run([out, "--version"], capture_output=True, text=True, check=True).stdout
            self.assertIn(ver, got.splitlines()[0])
        self.assertNotEqual(subprocess.run([PY, PROG, "stamp", "1.2", os.path.join(d, "x")]).returncode, 0)


def k3s_server(lab, name, ip, extra=""):
    root = lab.root(name)
    lab.write(root, "/etc/rancher/k3s/config.yaml", "node-name: %s\nnode-ip: %s\ntoken: s3cret\ntls-san:\n"
              "  - lb.lab.internal\nnode-label:\n  - \"tier=ctl\"\n%s" % (name, ip, extra))
    p = lab.start(root, "k3s", "server")
    kc = root + "/etc/rancher/k3s/k3s.yaml"
    wait(lambda: os.path.exists(kc) and lab.kubectl(kc, "get", "node", name, check=False).returncode == 0, 60,
         "k3s server " + name)
    return root, p, kc


class K3s(Base):
    def test_server_files_tls_and_token(self):
        root, _, kc = k3s_server(self.lab, "s1", "127.77.1.2")
        self.assertEqual(os.stat(kc).st_mode & 0o777, 0o600)
        with open(kc) as f:
            text = f.read()
        for k in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            self.assertIn(k, text)
        self.assertIn("server: https://127.77.1.2:6443", text)  # the node is on loopback: no second listener
        tok = open(root + "/var/lib/rancher/k3s/server/node-token").read().strip()
        self.assertRegex(tok, r"^K10[0-9a-f]{64}::server:s3cret$")
        crt = root + "/var/lib/rancher/k3s/server/tls/serving-kube-apiserver.crt"
        sans = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-ext", "subjectAltName"],
                              capture_output=True, text=True, check=True).stdout
        for s in ("DNS:lb.lab.internal", "IP Address:127.77.1.2", "DNS:s1", "DNS:kubernetes.default"):
            self.assertIn(s, sans)
        # real TLS: the CA in the kubeconfig verifies the server, and an unauthenticated client is refused
        ca = root + "/var/lib/rancher/k3s/server/tls/server-ca.crt"
        r = subprocess.run(["openssl", "s_client", "-connect", "127.77.1.2:6443", "-CAfile", ca, "-verify_return_error",
                            "-brief"], input="", capture_output=True, text=True, timeout=20)
        self.assertIn("Verification: OK", r.stderr)
        r = subprocess.run(["curl", "-sS", "--cacert", ca, "https://127.77.1.2:6443/api/v1/nodes"],
                           capture_output=True, text=True) if shutil.which("curl") else None
        if r is not None:
            self.assertIn('"code": 401', r.stdout.replace('"code":401', '"code": 401'))

    def test_join_wrong_token_and_kubectl_operations(self):
        lab = self.lab
        root, server, kc = k3s_server(lab, "s1", "127.77.1.2")
        tok = open(root + "/var/lib/rancher/k3s/server/node-token").read()
        a1 = lab.root("a1")
        lab.write(a1, "/etc/rancher/k3s/config.yaml", "node-name: a1\nnode-ip: 127.77.1.3\nserver: "
                  "https://127.77.1.2:6443\ntoken-file: /etc/rancher/k3s/token\nnode-taint:\n  - gpu=yes:NoSchedule\n"
                  "node-label:\n  - disk=ssd\n")
        lab.write(a1, "/etc/rancher/k3s/token", tok)
        agent = lab.start(a1, "k3s", "agent")
        bad = lab.root("bad")
        lab.write(bad, "/etc/rancher/k3s/config.yaml", "node-name: bad\nnode-ip: 127.77.1.4\nserver: "
                  "https://127.77.1.2:6443\ntoken: nope\n")
        r = lab.run(bad, "k3s", "agent", check=False, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("level=fatal", r.stderr)
        self.assertIn("401 Unauthorized", r.stderr)
        # a token carrying the wrong CA hash is refused too
        lab.write(bad, "/etc/rancher/k3s/config.yaml", "node-name: bad\nnode-ip: 127.77.1.4\nserver: "
                  "https://127.77.1.2:6443\ntoken: K10%s::server:s3cret\n" % ("0" * 64))
        r = lab.run(bad, "k3s", "agent", check=False, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("token CA hash does not match", r.stderr)
        wait(lambda: self.ready(kc, "a1") == "True", 30, "a1 Ready")
        nodes = self.nodes(kc)
        self.assertEqual(sorted(nodes), ["a1", "s1"])
        self.assertNotIn("bad", nodes)
        a = nodes["a1"]
        self.assertEqual(a["status"]["nodeInfo"]["kubeletVersion"], "v1.35.2+k3s1")
        self.assertIn({"type": "InternalIP", "address": "127.77.1.3"}, a["status"]["addresses"])
        self.assertEqual(a["metadata"]["labels"]["disk"], "ssd")
        self.assertEqual(a["spec"]["taints"], [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
        self.assertEqual(nodes["s1"]["metadata"]["labels"]["node-role.kubernetes.io/control-plane"], "true")
        out = lab.kubectl(kc, "get", "nodes", "--no-headers", "-o",
                          "custom-columns=:.metadata.name,:.status.addresses[*].address").stdout
        self.assertIn("a1    127.77.1.3,a1", out)
        # cordon / uncordon
        lab.kubectl(kc, "cordon", "a1")
        self.assertTrue(self.nodes(kc)["a1"]["spec"]["unschedulable"])
        self.assertIn("SchedulingDisabled", lab.kubectl(kc, "get", "nodes").stdout)
        lab.kubectl(kc, "uncordon", "a1")
        self.assertNotIn("unschedulable", self.nodes(kc)["a1"]["spec"])
        # label --overwrite
        lab.kubectl(kc, "label", "node", "a1", "node-role.kubernetes.io/worker=true", "--overwrite")
        lab.kubectl(kc, "label", "node", "a1", "disk=hdd", "--overwrite")
        self.assertEqual(lab.kubectl(kc, "get", "node", "a1", "-o", "jsonpath={.metadata.labels.disk}").stdout, "hdd")
        self.assertNotEqual(lab.kubectl(kc, "label", "node", "a1", "disk=nvme", check=False).returncode, 0)
        # drain: the node's pods go, its DaemonSet pod stays, the node is cordoned
        pods = json.loads(lab.kubectl(kc, "get", "pods", "-A", "-o", "json").stdout)["items"]
        on_a1 = [p for p in pods if p["spec"].get("nodeName") == "a1"]
        self.assertEqual(len(on_a1), 2)
        r = lab.kubectl(kc, "drain", "--delete-emptydir-data", "--ignore-daemonsets", "--disable-eviction", "a1")
        self.assertIn("ignoring DaemonSet-managed Pods", r.stderr)
        pods = json.loads(lab.kubectl(kc, "get", "pods", "-A", "-o", "json").stdout)["items"]
        left = [p for p in pods if p["spec"].get("nodeName") == "a1"]
        self.assertEqual([p["metadata"]["ownerReferences"][0]["kind"] for p in left], ["DaemonSet"])
        self.assertTrue(self.nodes(kc)["a1"]["spec"]["unschedulable"])
        lab.kubectl(kc, "uncordon", "a1")
        # without --delete-emptydir-data a drain refuses, as the real one does
        self.assertNotEqual(lab.kubectl(kc, "drain", "--ignore-daemonsets", "--disable-eviction", "s1",
                                        check=False).returncode, 0)
        lab.kubectl(kc, "uncordon", "s1")
        # apply -f: create, configure, unchanged
        man = os.path.join(lab.dir, "m.yaml")
        with open(man, "w") as f:
            f.write("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n---\napiVersion: v1\nkind: ConfigMap\n"
                    "metadata:\n  name: cfg\n  namespace: demo\ndata:\n  a: \"1\"\n---\napiVersion: apps/v1\nkind: "
                    "Deployment\nmetadata:\n  name: web\n  namespace: demo\nspec:\n  replicas: 2\n  selector:\n    "
                    "matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      "
                    "containers:\n      - name: web\n        image: nginx:1\n")
        self.assertIn("deployment.apps/web created", lab.kubectl(kc, "apply", "-f", man).stdout)
        self.assertIn("successfully rolled out", lab.kubectl(kc, "rollout", "status", "-n", "demo", "deploy/web",
                                                             "--timeout=10s").stdout)
        with open(man) as f:
            text = f.read().replace('"1"', '"2"').replace("nginx:1", "nginx:2")
        with open(man, "w") as f:
            f.write(text)
        out = lab.kubectl(kc, "apply", "-f", man).stdout
        self.assertIn("configmap/cfg configured", out)
        self.assertIn("namespace/demo unchanged", out)
        self.assertEqual(lab.kubectl(kc, "get", "deploy", "-n", "demo", "web", "-o",
                                     "jsonpath={.spec.template.spec.containers[0].image}").stdout, "nginx:2")
        self.assertIn("deployment.apps/web unchanged", lab.kubectl(kc, "apply", "-f", man).stdout)
        # an agent that stops goes NotReady after the grace period, and Ready again when it is back
        lab.stop(agent)
        wait(lambda: self.ready(kc, "a1") == "Unknown", 20, "a1 NotReady")
        self.assertIn("NotReady", lab.kubectl(kc, "get", "nodes").stdout)
        agent = lab.start(a1, "k3s", "agent")
        wait(lambda: self.ready(kc, "a1") == "True", 20, "a1 Ready again")
        # delete node: gone, and a running agent does not bring it back until it restarts
        self.assertIn('node "a1" deleted', lab.kubectl(kc, "delete", "node", "a1").stdout)
        time.sleep(2.5)
        self.assertEqual(sorted(self.nodes(kc)), ["s1"])
        # the state is on disk: a restarted server still knows what was applied
        lab.stop(server)
        server = lab.start(root, "k3s", "server")
        wait(lambda: lab.kubectl(kc, "get", "cm", "-n", "demo", "cfg", "-o", "jsonpath={.data.a}",
                                 check=False).stdout == "2", 30, "state after restart")
        self.assertTrue(os.path.exists(root + "/var/lib/rancher/k3s/server/db/standin-state.json"))

    def test_drain_evicts_through_budgets(self):
        lab = self.lab
        root, _, kc = k3s_server(lab, "s1", "127.77.1.2")
        with open(root + "/var/lib/rancher/k3s/server/node-token") as f:
            tok = f.read()
        a1 = lab.root("a1")
        lab.write(a1, "/etc/rancher/k3s/config.yaml", "node-name: a1\nnode-ip: 127.77.1.3\nserver: "
                  "https://127.77.1.2:6443\ntoken: %s\n" % tok.strip())
        lab.start(a1, "k3s", "agent")
        wait(lambda: self.ready(kc, "a1") == "True", 30, "a1 Ready")
        # the Deployment's two pods go where they can: a1 alone while s1 is cordoned
        lab.kubectl(kc, "cordon", "s1")
        man = os.path.join(lab.dir, "web.yaml")
        with open(man, "w") as f:
            f.write("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n---\napiVersion: apps/v1\nkind: "
                    "Deployment\nmetadata:\n  name: web\n  namespace: demo\nspec:\n  replicas: 2\n  selector:\n"
                    "    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n"
                    "      containers:\n      - name: web\n        image: nginx:1\n---\napiVersion: policy/v1\n"
                    "kind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: demo\nspec:\n"
                    "  minAvailable: 2\n  selector:\n    matchLabels: {app: web}\n")
        lab.kubectl(kc, "apply", "-f", man)
        lab.kubectl(kc, "uncordon", "s1")

        def web():
            pods = json.loads(lab.kubectl(kc, "get", "pods", "-n", "demo", "-l", "app=web", "-o", "json").stdout)
            return sorted((p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods["items"])
        # the pods start (STANDIN_POD_START) before they count as healthy
        lab.kubectl(kc, "rollout", "status", "-n", "demo", "deploy/web", "--timeout=30s")
        self.assertEqual(web(), [("a1", "Running"), ("a1", "Running")])
        pdb = json.loads(lab.kubectl(kc, "get", "pdb", "-n", "demo", "web", "-o", "json").stdout)["status"]
        self.assertEqual((pdb["disruptionsAllowed"], pdb["currentHealthy"], pdb["desiredHealthy"]), (0, 2, 2))
        # the budget allows no disruption: kubectl retries the 429 until its timeout, then fails naming the pod
        r = lab.kubectl(kc, "drain", "a1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s",
                        check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Cannot evict pod as it would violate the pod's disruption budget.", r.stderr)
        self.assertRegex(r.stderr, r'error when evicting pods?/?"web-[0-9a-f]{10}-[a-z0-9]{5}"')
        self.assertIn("global timeout reached: 12s", r.stderr)
        self.assertEqual(web(), [("a1", "Running"), ("a1", "Running")])
        # the other pods on a1 (the metrics-server's) went; its DaemonSet pod stays
        left = [p for p in json.loads(lab.kubectl(kc, "get", "pods", "-A", "-o", "json").stdout)["items"]
                if p["spec"].get("nodeName") == "a1" and p["metadata"]["namespace"] == "kube-system"]
        self.assertEqual([p["metadata"]["ownerReferences"][0]["kind"] for p in left], ["DaemonSet"])
        # one pod may go at a time: each evicted pod comes back on s1, Ready, before the next is let go
        lab.kubectl(kc, "patch", "pdb", "-n", "demo", "web", "--type=merge", "-p",
                    '{"spec": {"minAvailable": null, "maxUnavailable": 1}}')
        r = lab.kubectl(kc, "drain", "a1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
        self.assertRegex(r.stdout, r"node/a1 (drained|evicted)\n")  # "evicted" is kubectl 1.20's word
        wait(lambda: web() == [("s1", "Running"), ("s1", "Running")], 20, "web's pods running on s1")
        self.assertTrue(self.nodes(kc)["a1"]["spec"]["unschedulable"])
        # an eviction of a pod that is gone answers 404 (kubectl counts that as evicted)
        ev = os.path.join(lab.dir, "ev.json")
        with open(ev, "w") as f:
            json.dump({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "nope",
                                                                                 "namespace": "demo"}}, f)
        r = lab.kubectl(kc, "create", "--raw", "/api/v1/namespaces/demo/pods/nope/eviction", "-f", ev, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NotFound", r.stderr)

    def test_ready_counts_follow_evictions_and_starts(self):
        """readyReplicas as the controllers report it: lowered when a pod is evicted, raised again only once the
        replacement, on another Ready and schedulable node, has started and passed its readiness delay."""
        lab = self.lab
        root, _, kc = k3s_server(lab, "s1", "127.77.1.2")
        with open(root + "/var/lib/rancher/k3s/server/node-token") as f:
            tok = f.read().strip()
        agents = {}
        for name, ip in (("a1", "127.77.1.3"), ("a2", "127.77.1.4")):
            r = lab.root(name)
            lab.write(r, "/etc/rancher/k3s/config.yaml", "node-name: %s\nnode-ip: %s\nserver: "
                      "https://127.77.1.2:6443\ntoken: %s\n" % (name, ip, tok))
            agents[name] = (r, lab.start(r, "k3s", "agent"))
        for name in agents:
            wait(lambda: self.ready(kc, name) == "True", 30, name + " Ready")
        lab.kubectl(kc, "cordon", "s1")  # the workloads go to the agents, spread one per node
        man = os.path.join(lab.dir, "w.yaml")
        # a delay the checks right after the apply and the drain stay inside on a busy machine
        probe = "        readinessProbe: {initialDelaySeconds: 10, exec: {command: [\"true\"]}}\n"
        with open(man, "w") as f:
            f.write("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n---\napiVersion: apps/v1\nkind: "
                    "Deployment\nmetadata:\n  name: web\n  namespace: demo\nspec:\n  replicas: 2\n  selector:\n"
                    "    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n"
                    "      containers:\n      - name: web\n        image: nginx:1\n" + probe + "---\n"
                    "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: demo\nspec:\n"
                    "  replicas: 2\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n"
                    "    metadata:\n      labels: {app: db}\n    spec:\n      containers:\n      - name: db\n"
                    "        image: postgres:16\n" + probe)
        t0 = time.time()
        lab.kubectl(kc, "apply", "-f", man)

        def ready(kind, name):
            st = json.loads(lab.kubectl(kc, "get", kind, "-n", "demo", name, "-o", "json").stdout).get("status", {})
            return st.get("readyReplicas", 0)

        def pods(app):
            out = json.loads(lab.kubectl(kc, "get", "pods", "-n", "demo", "-l", "app=" + app, "-o", "json").stdout)
            return {p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"]["phase"], any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])))
                for p in out["items"]}

        rs = json.loads(lab.kubectl(kc, "get", "rs", "-n", "demo", "-l", "app=web", "-o", "json").stdout)
        rs = rs["items"][0]["metadata"]["name"]
        # a new workload is not ready at once: its pods start, then pass the readiness delay (a StatefulSet's
        # ordinals one after the other)
        self.assertLess(ready("rs", rs), 2)
        wait(lambda: ready("rs", rs) == 2 and ready("deploy", "web") == 2, 30, "web ready")
        self.assertGreaterEqual(time.time() - t0, 10)
        self.assertIn("successfully rolled out", lab.kubectl(kc, "rollout", "status", "-n", "demo", "deploy/web",
                                                             "--timeout=30s").stdout)
        wait(lambda: ready("sts", "db") == 2, 60, "db ready")
        self.assertEqual(sorted(n for n, _, _ in pods("web").values()), ["a1", "a2"])
        self.assertEqual(sorted(pods("db")), ["db-0", "db-1"])
        # drain a1: its pods are evicted, the counts drop at once; the replacements go to a2 (s1 and a1 are
        # cordoned), not ready until they have started and passed the delay
        t1 = time.time()
        lab.kubectl(kc, "drain", "a1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
        self.assertEqual(ready("rs", rs), 1)
        self.assertEqual(ready("deploy", "web"), 1)
        self.assertEqual(ready("sts", "db"), 1)
        web = pods("web")
        self.assertEqual(sorted(n for n, _, _ in web.values()), ["a2", "a2"])
        self.assertEqual(sorted(r for _, _, r in web.values()), [False, True])
        self.assertEqual({k: v[0] for k, v in pods("db").items()}, {"db-0": "a2", "db-1": "a2"})
        wait(lambda: ready("rs", rs) == 2 and ready("sts", "db") == 2, 30, "replacements ready")
        self.assertGreaterEqual(time.time() - t1, 10)
        # a node that stops posting status: after the grace its pods are not ready, and the counts say so
        lab.stop(agents["a2"][1])
        wait(lambda: ready("rs", rs) == 0 and ready("sts", "db") == 0, 30, "a2's pods not ready")
        lab.start(agents["a2"][0], "k3s", "agent")
        wait(lambda: ready("rs", rs) == 2 and ready("sts", "db") == 2, 30, "a2's pods ready again")

    def test_images_and_manifests_at_start(self):
        lab = self.lab
        root = lab.root("s1")
        img = root + "/var/lib/rancher/k3s/agent/images"
        os.makedirs(img)
        docker_archive(img + "/good.tar", ["registry.lab/app:1.0"])
        docker_archive(img + "/bad.tar", [], valid=False)
        lab.write(root, "/var/lib/rancher/k3s/server/manifests/extra.yaml",
                  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-manifest\n  namespace: kube-system\n"
                  "data:\n  k: v\n")
        _, server, kc = k3s_server(lab, "s1", "127.77.2.2")
        rec = json.load(open(root + "/var/lib/rancher/k3s/agent/containerd/standin-images.json"))
        self.assertEqual(list(rec), ["registry.lab/app:1.0"])
        cache = json.load(open(img + "/.cache.json"))
        self.assertEqual(list(cache), ["/var/lib/rancher/k3s/agent/images/good.tar"])
        log = open(root + "/log").read()
        self.assertIn("Unable to import /var/lib/rancher/k3s/agent/images/bad.tar", log)
        wait(lambda: lab.kubectl(kc, "get", "cm", "-n", "kube-system", "from-manifest", "-o", "jsonpath={.data.k}",
                                 check=False).stdout == "v", 20, "manifest applied")
        self.assertIn("extra", lab.kubectl(kc, "get", "addons.k3s.cattle.io", "-n", "kube-system").stdout)
        self.assertIn("registry.lab/app:1.0", json.dumps(self.nodes(kc)["s1"]["status"]["images"]))


class EngineFiles(Base):
    def test_missing_audit_policy_and_bad_registries_stop_the_start(self):
        r = self.lab.root("e1")
        self.lab.write(r, "/etc/rancher/rke2/config.yaml", "node-ip: 127.77.6.2\naudit-policy-file: "
                       "/etc/rancher/rke2/audit.yaml\n")
        out = self.lab.run(r, "rke2", "server", check=False, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("audit-policy-file: open /etc/rancher/rke2/audit.yaml: no such file or directory", out.stderr)
        self.lab.write(r, "/etc/rancher/rke2/config.yaml", "node-ip: 127.77.6.2\nserver: https://127.77.6.3:9345\n"
                       "token: x\n")
        self.lab.write(r, "/etc/rancher/rke2/registries.yaml", "mirrors: [unclosed\n")
        out = self.lab.run(r, "rke2", "agent", check=False, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("failed to load private-registry /etc/rancher/rke2/registries.yaml", out.stderr)


class Rke2(Base):
    def test_servers_and_agent_join_on_9345(self):
        lab = self.lab
        r1 = lab.root("r1")
        lab.write(r1, "/etc/rancher/rke2/config.yaml", "node-name: r1\nnode-ip: 127.77.3.2\ntoken: t0ken\n"
                  "agent-token: agentpw\n")
        s1 = lab.start(r1, "rke2", "server")
        kc = r1 + "/etc/rancher/rke2/rke2.yaml"
        wait(lambda: os.path.exists(kc) and self.ready(kc, "r1") == "True", 60, "rke2 r1")
        self.assertRegex(open(r1 + "/var/lib/rancher/rke2/server/agent-token").read(),
                         r"^K10[0-9a-f]{64}::node:agentpw")
        # an extra server needs the server token: the agent token is refused
        r2 = lab.root("r2")
        lab.write(r2, "/etc/rancher/rke2/config.yaml", "node-name: r2\nnode-ip: 127.77.3.3\ntoken: agentpw\n"
                  "server: https://127.77.3.2:9345\n")
        r = lab.run(r2, "rke2", "server", check=False, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("401 Unauthorized", r.stderr)
        lab.write(r2, "/etc/rancher/rke2/config.yaml", "node-name: r2\nnode-ip: 127.77.3.3\ntoken: t0ken\n"
                  "server: https://127.77.3.2:9345\n")
        lab.start(r2, "rke2", "server")
        kc2 = r2 + "/etc/rancher/rke2/rke2.yaml"
        wait(lambda: os.path.exists(kc2) and self.ready(kc2, "r2") == "True", 60, "rke2 r2")
        w1 = lab.root("w1")
        lab.write(w1, "/etc/rancher/rke2/config.yaml", "node-name: w1\nnode-ip: 127.77.3.4\ntoken: agentpw\n"
                  "server: https://127.77.3.2:9345\n")
        lab.start(w1, "rke2", "agent")
        wait(lambda: self.ready(kc, "w1") == "True", 30, "w1 Ready via r1")
        # both servers answer with the same cluster, whichever one a write went to
        wait(lambda: "w1" in self.nodes(kc2), 10, "w1 seen by r2")
        lab.kubectl(kc2, "label", "node", "w1", "pool=blue", "--overwrite")
        wait(lambda: lab.kubectl(kc, "get", "node", "w1", "-o", "jsonpath={.metadata.labels.pool}").stdout == "blue",
             10, "label replicated")
        self.assertEqual(sorted(self.nodes(kc2)), ["r1", "r2", "w1"])
        roles = lab.kubectl(kc, "get", "nodes").stdout
        self.assertRegex(roles, r"r2\s+Ready\s+control-plane,etcd,master")
        # the first server stops: the second keeps answering, sees it go NotReady, and the agent moves over
        # (once it has heard of the second server: agents refresh the server list at each heartbeat)
        time.sleep(3)
        lab.stop(s1)
        wait(lambda: self.ready(kc2, "r1") == "Unknown", 20, "r1 NotReady on r2")
        time.sleep(3)
        self.assertEqual(self.ready(kc2, "w1"), "True")
        lab.kubectl(kc2, "cordon", "w1")
        self.assertTrue(self.nodes(kc2)["w1"]["spec"]["unschedulable"])


class Kubeadm(Base):
    def test_init_join_cni_token_upgrade_reset(self):
        lab = self.lab
        k1 = lab.root("k1")
        lab.write(k1, "/etc/kubernetes/kubeadm-config.yaml", """apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: abcdef.0123456789abcdef
localAPIEndpoint:
  advertiseAddress: 127.77.4.2
nodeRegistration:
  name: k1
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.35.3
controlPlaneEndpoint: 127.77.4.2:6443
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzBindAddress: 127.77.4.2
""")
        lab.start(k1, "kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
                  "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", loop=True)
        out = lab.run(k1, "kubeadm", "init", "--config", "/etc/kubernetes/kubeadm-config.yaml", timeout=40).stdout
        m = re.search(r"kubeadm join (\S+) --token (\S+) \\\n\t--discovery-token-ca-cert-hash (sha256:[0-9a-f]{64}) ",
                      out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1, 2), ("127.77.4.2:6443", "abcdef.0123456789abcdef"))
        kc = k1 + "/etc/kubernetes/admin.conf"
        self.assertEqual(os.stat(kc).st_mode & 0o777, 0o600)
        self.assertTrue(os.path.exists(k1 + "/etc/kubernetes/kubelet.conf"))
        # a second init refuses, like the real preflight
        r = lab.run(k1, "kubeadm", "init", "--config", "/etc/kubernetes/kubeadm-config.yaml", check=False)
        self.assertIn("[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]", r.stderr)
        wait(lambda: self.ready(kc, "k1") == "False", 30, "k1 registered")
        n = self.nodes(kc)["k1"]
        self.assertIn({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}, n["spec"]["taints"])
        self.assertIn("cni plugin not initialized", json.dumps(n["status"]["conditions"]))
        # joins: a wrong token secret, a wrong CA pin, then the real thing
        k2 = lab.root("k2")
        r = lab.run(k2, "kubeadm", "join", m.group(1), "--token", "abcdef.0000000000000000",
                    "--discovery-token-ca-cert-hash", m.group(3), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("failed to verify JWS signature", r.stderr)
        r = lab.run(k2, "kubeadm", "join", m.group(1), "--token", m.group(2), "--discovery-token-ca-cert-hash",
                    "sha256:" + "0" * 64, check=False)
        self.assertIn("are pinned", r.stderr)
        self.assertFalse(os.path.exists(k2 + "/etc/kubernetes/kubelet.conf"))
        joincmd = lab.run(k1, "kubeadm", "token", "create", "--print-join-command").stdout
        jm = re.match(r"^kubeadm join (\S+) --token ([a-z0-9]{6}\.[a-z0-9]{16}) --discovery-token-ca-cert-hash "
                      r"(sha256:[0-9a-f]{64}) \n$", joincmd)
        self.assertTrue(jm, joincmd)
        self.assertIn(jm.group(2), lab.run(k1, "kubeadm", "token", "list").stdout)
        lab.write(k2, "/etc/kubernetes/join.yaml", """apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s
    token: %s
    caCertHashes: [%s]
nodeRegistration:
  name: k2
  kubeletExtraArgs:
  - name: node-ip
    value: 127.77.4.3
  - name: node-labels
    value: pool=w
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzBindAddress: 127.77.4.3
""" % jm.group(1, 2, 3))
        lab.start(k2, "kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
                  "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", loop=True)
        out = lab.run(k2, "kubeadm", "join", "--config", "/etc/kubernetes/join.yaml").stdout
        self.assertIn("This node has joined the cluster", out)
        wait(lambda: "k2" in self.nodes(kc), 30, "k2 registered")
        self.assertEqual(self.nodes(kc)["k2"]["metadata"]["labels"]["pool"], "w")
        # nodes stay NotReady until a pod network is applied, as with a real kubeadm cluster
        self.assertEqual(self.ready(kc, "k2"), "False")
        cni = os.path.join(lab.dir, "cni.yaml")
        with open(cni, "w") as f:
            f.write("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: kube-flannel-ds, namespace: kube-system}\n"
                    "spec:\n  selector: {matchLabels: {app: flannel}}\n  template:\n    metadata: {labels: {app: "
                    "flannel}}\n    spec: {containers: [{name: f, image: flannel}]}\n")
        lab.kubectl(kc, "apply", "-f", cni)
        wait(lambda: self.ready(kc, "k1") == "True" and self.ready(kc, "k2") == "True", 30, "Ready after CNI")
        # upgrade: a newer kubeadm binary moves the control plane; the kubelet reports its own binary's version
        newer = os.path.join(lab.dir, "kubeadm")
        subprocess.run([PY, PROG, "stamp", "v1.35.9", newer], check=True)
        r = subprocess.run([PY, newer, "upgrade", "apply", "v1.36.0", "-y"], env=lab.env(k1), capture_output=True,
                           text=True)
        self.assertIn('is higher than the kubeadm version "v1.35.9"', r.stderr)
        r = subprocess.run([PY, newer, "upgrade", "apply", "v1.35.9", "-y"], env=lab.env(k1), capture_output=True,
                           text=True, timeout=120)
        self.assertIn('SUCCESS! Your cluster was upgraded to "v1.35.9"', r.stdout, r.stderr)
        self.assertIn("v1.35.9", lab.kubectl(kc, "version").stdout)
        self.assertEqual(self.nodes(kc)["k2"]["status"]["nodeInfo"]["kubeletVersion"], "v1.35.3")
        # reset removes what init/join wrote
        lab.run(k2, "kubeadm", "reset", "-f")
        for f in ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/config.yaml"):
            self.assertFalse(os.path.exists(k2 + f), f)


class Cri(Base):
    def test_kubelet_and_kubeadm_need_containerd_where_it_is_installed(self):
        import socket
        lab = self.lab
        r = lab.root("c1")
        lab.write(r, "/usr/bin/containerd", "", 0o755)
        lab.write(r, "/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n")
        out = lab.run(r, "kubelet", "--config=/var/lib/kubelet/config.yaml", check=False)
        self.assertEqual(out.returncode, 1)
        self.assertIn('validate CRI v1 runtime API for endpoint \\"unix:///var/run/containerd/containerd.sock',
                      out.stderr)
        lab.write(r, "/etc/kubernetes/k.yaml", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
                  "localAPIEndpoint:\n  advertiseAddress: 127.77.5.2\n")
        out = lab.run(r, "kubeadm", "init", "--config", "/etc/kubernetes/k.yaml", check=False)
        self.assertEqual(out.returncode, 1)
        self.assertIn("[ERROR CRI]: container runtime is not running", out.stderr)
        os.makedirs(r + "/var/run/containerd")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(r + "/var/run/containerd/containerd.sock")
        sock.listen(1)
        try:
            out = lab.run(r, "kubeadm", "init", "--config", "/etc/kubernetes/k.yaml", check=False, timeout=5)
        except subprocess.TimeoutExpired:
            out = None  # past preflight: it waits for a kubelet, which is what we wanted to see
        finally:
            sock.close()
        if out is not None:
            self.assertNotIn("[ERROR CRI]", out.stderr)
        self.assertTrue(os.path.exists(r + "/etc/kubernetes/pki/ca.crt"))  # init went on past its preflight


class Ctr(Base):
    def test_ctr_import_checks_archives(self):
        r = self.lab.root("c")
        os.makedirs(r + "/img")
        docker_archive(r + "/img/a.tar", ["registry.lab/a:1"])
        docker_archive(r + "/img/bad.tar", [], valid=False)
        out = self.lab.run(r, "ctr", "-n", "k8s.io", "images", "import", "/img/a.tar").stdout
        self.assertRegex(out, r"^unpacking registry.lab/a:1 \(sha256:[0-9a-f]{64}\)\.\.\.done\n$")
        bad = self.lab.run(r, "ctr", "-n", "k8s.io", "images", "import", "/img/bad.tar", check=False)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("no manifest.json or index.json", bad.stderr)
        self.assertEqual(self.lab.run(r, "ctr", "-n", "k8s.io", "images", "ls", "-q").stdout, "registry.lab/a:1\n")
        self.assertEqual(self.lab.run(r, "ctr", "-n", "default", "images", "ls", "-q").stdout, "")


if __name__ == "__main__":
    for need in (PY, KUBECTL, shutil.which("openssl") or "openssl"):
        if not os.path.exists(need):
            sys.stderr.write("standin_test: %s is missing (contrib/deps.sh installs python3, python3-yaml, "
                             "kubernetes-client and openssl)\n" % need)
            sys.exit(1)
    # the nodes use fixed 127.77.x.y addresses and real ports: two runs on one machine (two build trees) take turns
    lock = os.open(os.path.join(tempfile.gettempdir(), "standin-test.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    unittest.main(verbosity=2)
