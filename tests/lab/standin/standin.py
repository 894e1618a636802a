#!/usr/bin/python3
# standin: the lab's stand-in for rke2, k3s, kubeadm + kubelet and ctr; one program, dispatched on its name.
# Real engines cannot be downloaded here. This program answers wherever cargoship looks: command line and
# output formats, config and token paths, real ports with real TLS (certificates made by the openssl CLI),
# join by token over the network, and the Kubernetes API subset that the real kubectl needs.
# What it does not imitate is listed in tests/lab/README.md ("Stand-in engines").
import base64
import copy
import datetime
import glob
import hashlib
import hmac
import http.client
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import socketserver
import ssl
import string
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import yaml  # Debian's python3-yaml: the engines read full YAML, so the stand-in must too

# Stamped at packaging (`standin stamp VERSION OUT`): the version this "binary" was built as. Upgrading a
# host is replacing the file and restarting the service, exactly as with the real engines.
VERSION = None
DEFAULT_VERSIONS = {"rke2": "v1.35.4+rke2r1", "k3s": "v1.35.2+k3s1", "upstream": "v1.35.3"}
GO_VERSION = "go1.24.6"
# Tests only: every absolute path the engines use is taken below this directory (unset on lab hosts).
ROOT = os.environ.get("STANDIN_ROOT", "")
# How long a node may stay silent before it is NotReady (the node controller's node-monitor-grace-period).
NODE_GRACE = float(os.environ.get("STANDIN_NODE_GRACE", "40"))
# seconds from a pod's binding to a node until its containers run (image present, as after the engine's import);
# a readinessProbe's initialDelaySeconds comes on top before it is Ready
POD_START = float(os.environ.get("STANDIN_POD_START", "2"))
# How often a node renews its lease (the kubelet's default: a quarter of the 40 s lease).
HEARTBEAT = float(os.environ.get("STANDIN_HEARTBEAT", "10"))


def P(path):
    return ROOT + path if ROOT and path.startswith("/") else path


def engine_version(engine):
    v = VERSION
    if v:
        flavour = "rke2" if "+rke2" in v else "k3s" if "+k3s" in v else "upstream"
        if flavour == engine:
            return v
    return DEFAULT_VERSIONS[engine]


def commit_of(version, n):
    return hashlib.sha1(version.encode()).hexdigest()[:n]


# ---------------------------------------------------------------- small helpers

def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(t=None):
    return (t or now_utc()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def human_duration(seconds):
    s = int(max(seconds, 0))
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = m // 60
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    d = h // 24
    if d < 8:
        return "%dd%dh" % (d, h % 24) if h % 24 else "%dd" % d
    return "%dd" % d


def rand_str(n, alphabet=string.ascii_lowercase + string.digits):
    return "".join(random.SystemRandom().choice(alphabet) for _ in range(n))


def write_file(path, data, mode=0o600, only_if_changed=True):
    path = P(path)
    if isinstance(data, str):
        data = data.encode()
    if only_if_changed and os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                os.chmod(path, mode)
                return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.rename(tmp, path)
    return True


def read_file(path, default=None):
    try:
        with open(P(path), "rb") as f:
            return f.read().decode()
    except FileNotFoundError:
        return default


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(s):
    return base64.b64decode(s).decode()


def first_private_address():
    """The first non-loopback IPv4 address, as the engines pick when no node-ip is given."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", line)
            if m:
                return m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    return "127.0.0.1"


def hostname():
    return socket.gethostname().split(".")[0].lower()


def go_errno(e):
    """An OS error worded as Go's net package words it (what the engines' logs say)."""
    import errno
    e = getattr(e, "reason", e)
    if isinstance(e, socket.timeout) or "timed out" in str(e):
        return "i/o timeout"
    if isinstance(e, socket.gaierror):
        return "no such host"
    words = {errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "no route to host",
             errno.ENETUNREACH: "network is unreachable", errno.EADDRINUSE: "address already in use",
             errno.EADDRNOTAVAIL: "cannot assign requested address", errno.ECONNRESET: "connection reset by peer"}
    return words.get(getattr(e, "errno", None), str(e))


def dial_error(url, e):
    u = urllib.parse.urlsplit(url)
    return "dial tcp %s:%d: connect: %s" % (u.hostname, u.port or 443, go_errno(e))


class Logger:
    """logrus text lines (rke2, k3s) or klog lines (kubelet), on stderr, where the journal or svlogd reads."""

    def __init__(self, style="logrus"):
        self.style = style
        self.lock = threading.Lock()

    def _emit(self, level, msg):
        t = now_utc()
        if self.style == "logrus":
            line = 'time="%s" level=%s msg=%s' % (t.strftime("%Y-%m-%dT%H:%M:%SZ"), level, json.dumps(msg))
        else:
            line = "%s%s %7d standin.go:1] %s" % (level[0].upper(), t.strftime("%m%d %H:%M:%S.%f"),
                                                   os.getpid(), msg)
        with self.lock:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def info(self, msg):
        self._emit("info", msg)

    def warn(self, msg):
        self._emit("warning", msg)

    def error(self, msg):
        self._emit("error", msg)

    def fatal(self, msg):
        self._emit("fatal", msg)
        sys.exit(1)


LOG = Logger()


def sd_notify(state):
    """Type=notify units wait for this, so `systemctl start` returns only when the engine is up."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(state.encode(), addr)
        s.close()
    except OSError:
        pass


def load_yaml_file(path):
    text = read_file(path)
    if text is None:
        return None
    data = yaml.safe_load(text)
    return data if data is not None else {}


# ---------------------------------------------------------------- certificates, with the real openssl CLI

_OPENSSL_CONF = []


def openssl(*args, stdin=None):
    """The real openssl CLI, with a minimal config of our own, so hosts need the binary but not its openssl.cnf."""
    if not _OPENSSL_CONF:
        fd, path = tempfile.mkstemp(prefix="standin-openssl-", suffix=".cnf")
        os.write(fd, b"[req]\ndistinguished_name = dn\n[dn]\n")
        os.close(fd)
        _OPENSSL_CONF.append(path)
        import atexit
        atexit.register(os.unlink, path)
    env = dict(os.environ, OPENSSL_CONF=_OPENSSL_CONF[0])
    r = subprocess.run(["openssl"] + list(args), input=stdin, capture_output=True, env=env)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (args[0], r.stderr.decode(errors="replace").strip()))
    return r.stdout


def key_args(kind):
    return ["-newkey", "rsa:2048"] if kind == "rsa" else ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


def make_ca(crt, key, cn, kind="ec"):
    os.makedirs(os.path.dirname(P(crt)), exist_ok=True)
    openssl("req", "-x509", *key_args(kind), "-nodes", "-keyout", P(key), "-out", P(crt), "-days", "3650",
            "-subj", "/CN=" + cn, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign")
    os.chmod(P(key), 0o600)


def sign_csr(csr_pem, ca_crt, ca_key, client, sans=(), days=365):
    """Signs a PEM CSR with the CA; returns the certificate PEM."""
    with tempfile.TemporaryDirectory() as d:
        ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
               "extendedKeyUsage=" + ("clientAuth" if client else "serverAuth")]
        if sans:
            ext.append("subjectAltName=" + ",".join(("IP:" if re.match(r"^[0-9.:]+$", s) else "DNS:") + s
                                                      for s in sans))
        with open(os.path.join(d, "ext"), "w") as f:
            f.write("\n".join(ext) + "\n")
        with open(os.path.join(d, "csr"), "wb") as f:
            f.write(csr_pem if isinstance(csr_pem, bytes) else csr_pem.encode())
        return openssl("x509", "-req", "-in", os.path.join(d, "csr"), "-CA", P(ca_crt), "-CAkey", P(ca_key),
                       "-set_serial", str(random.SystemRandom().getrandbits(63)), "-days", str(days),
                       "-extfile", os.path.join(d, "ext"), "-out", "/dev/stdout").decode()


def make_cert(ca_crt, ca_key, cn, org=None, sans=(), client=False, kind="ec"):
    """New key + certificate signed by the CA; returns (cert PEM, key PEM)."""
    with tempfile.TemporaryDirectory() as d:
        subj = ("/O=%s" % org if org else "") + "/CN=" + cn
        openssl("req", "-new", *key_args(kind), "-nodes", "-keyout", os.path.join(d, "k"),
                "-out", os.path.join(d, "csr"), "-subj", subj)
        with open(os.path.join(d, "csr")) as f:
            crt = sign_csr(f.read(), ca_crt, ca_key, client, sans)
        with open(os.path.join(d, "k")) as f:
            return crt, f.read()


def cert_sans(crt):
    try:
        out = openssl("x509", "-in", P(crt), "-noout", "-ext", "subjectAltName").decode()
    except RuntimeError:
        return None
    return sorted(x.split(":", 1)[1] for x in re.split(r",\s*", out.split("\n", 1)[-1].strip()) if ":" in x)


def cert_subject(pem):
    out = openssl("x509", "-noout", "-subject", "-nameopt", "RFC2253", stdin=pem.encode()).decode()
    return out.strip().split("=", 1)[1]


def ca_pubkey_hash(ca_pem):
    """kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's DER SubjectPublicKeyInfo."""
    pub = openssl("x509", "-pubkey", "-noout", stdin=ca_pem.encode())
    der = openssl("pkey", "-pubin", "-outform", "DER", stdin=pub)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def ensure_serving_cert(crt, key, ca_crt, ca_key, cn, sans, kind="ec", org=None):
    """A serving certificate whose SANs are exactly `sans`; regenerated only when they change."""
    want = sorted(set(sans))
    if os.path.exists(P(crt)) and os.path.exists(P(key)) and cert_sans(crt) == want:
        return False
    c, k = make_cert(ca_crt, ca_key, cn, org, want, client=False, kind=kind)
    write_file(crt, c, 0o644)
    write_file(key, k, 0o600)
    return True


def kubeconfig_yaml(cluster, user, context, server, ca_pem, crt_pem=None, key_pem=None, token=None):
    u = ("    client-certificate-data: %s\n    client-key-data: %s\n" % (b64(crt_pem), b64(key_pem))
         if crt_pem else "    token: %s\n" % token)
    return ("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: %s\n"
            "  name: %s\ncontexts:\n- context:\n    cluster: %s\n    user: %s\n  name: %s\n"
            "current-context: %s\nkind: Config\npreferences: {}\nusers:\n- name: %s\n  user:\n%s"
            % (b64(ca_pem), server, cluster, cluster, user, context, context, user, u))


def kubeconfig_parts(path):
    """(server, ca PEM, cert PEM, key PEM, token) from a kubeconfig with embedded data or file references."""
    cfg = load_yaml_file(path) or {}
    ctx_name = cfg.get("current-context")
    ctx = next((c["context"] for c in cfg.get("contexts", []) if c.get("name") == ctx_name),
               (cfg.get("contexts") or [{}])[0].get("context", {}))
    cl = next((c["cluster"] for c in cfg.get("clusters", []) if c.get("name") == ctx.get("cluster")),
              (cfg.get("clusters") or [{}])[0].get("cluster", {}))
    us = next((u["user"] for u in cfg.get("users", []) if u.get("name") == ctx.get("user")),
              (cfg.get("users") or [{}])[0].get("user", {}))

    def data(d, k):
        if d.get(k + "-data"):
            return unb64(d[k + "-data"])
        if d.get(k):
            return read_file(d[k])
        return None
    return (cl.get("server"), data(cl, "certificate-authority"), data(us, "client-certificate"),
            data(us, "client-key"), us.get("token"))


# ---------------------------------------------------------------- an HTTPS client for node-to-server calls

class ApiError(Exception):
    def __init__(self, code, body, url):
        super().__init__("%s: %d %s" % (url, code, http.client.responses.get(code, "")))
        self.code = code
        self.body = body
        self.url = url


class Client:
    def __init__(self, server, ca_pem=None, crt_pem=None, key_pem=None, token=None, basic=None):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context()
        if ca_pem:
            self.ctx.load_verify_locations(cadata=ca_pem)
            self.ctx.check_hostname = False  # nodes dial addresses and names the SANs may not list
        else:
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE
        if crt_pem:
            with tempfile.NamedTemporaryFile("w", delete=False) as f:
                f.write(crt_pem + "\n" + key_pem)
            try:
                self.ctx.load_cert_chain(f.name)
            finally:
                os.unlink(f.name)
        self.headers = {"User-Agent": "standin"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        if basic:
            self.headers["Authorization"] = "Basic " + b64("%s:%s" % basic)

    def raw(self, method, path, body=None, ctype="application/json", timeout=10):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method, headers=dict(self.headers))
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read(), self.server + path) from None

    def call(self, method, path, body=None, ctype="application/json", timeout=10):
        out = self.raw(method, path, body, ctype, timeout)
        return json.loads(out) if out else None


# ---------------------------------------------------------------- the API's resource catalogue

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
RESOURCES = [  # group, version, plural, kind, namespaced, short names
    ("", "v1", "namespaces", "Namespace", False, ["ns"]),
    ("", "v1", "nodes", "Node", False, ["no"]),
    ("", "v1", "pods", "Pod", True, ["po"]),
    ("", "v1", "services", "Service", True, ["svc"]),
    ("", "v1", "endpoints", "Endpoints", True, ["ep"]),
    ("", "v1", "configmaps", "ConfigMap", True, ["cm"]),
    ("", "v1", "secrets", "Secret", True, []),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"]),
    ("", "v1", "events", "Event", True, ["ev"]),
    ("", "v1", "persistentvolumes", "PersistentVolume", False, ["pv"]),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ["pvc"]),
    ("", "v1", "limitranges", "LimitRange", True, ["limits"]),
    ("", "v1", "resourcequotas", "ResourceQuota", True, ["quota"]),
    ("apps", "v1", "deployments", "Deployment", True, ["deploy"]),
    ("apps", "v1", "daemonsets", "DaemonSet", True, ["ds"]),
    ("apps", "v1", "statefulsets", "StatefulSet", True, ["sts"]),
    ("apps", "v1", "replicasets", "ReplicaSet", True, ["rs"]),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", True, []),
    ("batch", "v1", "jobs", "Job", True, []),
    ("batch", "v1", "cronjobs", "CronJob", True, ["cj"]),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ["pdb"]),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, []),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, []),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ["netpol"]),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", True, ["ing"]),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False, []),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ["sc"]),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ["pc"]),
    ("coordination.k8s.io", "v1", "leases", "Lease", True, []),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, []),
    ("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False, ["csr"]),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False, ["crd", "crds"]),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
     "ValidatingWebhookConfiguration", False, []),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False, []),
    ("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, []),
]
RANCHER_RESOURCES = [
    ("helm.cattle.io", "v1", "helmcharts", "HelmChart", True, []),
    ("helm.cattle.io", "v1", "helmchartconfigs", "HelmChartConfig", True, []),
    ("k3s.cattle.io", "v1", "addons", "Addon", True, []),
]
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
              "env": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name", "conditions": "type",
              "ownerReferences": "uid", "hostAliases": "ip", "taints": "key", "addresses": "type",
              "volumeDevices": "devicePath", "topologySpreadConstraints": "topologyKey"}
DEFAULT_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"]


def strategic_merge(orig, patch):
    """Strategic merge patch, for the list fields whose merge keys Kubernetes declares; None = delete."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(orig, dict):
        orig = {}
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    if patch.get("$patch") == "delete":
        return None
    out = copy.deepcopy(orig)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            out[field] = [x for x in out.get(field) or [] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            r = strategic_merge(out.get(k), v)
            if r is None:
                out.pop(k, None)
            else:
                out[k] = r
        elif isinstance(v, list):
            out[k] = merge_list(k, out.get(k), v)
        else:
            out[k] = v
    if retain is not None:
        out = {k: v for k, v in out.items() if k in retain}
    return out


def merge_list(field, cur, patch):
    key = MERGE_KEYS.get(field)
    if field == "ports":
        key = "containerPort" if any(isinstance(x, dict) and "containerPort" in x for x in patch + (cur or [])) \
            else "port"
    if field == "finalizers":
        return list(dict.fromkeys((cur or []) + patch))
    if key is None or not all(isinstance(x, dict) for x in patch):
        return copy.deepcopy(patch)
    if any(x.get("$patch") == "replace" for x in patch):
        return [x for x in patch if "$patch" not in x]
    out = copy.deepcopy(cur or [])
    for item in patch:
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: v for k, v in item.items() if v is not None})
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def json_merge(orig, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge(out.get(k), v)
    return out


def json_patch(doc, ops):
    """RFC 6902 JSON patch (add, remove, replace, test, move, copy)."""
    doc = copy.deepcopy(doc)

    def walk(path):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        return parent, parts[-1]

    def get(path):
        parent, last = walk(path)
        return parent[int(last)] if isinstance(parent, list) else parent[last]

    for op in ops:
        parent, last = walk(op["path"])
        kind = op["op"]
        if kind == "test":
            if get(op["path"]) != op["value"]:
                raise ValueError("testing value %s failed" % op["path"])
            continue
        if kind in ("remove", "replace", "move"):
            src = op["from"] if kind == "move" else op["path"]
            sp, sl = walk(src)
            val = sp.pop(int(sl)) if isinstance(sp, list) else sp.pop(sl)
            if kind == "remove":
                continue
            if kind == "replace":
                val = op["value"]
        elif kind == "copy":
            val = copy.deepcopy(get(op["from"]))
        else:
            val = op["value"]
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), val)
        else:
            parent[last] = val
    return doc


def parse_label_selector(sel):
    """-> predicate over a labels dict; supports =, ==, !=, in, notin, exists and !exists."""
    reqs = []
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?", sel or ""):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", part)
        if m:
            vals = {v.strip() for v in m.group(3).split(",")}
            reqs.append((m.group(1), m.group(2), vals))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "notin", {v.strip()}))
        elif "=" in part:
            k, v = part.replace("==", "=").split("=", 1)
            reqs.append((k.strip(), "in", {v.strip()}))
        elif part.startswith("!"):
            reqs.append((part[1:], "absent", None))
        else:
            reqs.append((part, "present", None))

    def ok(labels):
        labels = labels or {}
        for k, op, vals in reqs:
            if op == "in" and labels.get(k) not in vals:
                return False
            if op == "notin" and k in labels and labels[k] in vals:
                return False
            if op == "present" and k not in labels:
                return False
            if op == "absent" and k in labels:
                return False
        return True
    return ok


def label_selector_matches(sel, labels):
    """A LabelSelector object ({matchLabels, matchExpressions}) against a labels dict; an empty one selects all."""
    labels = labels or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), set(e.get("values") or [])
        if op == "In" and labels.get(k) not in vals or op == "NotIn" and k in labels and labels[k] in vals or \
                op == "Exists" and k not in labels or op == "DoesNotExist" and k in labels:
            return False
    return True


def field_value(obj, path):
    cur = obj
    for p in path.split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def parse_field_selector(sel):
    reqs = []
    for part in (sel or "").split(","):
        if not part:
            continue
        neg = "!=" in part
        k, v = part.split("!=" if neg else "=", 1)
        reqs.append((k.strip().lstrip("="), v.strip().lstrip("="), neg))
    return lambda o: all((field_value(o, k) != v) if neg else (field_value(o, k) == v) for k, v, neg in reqs)


# ---------------------------------------------------------------- the cluster state, persisted and replicated

class Store:
    """Objects by key "group/plural/namespace/name", each stamped (time, writer) so servers merge last-writer-wins,
    with tombstones for deletes. Saved to one JSON file (leases stay in memory, like a kubelet's heartbeat)."""

    def __init__(self, path, ident):
        self.path = path
        self.ident = ident
        self.lock = threading.RLock()
        self.entries = {}
        self.rv = 0
        self.last_stamp = 0
        self.dirty = threading.Event()
        text = read_file(path)
        if text:
            saved = json.loads(text)
            self.entries = saved["entries"]
            self.rv = saved["rv"]
        threading.Thread(target=self._saver, daemon=True).start()

    def _stamp(self):
        t = max(time.time_ns(), self.last_stamp + 1)
        self.last_stamp = t
        return [t, self.ident]

    def _saver(self):
        while True:
            self.dirty.wait()
            time.sleep(0.3)
            self.dirty.clear()
            self.flush()

    def flush(self):
        with self.lock:
            keep = {k: e for k, e in self.entries.items() if not k.startswith("coordination.k8s.io/")}
            data = json.dumps({"rv": self.rv, "entries": keep}, sort_keys=True)
        write_file(self.path, data, 0o600)

    def get(self, key):
        with self.lock:
            e = self.entries.get(key)
            return copy.deepcopy(e["o"]) if e and e["o"] is not None else None

    def list(self, group, plural, ns=None):
        prefix = "%s/%s/" % (group, plural)
        with self.lock:
            out = [copy.deepcopy(e["o"]) for k, e in sorted(self.entries.items())
                   if k.startswith(prefix) and e["o"] is not None
                   and (ns is None or k.split("/")[2] == ns)]
        return out

    def put(self, key, obj):
        with self.lock:
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.entries[key] = {"o": copy.deepcopy(obj), "s": self._stamp()}
            self.dirty.set()
            return copy.deepcopy(obj)

    def delete(self, key):
        with self.lock:
            if key in self.entries and self.entries[key]["o"] is not None:
                self.rv += 1
                self.entries[key] = {"o": None, "s": self._stamp(), "t": time.time()}
                self.dirty.set()
                return True
            return False

    def snapshot(self, since=0):
        """Entries stamped after `since` (ns): peers exchange only what changed since their last round."""
        with self.lock:
            now = time.time()
            for k in [k for k, e in self.entries.items() if e["o"] is None and now - e.get("t", now) > 600]:
                del self.entries[k]
            return copy.deepcopy({k: e for k, e in self.entries.items() if e["s"][0] > since})

    def merge(self, remote):
        changed = False
        with self.lock:
            for k, e in remote.items():
                mine = self.entries.get(k)
                if mine is None or e["s"] > mine["s"]:
                    if e["o"] is not None:
                        self.rv += 1
                        e["o"]["metadata"]["resourceVersion"] = str(self.rv)
                    self.entries[k] = e
                    changed = True
            if changed:
                self.dirty.set()
        return changed


# ---------------------------------------------------------------- server-side printing (kubectl's human output)

def pod_ready(pod):
    return pod.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions", []))


def tolerates(tolerations, taint):
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("operator", "Equal") == "Equal" and t.get("key") == taint.get("key") \
                and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_status_word(node):
    ready = next((c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), None)
    word = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    if node.get("spec", {}).get("unschedulable"):
        word += ",SchedulingDisabled"
    return word


def node_roles(node):
    roles = sorted(k.split("/", 1)[1] for k in node["metadata"].get("labels", {})
                   if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1])
    return ",".join(roles) or "<none>"


def age(obj):
    try:
        return human_duration((now_utc() - parse_time(obj["metadata"]["creationTimestamp"])).total_seconds())
    except (KeyError, ValueError):
        return "<unknown>"


def col(name, typ="string", priority=0, fmt=""):
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def table_for(kind, objs, rv):
    if kind == "Node":
        cols = [col("Name", fmt="name"), col("Status"), col("Roles"), col("Age"), col("Version"),
                col("Internal-IP", priority=1), col("External-IP", priority=1), col("OS-Image", priority=1),
                col("Kernel-Version", priority=1), col("Container-Runtime", priority=1)]

        def cells(o):
            st = o.get("status", {})
            addr = {a["type"]: a["address"] for a in st.get("addresses", [])}
            ni = st.get("nodeInfo", {})
            return [o["metadata"]["name"], node_status_word(o), node_roles(o), age(o), ni.get("kubeletVersion", ""),
                    addr.get("InternalIP", "<none>"), addr.get("ExternalIP", "<none>"), ni.get("osImage", ""),
                    ni.get("kernelVersion", ""), ni.get("containerRuntimeVersion", "")]
    elif kind == "Pod":
        cols = [col("Name", fmt="name"), col("Ready"), col("Status"), col("Restarts", "string"), col("Age"),
                col("IP", priority=1), col("Node", priority=1), col("Nominated Node", priority=1),
                col("Readiness Gates", priority=1)]

        def cells(o):
            n = len(o.get("spec", {}).get("containers", []))
            phase = o.get("status", {}).get("phase", "Pending")
            ready = n if phase == "Running" else 0
            return [o["metadata"]["name"], "%d/%d" % (ready, n), phase, "0", age(o),
                    o.get("status", {}).get("podIP", "<none>"), o.get("spec", {}).get("nodeName", "<none>"),
                    "<none>", "<none>"]
    elif kind == "Namespace":
        cols = [col("Name", fmt="name"), col("Status"), col("Age")]

        def cells(o):
            return [o["metadata"]["name"], o.get("status", {}).get("phase", "Active"), age(o)]
    elif kind == "Deployment":
        cols = [col("Name", fmt="name"), col("Ready"), col("Up-to-date", "integer"), col("Available", "integer"),
                col("Age")]

        def cells(o):
            st = o.get("status", {})
            return [o["metadata"]["name"], "%d/%d" % (st.get("readyReplicas", 0), o.get("spec", {}).get("replicas", 1)),
                    st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age(o)]
    else:
        cols = [col("Name", fmt="name"), col("Age")]

        def cells(o):
            return [o["metadata"]["name"], age(o)]
    rows = [{"cells": cells(o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                           "metadata": o["metadata"]}} for o in objs]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": cols, "rows": rows}


def openapi_v2_protobuf(version):
    """The smallest valid gnostic OpenAPIv2 Document (swagger, info): kubectl's client-side validation and
    apply's patch logic find no schema in it and fall back to their compiled-in types, as with an old server."""
    def field(num, payload):
        return bytes([num << 3 | 2]) + varint(len(payload)) + payload

    def varint(n):
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out
    info = field(1, b"Kubernetes") + field(2, version.encode())
    return field(1, b"2.0") + field(2, info)


def status_obj(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 300 else "Success",
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    if code < 300:
        s.pop("message")
        s.pop("reason")
    return s


class HttpError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.body = status_obj(code, reason, message, details)


def not_found(spec, name):
    return HttpError(404, "NotFound", '%s "%s" not found' % (qualified(spec), name),
                     {"name": name, "group": spec["group"], "kind": spec["plural"]})


def qualified(spec):
    return spec["plural"] + ("." + spec["group"] if spec["group"] else "")


# ---------------------------------------------------------------- the API server

ENGINE_WORKLOADS = {  # per engine: a DaemonSet on every node, a Deployment with an emptyDir spread one per node
    "rke2": ("rke2-canal", "rke2-metrics-server"),
    "k3s": ("svclb-traefik", "metrics-server"),
    "upstream": ("kube-proxy", "coredns"),
}


class Cluster:
    """The API's behaviour: catalogue, authentication, CRUD, patches, and the few controllers the lab needs."""

    def __init__(self, engine, store, version, ca_crt, ca_key, client_ca_crt, client_ca_key, self_ip, api_port,
                 peer_port, log):
        self.engine = engine
        self.store = store
        self.version = version
        self.ca_crt, self.ca_key = ca_crt, ca_key
        self.client_ca_crt, self.client_ca_key = client_ca_crt, client_ca_key
        self.self_ip = self_ip
        self.api_port = api_port
        self.peer_port = peer_port
        self.log = log
        self.passwords = {}        # rancher: {"server": pw, "node": pw} accepted at the supervisor
        self.bootstrap_data = None  # rancher: what an extra server needs (CA files, tokens)
        self.kubeadm_certs = None
        self.lock = threading.RLock()

    # -- catalogue
    def catalogue(self):
        specs = list(RESOURCES) + (RANCHER_RESOURCES if self.engine != "upstream" else [])
        for crd in self.store.list("apiextensions.k8s.io", "customresourcedefinitions"):
            sp = crd.get("spec", {})
            names = sp.get("names", {})
            for v in sp.get("versions", []):
                if v.get("served", True):
                    specs.append((sp.get("group", ""), v["name"], names.get("plural", ""), names.get("kind", ""),
                                  sp.get("scope") == "Namespaced", names.get("shortNames", [])))
        return [{"group": g, "version": v, "plural": p, "kind": k, "namespaced": n, "short": s}
                for g, v, p, k, n, s in specs]

    def spec_for(self, group, version, plural):
        for s in self.catalogue():
            if s["group"] == group and s["version"] == version and s["plural"] == plural:
                return s
        return None

    def spec_by_kind(self, api_version, kind):
        group, _, version = api_version.rpartition("/")
        return next((s for s in self.catalogue() if s["group"] == group and s["version"] == version
                     and s["kind"] == kind), None)

    def discovery(self, group, version):
        res = []
        for s in self.catalogue():
            if s["group"] == group and s["version"] == version:
                res.append({"name": s["plural"], "singularName": s["kind"].lower(), "namespaced": s["namespaced"],
                            "kind": s["kind"], "verbs": VERBS, "shortNames": s["short"]} if s["short"] else
                           {"name": s["plural"], "singularName": s["kind"].lower(), "namespaced": s["namespaced"],
                            "kind": s["kind"], "verbs": VERBS})
                if s["plural"] in ("pods", "nodes", "deployments", "daemonsets", "certificatesigningrequests"):
                    res.append({"name": s["plural"] + "/status", "singularName": "", "namespaced": s["namespaced"],
                                "kind": s["kind"], "verbs": ["get", "patch", "update"]})
                if s["plural"] == "pods":
                    res.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                                "version": "v1", "kind": "Eviction", "verbs": ["create"]})
        gv = version if not group else group + "/" + version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}

    def groups(self):
        seen = {}
        for s in self.catalogue():
            if s["group"]:
                seen.setdefault(s["group"], [])
                if s["version"] not in seen[s["group"]]:
                    seen[s["group"]].append(s["version"])
        groups = [{"name": g, "versions": [{"groupVersion": g + "/" + v, "version": v} for v in vs],
                   "preferredVersion": {"groupVersion": g + "/" + vs[0], "version": vs[0]}} for g, vs in seen.items()]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def version_info(self):
        m = re.match(r"v(\d+)\.(\d+)", self.version)
        return {"major": m.group(1), "minor": m.group(2), "gitVersion": self.version,
                "gitCommit": commit_of(self.version, 40), "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": GO_VERSION, "compiler": "gc", "platform": "linux/amd64"}

    # -- authentication: (user, groups) or None for anonymous; raises 401 for bad credentials
    def authenticate(self, cert, auth):
        if cert:
            subj = dict(x[0] for x in cert.get("subject", ()))
            orgs = [x[0][1] for x in cert.get("subject", ()) if x[0][0] == "organizationName"]
            return subj.get("commonName", ""), orgs
        if auth.startswith("Bearer "):
            tok = auth[7:].strip()
            m = re.match(r"^([a-z0-9]{6})\.([a-z0-9]{16})$", tok)
            if m:
                sec = self.store.get("/secrets/kube-system/bootstrap-token-" + m.group(1))
                data = {k: unb64(v) for k, v in (sec or {}).get("data", {}).items()}
                exp = data.get("expiration")
                if sec and data.get("token-secret") == m.group(2) and (not exp or parse_time(exp) > now_utc()):
                    extra = [g for g in data.get("auth-extra-groups", "").split(",") if g]
                    return "system:bootstrap:" + m.group(1), ["system:bootstrappers"] + extra
            raise HttpError(401, "Unauthorized", "Unauthorized")
        if auth.startswith("Basic "):
            try:
                user, pw = unb64(auth[6:].strip()).split(":", 1)
            except ValueError:
                raise HttpError(401, "Unauthorized", "Unauthorized") from None
            for role, want in self.passwords.items():
                if want and hmac.compare_digest(pw, want) and (user == role or role == "server"):
                    return "supervisor:" + role, [role]
            raise HttpError(401, "Unauthorized", "Unauthorized")
        return None

    def authorize(self, ident, verb, spec, ns, name):
        user, groups = ident
        if "system:bootstrappers" in groups:
            ok = (spec["plural"] == "certificatesigningrequests" and verb in ("create", "get", "list", "watch")) or \
                 (spec["plural"] in ("configmaps", "secrets") and verb == "get" and ns == "kube-system") or \
                 (spec["plural"] == "nodes" and verb == "get")
            if not ok:
                scope = ' in the namespace "%s"' % ns if ns else " at the cluster scope"
                raise HttpError(403, "Forbidden", '%s is forbidden: User "%s" cannot %s resource "%s" in API group '
                                '"%s"%s' % (qualified(spec) if not name else '%s "%s"' % (qualified(spec), name),
                                            user, verb, spec["plural"], spec["group"], scope))
        if user.startswith("supervisor:"):
            raise HttpError(403, "Forbidden", "forbidden")

    # -- object CRUD
    def key(self, spec, ns, name):
        return "%s/%s/%s/%s" % (spec["group"], spec["plural"], ns or "", name)

    def get(self, spec, ns, name):
        o = self.store.get(self.key(spec, ns, name))
        if o is None:
            raise not_found(spec, name)
        return o

    def typed(self, spec, obj):
        obj["apiVersion"] = spec["version"] if not spec["group"] else spec["group"] + "/" + spec["version"]
        obj["kind"] = spec["kind"]
        return obj

    def create(self, spec, ns, obj, hooks=True):
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + rand_str(5)
        name = md.get("name")
        if not name:
            raise HttpError(422, "Invalid", "%s \"\" is invalid: metadata.name: Required value: name or generateName "
                            "is required" % spec["kind"])
        if spec["namespaced"]:
            ns = ns or md.get("namespace") or "default"
            md["namespace"] = ns
            if spec["plural"] != "namespaces" and \
                    self.store.get("/namespaces//" + ns) is None:
                raise HttpError(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
        else:
            md.pop("namespace", None)
        with self.lock:
            if self.store.get(self.key(spec, ns, name)) is not None:
                raise HttpError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(spec), name),
                                {"name": name, "group": spec["group"], "kind": spec["plural"]})
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = rfc3339()
            for k in ("resourceVersion", "deletionTimestamp", "selfLink"):
                md.pop(k, None)
            if "spec" in obj or spec["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
                md["generation"] = 1
            self.defaults(spec, obj)
            out = self.store.put(self.key(spec, ns, name), self.typed(spec, obj))
        if hooks:
            self.after_write(spec, None, out)
        return out

    def defaults(self, spec, obj):
        if spec["kind"] == "Namespace":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        if spec["kind"] == "Secret":
            obj.setdefault("type", "Opaque")
            for k, v in (obj.pop("stringData", None) or {}).items():
                obj.setdefault("data", {})[k] = b64(v)
        if spec["kind"] == "Service":
            obj.setdefault("spec", {}).setdefault("type", "ClusterIP")
        self.workload_status(spec, obj)

    def workload_status(self, spec, obj):
        """What the controllers would report once a workload rolled out, so `kubectl rollout status` returns."""
        gen = obj["metadata"].get("generation", 1)
        sp = obj.get("spec")
        if isinstance(sp, dict):  # the apiserver's defaults that kubectl rollout relies on
            if spec["kind"] == "Deployment":
                sp.setdefault("replicas", 1)
                sp.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%",
                                                                                       "maxUnavailable": "25%"}})
            elif spec["kind"] == "DaemonSet":
                sp.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0,
                                                                                             "maxUnavailable": 1}})
            elif spec["kind"] == "StatefulSet":
                sp.setdefault("replicas", 1)
                sp.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        if spec["kind"] in ("Deployment", "StatefulSet", "ReplicaSet"):
            obj["status"] = self.counted_status(spec["kind"], obj, self.store.list("", "pods"),
                                                self.store.list("apps", "replicasets"))
        elif spec["kind"] == "DaemonSet":
            n = len(self.store.list("", "nodes"))
            obj["status"] = {"observedGeneration": gen, "desiredNumberScheduled": n, "currentNumberScheduled": n,
                             "numberReady": n, "numberAvailable": n, "updatedNumberScheduled": n,
                             "numberMisscheduled": 0}

    def counted_status(self, kind, obj, pods, replicasets):
        """A ReplicaSet's or StatefulSet's counts from its pods (those that exist and are not terminating; ready =
        the Ready condition), a Deployment's the sum of its ReplicaSets', as their controllers report them."""
        md, sp = obj["metadata"], obj.get("spec") or {}
        want = int(sp.get("replicas", 1) or 0) if isinstance(sp, dict) else 1
        gen = md.get("generation", 1)
        if kind == "Deployment":
            mine = [self.counted_status("ReplicaSet", rs, pods, ()) for rs in replicasets
                    if any(r.get("uid") == md.get("uid") for r in rs["metadata"].get("ownerReferences", []))]
            have = sum(st["replicas"] for st in mine)
            ready = sum(st.get("readyReplicas", 0) for st in mine)
            mu = ((sp.get("strategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable", "25%")
            mu = want * int(mu[:-1]) // 100 if isinstance(mu, str) and mu.endswith("%") else int(mu)
            avail = ready >= want - mu
            st = {"observedGeneration": gen, "replicas": have, "updatedReplicas": have, "readyReplicas": ready,
                  "availableReplicas": ready, "unavailableReplicas": max(0, want - ready), "conditions": [
                      {"type": "Available", "status": "True" if avail else "False",
                       "reason": "MinimumReplicasAvailable" if avail else "MinimumReplicasUnavailable"},
                      {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}
            return {k: v for k, v in st.items() if v != 0 or k == "observedGeneration"}  # omitempty, as served
        owned = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                 and any(r.get("uid") == md.get("uid") for r in p["metadata"].get("ownerReferences", []))]
        ready = sum(1 for p in owned if pod_ready(p))
        st = {"observedGeneration": gen, "replicas": len(owned), "readyReplicas": ready, "availableReplicas": ready}
        if kind == "ReplicaSet":
            st["fullyLabeledReplicas"] = len(owned)
        else:
            st.update({"updatedReplicas": len(owned), "currentReplicas": len(owned), "currentRevision": "r1",
                       "updateRevision": "r1"})
        return {k: v for k, v in st.items() if v != 0 or k in ("observedGeneration", "replicas")}

    def update(self, spec, ns, name, obj, sub=None):
        with self.lock:
            old = self.get(spec, ns, name)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise HttpError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                                'modified; please apply your changes to the latest version and try again'
                                % (qualified(spec), name), {"name": name, "group": spec["group"],
                                                            "kind": spec["plural"]})
            if sub == "status":
                new = copy.deepcopy(old)
                new["status"] = obj.get("status", {})
            else:
                new = obj
                if spec["kind"] not in ("Node",) and "status" in old and "status" not in new:
                    new["status"] = old["status"]
            return self._store_update(spec, ns, name, old, new)

    def _store_update(self, spec, ns, name, old, new):
        md = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "name", "namespace"):
            if k in old["metadata"]:
                md[k] = old["metadata"][k]
            else:
                md.pop(k, None)
        if "generation" in old["metadata"]:
            md["generation"] = old["metadata"]["generation"] + (1 if new.get("spec") != old.get("spec") else 0)
        if spec["kind"] == "Secret":
            self.defaults(spec, new)
        self.workload_status(spec, new)
        out = self.store.put(self.key(spec, ns, name), self.typed(spec, new))
        self.after_write(spec, old, out)
        return out

    def patch(self, spec, ns, name, ctype, body, sub=None):
        with self.lock:
            try:
                old = self.get(spec, ns, name)
            except HttpError:
                if ctype.startswith("application/apply-patch"):
                    return self.create(spec, ns, body)
                raise
            base = copy.deepcopy(old)
            if ctype.startswith("application/strategic-merge-patch"):
                new = strategic_merge(base, body)
            elif ctype.startswith("application/merge-patch") or ctype.startswith("application/apply-patch"):
                new = json_merge(base, body)
            elif ctype.startswith("application/json-patch"):
                try:
                    new = json_patch(base, body)
                except (KeyError, IndexError, ValueError) as e:
                    raise HttpError(422, "Invalid", "the server rejected our request due to an error in our "
                                    "request: %s" % e) from None
            else:
                raise HttpError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - '
                                'accepted media types include: application/json-patch+json, '
                                'application/merge-patch+json, application/apply-patch+yaml, '
                                'application/strategic-merge-patch+json')
            if sub == "status":
                keep = copy.deepcopy(old)
                keep["status"] = new.get("status", {})
                new = keep
            return self._store_update(spec, ns, name, old, new)

    def delete(self, spec, ns, name, hooks=True):
        with self.lock:
            old = self.get(spec, ns, name)
            self.store.delete(self.key(spec, ns, name))
        if hooks:
            self.after_delete(spec, old)
        return old

    def list(self, spec, ns, query):
        items = self.store.list(spec["group"], spec["plural"], ns if spec["namespaced"] else None)
        lsel = parse_label_selector(query.get("labelSelector", ""))
        fsel = parse_field_selector(query.get("fieldSelector", ""))
        items = [o for o in items if lsel(o["metadata"].get("labels")) and fsel(o)]
        for o in items:
            o.pop("apiVersion", None)
            o.pop("kind", None)
        return items

    # -- the little controllers
    def after_write(self, spec, old, new):
        kind = spec["kind"]
        if kind == "Node" and old is None:
            self.ensure_node_pods(new)
            self.bind_pending()
        elif kind == "Node" and (old.get("spec", {}).get("unschedulable")
                                 and not new.get("spec", {}).get("unschedulable")
                                 or node_status_word(new) != node_status_word(old)):
            self.bind_pending()
            self.sync_workloads()
        elif kind == "Secret" and new.get("type") == "bootstrap.kubernetes.io/token":
            self.sign_cluster_info()
        elif kind == "CertificateSigningRequest" and old is None:
            self.sign_csr(new)
        elif kind == "Deployment" and old is None:
            self.deployment_pods(new)
        elif kind == "ReplicaSet" and old is None and not any(
                r.get("kind") == "Deployment" for r in new["metadata"].get("ownerReferences", [])):
            self.rs_pods(new)
        elif kind == "StatefulSet" and old is None:
            self.sync_workloads()
        elif kind == "PodDisruptionBudget":
            self.refresh_budgets(new["metadata"]["namespace"])

    def after_delete(self, spec, old):
        kind = spec["kind"]
        name = old["metadata"]["name"]
        if kind == "Node":
            for pod in self.store.list("", "pods"):
                if pod.get("spec", {}).get("nodeName") == name:
                    self.store.delete(self.key(self.spec_for("", "v1", "pods"), pod["metadata"]["namespace"],
                                               pod["metadata"]["name"]))
                    self.replace_pod(pod)
            self.store.delete("coordination.k8s.io/leases/kube-node-lease/" + name)
            self.store.delete("/secrets/kube-system/%s.node-password.%s" % (name, self.engine))
        elif kind == "Pod":
            self.replace_pod(old)
        elif kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
            self.collect_garbage(old["metadata"]["uid"])
        elif kind == "Namespace":
            for k in [k for k in self.store.snapshot() if k.split("/")[2] == name]:
                self.store.delete(k)
        elif kind == "Secret" and old.get("type") == "bootstrap.kubernetes.io/token":
            self.sign_cluster_info()

    def pod_spec(self):
        return self.spec_for("", "v1", "pods")

    def make_pod(self, name, owner, node, volumes=None, mirror=False, labels=None, ns="kube-system", spec=None):
        """A pod bound to `node` (None: Pending, unschedulable) with the template's `spec` (else a system pod's,
        tolerating every taint). A bound pod is Pending until its containers run (POD_START), then Running, and
        Ready after its readinessProbe's initialDelaySeconds (sync_pods moves it on)."""
        if spec:
            spec = copy.deepcopy(spec)
            spec.pop("nodeName", None)
            spec.setdefault("containers", [{"name": name.split("-")[0], "image": "registry.lab/standin/pause:3.10"}])
        else:
            spec = {"containers": [{"name": name.split("-")[0], "image": "registry.lab/standin/pause:3.10"}],
                    "volumes": volumes or [], "tolerations": [{"operator": "Exists"}]}
        pod = {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": spec,
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
                   {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                   {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
                   "containerStatuses": [{"name": c.get("name"), "image": c.get("image"), "ready": False,
                                          "started": False, "restartCount": 0,
                                          "state": {"waiting": {"reason": "ContainerCreating"}}}
                                         for c in spec["containers"]]}}
        if owner:
            pod["metadata"]["ownerReferences"] = [owner]
        if mirror:
            pod["metadata"]["annotations"] = {"kubernetes.io/config.mirror": rand_str(32, "0123456789abcdef"),
                                              "kubernetes.io/config.source": "file"}
        if node:
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            ip = next((a["address"] for a in node.get("status", {}).get("addresses", [])
                       if a["type"] == "InternalIP"), "")
            pod["status"].update({"hostIP": ip, "podIP": "10.42.%d.%d" % (random.randint(0, 255),
                                                                          random.randint(2, 250)),
                                  "startTime": rfc3339()})
        else:
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                                  "reason": "Unschedulable"}]}
        return self.create(self.pod_spec(), ns, pod, hooks=False)

    def workload_objects(self):
        """The DaemonSet and Deployment/ReplicaSet whose pods run on every node (created once per cluster)."""
        ds_name, dep_name = ENGINE_WORKLOADS[self.engine]
        ds_spec = self.spec_for("apps", "v1", "daemonsets")
        rs_spec = self.spec_for("apps", "v1", "replicasets")
        dep_spec = self.spec_for("apps", "v1", "deployments")
        with self.lock:
            ds = self.store.get(self.key(ds_spec, "kube-system", ds_name))
            if ds is None:
                tmpl = {"metadata": {"labels": {"k8s-app": ds_name}}, "spec": {"containers": [{"name": ds_name,
                                                                                   "image": "registry.lab/pause"}]}}
                ds = self.create(ds_spec, "kube-system", {"metadata": {"name": ds_name, "namespace": "kube-system"},
                                 "spec": {"selector": {"matchLabels": {"k8s-app": ds_name}}, "template": tmpl}},
                                 hooks=False)
                dep = self.create(dep_spec, "kube-system", {"metadata": {"name": dep_name}, "spec": {
                    "replicas": 1, "selector": {"matchLabels": {"k8s-app": dep_name}}, "template": tmpl}}, hooks=False)
                self.create(rs_spec, "kube-system", {"metadata": {"name": dep_name + "-6d4b75cb6d", "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep_name, "uid": dep["metadata"]["uid"],
                     "controller": True, "blockOwnerDeletion": True}]}, "spec": {
                    "replicas": 1, "selector": {"matchLabels": {"k8s-app": dep_name}}, "template": tmpl}}, hooks=False)
            rs = self.store.get(self.key(rs_spec, "kube-system", dep_name + "-6d4b75cb6d"))
        return ds, rs

    def scale_system(self, rs):
        """The engine's own Deployment has a pod per node (an autoscaler scaling it with the cluster): its
        ReplicaSet's and Deployment's replicas follow the pods made for new nodes."""
        with self.lock:
            n = sum(1 for p in self.store.list("", "pods", rs["metadata"]["namespace"])
                    if any(r.get("uid") == rs["metadata"]["uid"] for r in p["metadata"].get("ownerReferences", [])))
            rs_spec, dep_spec = self.spec_for("apps", "v1", "replicasets"), self.spec_for("apps", "v1", "deployments")
            for spec, o in ((rs_spec, rs), (dep_spec, self.store.get(self.key(dep_spec, "kube-system", next(
                    r["name"] for r in rs["metadata"]["ownerReferences"] if r["kind"] == "Deployment"))))):
                o = self.store.get(self.key(spec, "kube-system", o["metadata"]["name"])) if o else None
                if o and o["spec"].get("replicas") != n:
                    o["spec"]["replicas"] = n
                    o["metadata"]["generation"] = o["metadata"].get("generation", 1) + 1
                    self.store.put(self.key(spec, "kube-system", o["metadata"]["name"]), o)
        self.sync_workloads()

    def owner(self, obj, kind):
        return {"apiVersion": "apps/v1", "kind": kind, "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}

    def ensure_node_pods(self, node):
        ds, rs = self.workload_objects()
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels", {})
        self.make_pod("%s-%s" % (ds["metadata"]["name"], rand_str(5)), self.owner(ds, "DaemonSet"), node,
                      labels={"k8s-app": ds["metadata"]["name"]})
        self.make_pod("%s-%s" % (rs["metadata"]["name"], rand_str(5)), self.owner(rs, "ReplicaSet"), node,
                      volumes=[{"name": "tmp-dir", "emptyDir": {}}],
                      labels={"k8s-app": rs["metadata"]["name"].rsplit("-", 1)[0]})
        self.scale_system(rs)
        if "node-role.kubernetes.io/control-plane" in labels and self.engine != "k3s":
            for comp in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
                self.make_pod("%s-%s" % (comp, name), {"apiVersion": "v1", "kind": "Node", "name": name,
                                                       "uid": node["metadata"]["uid"], "controller": True},
                              node, mirror=True, labels={"component": comp, "tier": "control-plane"})

    def schedulable_nodes(self, pod_spec=None):
        """Ready, not cordoned, every NoSchedule/NoExecute taint tolerated and the nodeSelector matched."""
        pod_spec = pod_spec or {"tolerations": [{"operator": "Exists"}]}
        sel = pod_spec.get("nodeSelector") or {}
        return [n for n in self.store.list("", "nodes") if not n.get("spec", {}).get("unschedulable")
                and node_status_word(n) == "Ready"
                and all(n["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())
                and all(tolerates(pod_spec.get("tolerations"), t) for t in n.get("spec", {}).get("taints", [])
                        if t.get("effect") in ("NoSchedule", "NoExecute"))]

    def choose_node(self, pod_spec, owner_uid):
        """The scheduler's pick: a fitting node with the fewest pods of the same owner (the default spread), then
        the fewest pods; None when no node fits (the pod waits, Pending)."""
        same, count = {}, {}
        for p in self.store.list("", "pods"):
            n = p.get("spec", {}).get("nodeName")
            count[n] = count.get(n, 0) + 1
            if any(r.get("uid") == owner_uid for r in p["metadata"].get("ownerReferences", [])):
                same[n] = same.get(n, 0) + 1
        nodes = sorted(self.schedulable_nodes(pod_spec), key=lambda n: (same.get(n["metadata"]["name"], 0),
                                                                         count.get(n["metadata"]["name"], 0)))
        return nodes[0] if nodes else None

    def collect_garbage(self, uid):
        """The garbage collector's background cascade: what the deleted object owned goes too (a Deployment's
        ReplicaSets, their pods), and is not replaced."""
        for group, plural in (("apps", "replicasets"), ("", "pods")):
            spec = self.spec_for(group, "v1", plural)
            for o in self.store.list(group, plural):
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences", [])):
                    self.store.delete(self.key(spec, o["metadata"]["namespace"], o["metadata"]["name"]))
                    self.collect_garbage(o["metadata"]["uid"])
        self.sync_workloads()

    def replace_pod(self, pod):
        """A ReplicaSet's pod that is deleted comes back at once, scheduled on another node that fits (or waits,
        Pending); it is Ready only once started (sync_pods). A StatefulSet's comes back under its name (sync)."""
        ref = next((r for r in pod["metadata"].get("ownerReferences", []) if r.get("kind") == "ReplicaSet"), None)
        if ref and any(rs["metadata"]["uid"] == ref.get("uid") for rs in self.store.list("apps", "replicasets")):
            base = pod["metadata"]["name"].rsplit("-", 1)[0]
            self.make_pod("%s-%s" % (base, rand_str(5)), ref, self.choose_node(pod["spec"], ref.get("uid")),
                          labels=pod["metadata"].get("labels"), ns=pod["metadata"]["namespace"], spec=pod["spec"])
        self.sync_workloads()

    def bind_pending(self):
        for pod in self.store.list("", "pods"):
            if not pod.get("spec", {}).get("nodeName"):
                ref = (pod["metadata"].get("ownerReferences") or [None])[0]
                node = self.choose_node(pod["spec"], (ref or {}).get("uid"))
                if not node:
                    continue
                ns = pod["metadata"]["namespace"]
                self.store.delete(self.key(self.pod_spec(), ns, pod["metadata"]["name"]))
                self.make_pod(pod["metadata"]["name"], ref, node, labels=pod["metadata"].get("labels"), ns=ns,
                              spec=pod["spec"])

    def sync_pods(self, now):
        """The kubelets' and the node controller's part: a bound pod runs POD_START seconds after it started, is
        Ready after its readiness delay and while its node is Ready (a node gone silent: its pods are not Ready).
        -> the namespaces whose pods changed."""
        nodes = {n["metadata"]["name"]: n for n in self.store.list("", "nodes")}
        changed = set()
        for pod in self.store.list("", "pods"):
            st, node = pod.get("status", {}), nodes.get(pod.get("spec", {}).get("nodeName"))
            if not node or not st.get("startTime") or st.get("phase") in ("Succeeded", "Failed"):
                continue
            started = parse_time(st["startTime"]).timestamp() + POD_START
            delay = max([int((c.get("readinessProbe") or {}).get("initialDelaySeconds", 0) or 0)
                         for c in pod["spec"].get("containers", [])] or [0])
            running = st.get("phase") == "Running" or now >= started
            ready = running and now >= started + delay and node_status_word(node).startswith("Ready")
            if running == (st.get("phase") == "Running") and ready == pod_ready(pod):
                continue
            st["phase"] = "Running" if running else "Pending"
            word = "True" if ready else "False"
            for c in st.get("conditions", []):
                if c["type"] in ("Ready", "ContainersReady") and c["status"] != word:
                    c.update({"status": word, "lastTransitionTime": rfc3339()})
                    c.pop("reason", None) if ready else c.update(reason="ContainersNotReady")
            for cs in st.get("containerStatuses", []):
                cs.update({"ready": ready, "started": running})
                if running:
                    cs["state"] = {"running": {"startedAt": rfc3339(datetime.datetime.fromtimestamp(
                        started, datetime.timezone.utc))}}
            self.store.put(self.key(self.pod_spec(), pod["metadata"]["namespace"], pod["metadata"]["name"]), pod)
            changed.add(pod["metadata"]["namespace"])
        return changed

    def sync_workloads(self):
        """The controllers in one pass: pods move on (sync_pods); a StatefulSet's missing ordinal is created once
        the ones below it are Ready (OrderedReady; all at once for Parallel); ReplicaSets, StatefulSets and
        Deployments report the counts of their pods; budgets follow."""
        with self.lock:
            changed = self.sync_pods(time.time())
            pods = self.store.list("", "pods")
            for sts in self.store.list("apps", "statefulsets"):
                md, sp = sts["metadata"], sts.get("spec") or {}
                mine = {p["metadata"]["name"]: p for p in pods if p["metadata"].get("namespace") == md["namespace"]
                        and any(r.get("uid") == md["uid"] for r in p["metadata"].get("ownerReferences", []))}
                parallel = sp.get("podManagementPolicy") == "Parallel"
                for i in range(int(sp.get("replicas", 1) or 0)):
                    name = "%s-%d" % (md["name"], i)
                    if name in mine:
                        if not parallel and not pod_ready(mine[name]):
                            break
                        continue
                    tmpl = sp.get("template") or {}
                    labels = dict((tmpl.get("metadata") or {}).get("labels") or {},
                                  **{"statefulset.kubernetes.io/pod-name": name})
                    pods.append(self.make_pod(name, self.owner(sts, "StatefulSet"),
                                              self.choose_node(tmpl.get("spec") or {}, md["uid"]), labels=labels,
                                              ns=md["namespace"], spec=tmpl.get("spec") or {}))
                    changed.add(md["namespace"])
                    if not parallel:
                        break
            replicasets = self.store.list("apps", "replicasets")
            for plural, kind, items in (("replicasets", "ReplicaSet", replicasets),
                                        ("statefulsets", "StatefulSet", self.store.list("apps", "statefulsets")),
                                        ("deployments", "Deployment", self.store.list("apps", "deployments"))):
                spec = self.spec_for("apps", "v1", plural)
                for o in items:
                    st = self.counted_status(kind, o, pods, replicasets)
                    if st != o.get("status"):
                        o["status"] = st
                        self.store.put(self.key(spec, o["metadata"]["namespace"], o["metadata"]["name"]), o)
                        if kind == "ReplicaSet":
                            replicasets = [o if r["metadata"]["uid"] == o["metadata"]["uid"] else r
                                           for r in replicasets]
            for ns in changed:
                self.refresh_budgets(ns)

    def deployment_pods(self, dep):
        """A new Deployment's ReplicaSet and its pods, spread over the schedulable nodes (the deployment and
        replicaset controllers and the scheduler in one step; the pods then start: sync_pods). Later changes of scale
        or template are not followed; a deleted pod comes back through replace_pod."""
        ns = dep["metadata"]["namespace"]
        sp = dep.get("spec", {})
        tmpl_labels = (sp.get("template", {}).get("metadata", {}) or {}).get("labels") or {}
        rs_spec = self.spec_for("apps", "v1", "replicasets")
        rs_name = "%s-%s" % (dep["metadata"]["name"], dep["metadata"]["uid"].replace("-", "")[:10])
        rs = self.create(rs_spec, ns, {"metadata": {"name": rs_name, "labels": dict(tmpl_labels),
                                                    "ownerReferences": [self.owner(dep, "Deployment")]},
                                       "spec": {"replicas": sp.get("replicas", 1), "selector": sp.get("selector", {}),
                                                "template": sp.get("template", {})}}, hooks=False)
        self.rs_pods(rs)

    def rs_pods(self, rs):
        """A new ReplicaSet's pods from its template, each where the scheduler puts it (choose_node)."""
        sp = rs.get("spec", {})
        tmpl = sp.get("template") or {}
        for _ in range(int(sp.get("replicas", 1) or 0)):
            self.make_pod("%s-%s" % (rs["metadata"]["name"], rand_str(5)), self.owner(rs, "ReplicaSet"),
                          self.choose_node(tmpl.get("spec") or {}, rs["metadata"]["uid"]),
                          labels=dict((tmpl.get("metadata") or {}).get("labels") or {}),
                          ns=rs["metadata"]["namespace"], spec=tmpl.get("spec") or {})
        self.sync_workloads()

    def budget_status(self, pdb):
        """The disruption controller's arithmetic: the pods the budget selects in its namespace (expectedPods: those
        that exist, not the owner's scale), the Running and Ready ones (currentHealthy), what minAvailable or
        maxUnavailable asks (desiredHealthy; a percentage rounds up) and the difference (disruptionsAllowed)."""
        ns = pdb["metadata"]["namespace"]
        sp = pdb.get("spec", {})
        sel = sp.get("selector")
        pods = [p for p in self.store.list("", "pods", ns)
                if sel is not None and label_selector_matches(sel, p["metadata"].get("labels"))
                and not p["metadata"].get("deletionTimestamp")]
        expected = len(pods)
        healthy = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running" and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions", [])))

        def scaled(v):
            if isinstance(v, str) and v.endswith("%"):
                return -(-int(v[:-1]) * expected // 100)
            return int(v)
        if "minAvailable" in sp:
            desired = scaled(sp["minAvailable"])
        elif "maxUnavailable" in sp:
            desired = max(0, expected - scaled(sp["maxUnavailable"]))
        else:
            desired = expected
        allowed = max(0, healthy - desired)
        return {"observedGeneration": pdb["metadata"].get("generation", 1), "disruptionsAllowed": allowed,
                "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                "conditions": [{"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
                                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": "",
                                "observedGeneration": pdb["metadata"].get("generation", 1),
                                "lastTransitionTime": rfc3339()}]}

    def refresh_budgets(self, ns):
        spec = self.spec_for("policy", "v1", "poddisruptionbudgets")
        with self.lock:
            for pdb in self.store.list("policy", "poddisruptionbudgets", ns):
                st = self.budget_status(pdb)
                old = dict(pdb.get("status") or {}, conditions=None)
                if dict(st, conditions=None) != old:
                    pdb["status"] = st
                    self.store.put(self.key(spec, ns, pdb["metadata"]["name"]), self.typed(spec, pdb))

    def evict(self, ns, name):
        """POST pods/NAME/eviction as the API server answers it: 404 for a pod that is gone, 429 while a budget that
        selects the pod allows no disruption, 500 for a pod under two budgets, else the pod is deleted (at once: no
        grace period) and 201. A pod that is not Running (Pending, Succeeded, Failed) is deleted whatever the budget."""
        spec = self.pod_spec()
        with self.lock:
            pod = self.get(spec, ns, name)
            if pod.get("status", {}).get("phase") == "Running":
                budgets = [b for b in self.store.list("policy", "poddisruptionbudgets", ns)
                           if b.get("spec", {}).get("selector") is not None
                           and label_selector_matches(b["spec"]["selector"], pod["metadata"].get("labels"))]
                if len(budgets) > 1:
                    raise HttpError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                    "eviction subresource does not support.")
                if budgets:
                    st = self.budget_status(budgets[0])
                    if st["disruptionsAllowed"] <= 0:
                        raise HttpError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                        "disruption budget.", {"causes": [{
                                            "reason": "DisruptionBudget",
                                            "message": "The disruption budget %s needs %d healthy pods and has %d "
                                            "currently" % (budgets[0]["metadata"]["name"], st["desiredHealthy"],
                                                           st["currentHealthy"])}]})
            self.delete(spec, ns, name)
        self.refresh_budgets(ns)

    def sign_cluster_info(self):
        """kubeadm's bootstrap signer: cluster-info carries a detached JWS of its kubeconfig per signing token."""
        cm_spec = self.spec_for("", "v1", "configmaps")
        cm = self.store.get(self.key(cm_spec, "kube-public", "cluster-info"))
        if cm is None:
            return
        data = {k: v for k, v in cm.get("data", {}).items() if not k.startswith("jws-kubeconfig-")}
        for sec in self.store.list("", "secrets", "kube-system"):
            if sec.get("type") != "bootstrap.kubernetes.io/token":
                continue
            d = {k: unb64(v) for k, v in sec.get("data", {}).items()}
            if d.get("usage-bootstrap-signing") == "true" and d.get("token-id"):
                data["jws-kubeconfig-" + d["token-id"]] = jws_detached(data["kubeconfig"], d["token-id"],
                                                                       d["token-secret"])
        if data != cm.get("data"):
            cm["data"] = data
            self.store.put(self.key(cm_spec, "kube-public", "cluster-info"), cm)

    def sign_csr(self, csr):
        """The CSR approver and signer of kube-controller-manager, for kubelet client certificates."""
        sp = csr.get("spec", {})
        if sp.get("signerName") != "kubernetes.io/kube-apiserver-client-kubelet":
            return
        pem = unb64(sp.get("request", ""))
        cert = sign_csr(pem, self.client_ca_crt, self.client_ca_key, client=True)
        csr["status"] = {"certificate": b64(cert), "conditions": [
            {"type": "Approved", "status": "True", "reason": "AutoApproved",
             "message": "Auto approving kubelet client certificate after SubjectAccessReview.",
             "lastUpdateTime": rfc3339(), "lastTransitionTime": rfc3339()}]}
        self.store.put(self.key(self.spec_for("certificates.k8s.io", "v1", "certificatesigningrequests"), "",
                                csr["metadata"]["name"]), csr)

    # -- node lifecycle: silent nodes go NotReady, like the node controller does after its grace period
    def monitor(self):
        """Leases live in memory: a restarted server knows none, and, as kube-controller-manager after a restart,
        gives every node the grace from its own start before it counts a missing heartbeat."""
        nodes_spec = self.spec_for("", "v1", "nodes")
        since = now_utc()
        while True:
            time.sleep(1)
            try:
                self.sync_workloads()
            except Exception as e:  # the controllers must outlive any one bad object
                self.log.error("workload controllers: %s" % e)
            try:
                for node in self.store.list("", "nodes"):
                    name = node["metadata"]["name"]
                    lease = self.store.get("coordination.k8s.io/leases/kube-node-lease/" + name)
                    renew = (lease or {}).get("spec", {}).get("renewTime")
                    fresh = renew and (now_utc() - parse_time(renew[:19] + "Z")).total_seconds() < NODE_GRACE
                    conds = node.get("status", {}).get("conditions", [])
                    ready = next((c for c in conds if c["type"] == "Ready"), None)
                    if not fresh and ready and ready["status"] != "Unknown":
                        created = max(parse_time(node["metadata"]["creationTimestamp"]), since)
                        if (now_utc() - created).total_seconds() < NODE_GRACE and not renew:
                            continue
                        ready.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                                      "message": "Kubelet stopped posting node status.",
                                      "lastTransitionTime": rfc3339()})
                        taints = [t for t in node["spec"].get("taints", [])
                                  if t["key"] != "node.kubernetes.io/unreachable"]
                        taints += [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule",
                                    "timeAdded": rfc3339()},
                                   {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                    "timeAdded": rfc3339()}]
                        node["spec"]["taints"] = taints
                        self.store.put(self.key(nodes_spec, "", name), node)
            except Exception as e:  # the monitor must outlive any one bad object
                self.log.error("node monitor: %s" % e)


def jws_detached(payload, kid, secret):
    def enc(b):
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    header = enc(json.dumps({"alg": "HS256", "kid": kid}, separators=(",", ":")).encode())
    body = enc(payload.encode())
    sig = enc(hmac.new(secret.encode(), ("%s.%s" % (header, body)).encode(), hashlib.sha256).digest())
    return "%s..%s" % (header, sig)


def jws_verify(detached, payload, secret):
    header, _, sig = detached.partition("..")
    want = jws_detached(payload, json.loads(base64.urlsafe_b64decode(header + "==")).get("kid", ""), secret)
    return hmac.compare_digest(want, detached)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = ""
    sys_version = ""
    cluster = None   # set per server class
    extra = None     # engine-specific routes: fn(handler, method, path, query) -> True when handled

    def setup(self):
        self.request.settimeout(30)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            self.close_connection = True
        self.request.settimeout(None)
        super().setup()

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj, ctype="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        ctype = self.headers.get("Content-Type", "")
        if "protobuf" in ctype:
            if self.command == "DELETE":  # newer kubectls send DeleteOptions as protobuf; none of them matter here
                return None
            raise HttpError(415, "UnsupportedMediaType", "the stand-in speaks JSON only")
        try:
            return yaml.safe_load(raw) if "yaml" in ctype else json.loads(raw)
        except ValueError as e:
            raise HttpError(400, "BadRequest", "the object provided is unrecognized: %s" % e) from None

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def ident(self):
        try:
            cert = self.request.getpeercert()
        except (ValueError, ssl.SSLError):
            cert = None
        return self.cluster.authenticate(cert, self.headers.get("Authorization", ""))

    def dispatch(self, method):
        u = urllib.parse.urlsplit(self.path)
        path = u.path.rstrip("/") or "/"
        query = dict(urllib.parse.parse_qsl(u.query))
        try:
            self.route(method, path, query)
        except HttpError as e:
            self.send_json(e.code, e.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug answers 500 with the reason, as the apiserver does, and the server lives on
            self.cluster.log.error("%s %s: %r" % (method, self.path, e))
            self.send_json(500, status_obj(500, "InternalError", "Internal error occurred: %s" % e))

    def route(self, method, path, query):
        c = self.cluster
        if path in ("/healthz", "/livez", "/readyz") and method == "GET":
            return self.send_json(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version" and method == "GET":
            return self.send_json(200, c.version_info())
        if path == "/ping" and c.engine != "upstream":
            return self.send_json(200, b"pong", "text/plain")
        ident = self.ident()
        if self.extra and self.extra(self, method, path, query, ident):
            return None
        if ident is None and not (method == "GET" and path == "/api/v1/namespaces/kube-public/configmaps/cluster-info"):
            raise HttpError(401, "Unauthorized", "Unauthorized")
        if path == "/v1-standin/state" and ident and not {"system:nodes", "system:bootstrappers"} & set(ident[1]) \
                and not ident[0].startswith("supervisor:"):
            if method == "GET":
                return self.send_json(200, {"entries": c.store.snapshot(int(query.get("since") or 0))})
            if method == "POST":
                c.store.merge((self.body() or {}).get("entries", {}))
                return self.send_json(200, {})
        if path == "/api" and method == "GET":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "%s:%d" % (c.self_ip, c.api_port)}]})
        if path == "/apis" and method == "GET":
            return self.send_json(200, c.groups())
        if path == "/openapi/v2" and method == "GET":
            if "protobuf" in self.headers.get("Accept", ""):
                return self.send_json(200, openapi_v2_protobuf(c.version),
                                      "application/octet-stream")
            return self.send_json(200, {"swagger": "2.0", "info": {"title": "Kubernetes", "version": c.version},
                                        "paths": {}, "definitions": {}})
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise HttpError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            disc = c.discovery(group, version)
            if not disc["resources"]:
                raise HttpError(404, "NotFound", "the server could not find the requested resource")
            return self.send_json(200, disc)
        self.resource(method, group, version, rest, query, ident)

    def resource(self, method, group, version, rest, query, ident):
        c = self.cluster
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
            spec = c.spec_for(group, version, rest[0])
            if spec is None or not spec["namespaced"]:
                raise HttpError(404, "NotFound", "the server could not find the requested resource")
        else:
            spec = c.spec_for(group, version, rest[0])
            if spec is None:
                raise HttpError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if spec["namespaced"] is False:
            ns = None
        if ident is None:  # anonymous: only kubeadm's cluster-info
            o = c.get(spec, ns, name)
            return self.send_json(200, o)
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}[method]
        if query.get("watch") in ("1", "true"):
            verb = "watch"
        c.authorize(ident, verb, spec, ns, name)
        accept = self.headers.get("Accept", "")
        table = "as=Table" in accept
        if verb == "watch":
            return self.watch(spec, ns, name, query)
        if method == "GET" and not name:
            items = c.list(spec, ns, query)
            if table:
                return self.send_json(200, table_for(spec["kind"], items, c.store.rv))
            gv = spec["version"] if not group else group + "/" + spec["version"]
            return self.send_json(200, {"kind": spec["kind"] + "List", "apiVersion": gv,
                                        "metadata": {"resourceVersion": str(c.store.rv)}, "items": items})
        if method == "GET":
            o = c.get(spec, ns, name)
            return self.send_json(200, table_for(spec["kind"], [o], c.store.rv) if table and not sub else o)
        body = self.body()
        if method == "POST" and sub == "eviction" and spec["plural"] == "pods":
            c.evict(ns, name)
            return self.send_json(201, status_obj(201, "", ""))
        if method == "POST":
            if name:
                raise HttpError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                "resource")
            if not isinstance(body, dict):
                raise HttpError(400, "BadRequest", "the object provided is unrecognized")
            return self.send_json(201, c.create(spec, ns, body))
        if not name:
            raise HttpError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if method == "PUT":
            return self.send_json(200, c.update(spec, ns, name, body or {}, sub))
        if method == "PATCH":
            return self.send_json(200, c.patch(spec, ns, name, self.headers.get("Content-Type", ""), body, sub))
        if method == "DELETE":
            return self.send_json(200, c.delete(spec, ns, name))
        raise HttpError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def watch(self, spec, ns, name, query):
        """Watch by polling the store: ADDED/MODIFIED/DELETED lines, chunked, until timeoutSeconds."""
        c = self.cluster
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fsel = query.get("fieldSelector", "")
        if name:
            fsel = (fsel + "," if fsel else "") + "metadata.name=" + name
        q = dict(query, fieldSelector=fsel)
        since = int(query.get("resourceVersion") or 0)
        deadline = time.time() + float(query.get("timeoutSeconds") or 1800)
        seen = {}
        first = True
        try:
            while time.time() < deadline:
                items = {o["metadata"]["name"] + "/" + o["metadata"].get("namespace", ""): o
                         for o in c.list(spec, ns, q)}
                events = []
                for k, o in items.items():
                    rv = int(o["metadata"]["resourceVersion"])
                    if k not in seen and (not first or rv > since or since == 0):
                        events.append(("ADDED", o))
                    elif k in seen and seen[k] != rv:
                        events.append(("MODIFIED", o))
                for k in set(seen) - set(items):
                    events.append(("DELETED", {"metadata": {"name": k.split("/")[0]}}))
                seen = {k: int(o["metadata"]["resourceVersion"]) for k, o in items.items()}
                first = False
                for typ, o in events:
                    c.typed(spec, o)
                    line = (json.dumps({"type": typ, "object": o}) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.5)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass
        self.close_connection = True


class TLSServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # many agents connect at once after a restart

    def __init__(self, addr, handler, ctx):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        super().__init__(addr, handler)
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)


def serve(cluster, extra, addrs, crt, key, client_ca_crt):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(P(crt), P(key))
    ctx.load_verify_locations(P(client_ca_crt))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    handler = type("BoundHandler", (Handler,), {"cluster": cluster, "extra": staticmethod(extra) if extra else None})
    servers = []
    for addr in addrs:
        try:
            srv = TLSServer(addr, handler, ctx)
        except OSError as e:
            cluster.log.fatal("starting kubernetes: preparing server: listen tcp %s:%d: bind: %s"
                              % (addr[0], addr[1], go_errno(e)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    return servers


# ---------------------------------------------------------------- the node side: a kubelet's registration and heartbeat

def os_image():
    text = read_file("/etc/os-release", "") or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return m.group(1) if m else "Linux"


def parse_taint(s):
    m = re.match(r"^([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$", s.strip())
    if not m:
        raise ValueError("invalid taint spec: %s" % s)
    t = {"key": m.group(1), "effect": m.group(3)}
    if m.group(2):
        t["value"] = m.group(2)
    return t


def parse_labels(items):
    out = {}
    for it in items:
        for part in str(it).split(","):
            if "=" in part:
                k, v = part.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def microtime():
    return now_utc().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Registers a node (labels and taints only at creation, as the kubelet does), then renews its lease and keeps its
    status; a deleted node is not re-created until the agent restarts."""

    def __init__(self, engine, name, ip, version, labels, taints, clients, log, network_ready=None, images=()):
        self.engine, self.name, self.ip, self.version = engine, name, ip, version
        self.labels, self.taints = labels, taints
        self.clients = clients  # list of Client, tried in turn (the agent's load balancer over servers)
        self.log = log
        self.network_ready = network_ready or (lambda client: True)
        self.images = list(images)
        self.deleted = False

    def call(self, method, path, body=None, ctype="application/json"):
        last = None
        for _ in range(len(self.clients)):
            c = self.clients[0]
            try:
                return c.call(method, path, body, ctype)
            except ApiError:
                raise
            except (OSError, urllib.error.URLError, ssl.SSLError) as e:
                last = e
                self.clients.append(self.clients.pop(0))
        raise last

    def conditions(self, ready, reason, message):
        t = rfc3339()

        def cond(typ, status, why, msg):
            return {"type": typ, "status": status, "lastHeartbeatTime": t, "lastTransitionTime": t,
                    "reason": why, "message": msg}
        return [cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                     "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True" if ready else "False", reason, message)]

    def ready_state(self):
        if self.network_ready(self):
            return True, "KubeletReady", "kubelet is posting ready status"
        return False, "KubeletNotReady", ("container runtime network not ready: NetworkReady=false "
                                          "reason:NetworkPluginNotReady message:Network plugin returns error: "
                                          "cni plugin not initialized")

    def status(self):
        ready, reason, msg = self.ready_state()
        runtime = {"rke2": "containerd://2.1.5-k3s1", "k3s": "containerd://2.1.5-k3s1"}.get(self.engine,
                                                                                             "containerd://1.6.20")
        cap = {"cpu": str(os.cpu_count() or 1), "memory": "%dKi" % (os.sysconf("SC_PAGE_SIZE")
                                                                     * os.sysconf("SC_PHYS_PAGES") // 1024),
               "pods": "110", "ephemeral-storage": "20Gi"}
        return {"addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.name}],
                "conditions": self.conditions(ready, reason, msg), "capacity": cap, "allocatable": dict(cap),
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": [{"names": [i], "sizeBytes": 0} for i in self.images],
                "nodeInfo": {"kubeletVersion": self.version, "kubeProxyVersion": self.version,
                             "containerRuntimeVersion": runtime, "osImage": os_image(),
                             "kernelVersion": os.uname().release, "operatingSystem": "linux",
                             "architecture": "amd64", "machineID": (read_file("/etc/machine-id", "") or "").strip(),
                             "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.name)),
                             "bootID": (read_file("/proc/sys/kernel/random/boot_id", "") or "").strip()}}

    def default_labels(self):
        lab = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
               "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
        if self.engine != "upstream":
            lab["node.kubernetes.io/instance-type"] = self.engine
        return lab

    def register(self):
        labels = dict(self.default_labels(), **self.labels)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"taints": self.taints} if self.taints else {}, "status": self.status()}
        if self.engine != "upstream":
            node["spec"]["providerID"] = "%s://%s" % (self.engine, self.name)
        while True:
            try:
                self.call("POST", "/api/v1/nodes", node)
                self.log.info("Successfully registered node %s" % self.name)
                return
            except ApiError as e:
                if e.code == 409:
                    cur = self.call("GET", "/api/v1/nodes/" + self.name)
                    patch = {"metadata": {"labels": self.default_labels()}, "status": self.status()}
                    self.call("PATCH", "/api/v1/nodes/%s/status" % self.name, patch,
                              "application/strategic-merge-patch+json")
                    self.call("PATCH", "/api/v1/nodes/" + self.name, {"metadata": patch["metadata"]},
                              "application/strategic-merge-patch+json")
                    self.log.info("Node %s already registered (uid %s), status updated"
                                  % (self.name, cur["metadata"]["uid"]))
                    return
                self.log.error("Unable to register node with API server: %s" % e)
            except (OSError, urllib.error.URLError) as e:
                self.log.error("Unable to register node with API server: %s" % e)
            time.sleep(2)

    def beat(self):
        try:
            node = self.call("GET", "/api/v1/nodes/" + self.name)
        except ApiError as e:
            if e.code == 404:
                if not self.deleted:
                    self.log.error('Error updating node status, will retry: error getting node "%s": nodes "%s" not '
                                   'found' % (self.name, self.name))
                self.deleted = True
                return
            raise
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                 "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": microtime()}}
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
        try:
            self.call("PUT", path + self.name, lease)
        except ApiError as e:
            if e.code != 404:
                raise
            self.call("POST", path[:-1], lease)
        ready, _, _ = self.ready_state()
        cur = next((c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})
        ni = node.get("status", {}).get("nodeInfo", {})
        if cur.get("status") != ("True" if ready else "False") or ni.get("kubeletVersion") != self.version:
            self.call("PATCH", "/api/v1/nodes/%s/status" % self.name, {"status": self.status()},
                      "application/strategic-merge-patch+json")
        if any(t.get("key") == "node.kubernetes.io/unreachable" for t in node.get("spec", {}).get("taints", [])):
            # the node controller lifts these once the kubelet posts status again
            taints = [t for t in node.get("spec", {}).get("taints", [])
                      if t.get("key") != "node.kubernetes.io/unreachable"]
            self.call("PATCH", "/api/v1/nodes/" + self.name, {"spec": {"taints": taints or None}},
                      "application/merge-patch+json")

    def register_then_run(self):
        self.register()
        self.run()

    def refresh_servers(self, port):
        """rke2/k3s agents follow the apiserver endpoints: every server node becomes one to fail over to."""
        sel = urllib.parse.quote("node-role.kubernetes.io/control-plane")
        items = self.call("GET", "/api/v1/nodes?labelSelector=" + sel).get("items", [])
        have = {c.server for c in self.clients}
        proto = self.clients[0]
        for n in items:
            for a in n.get("status", {}).get("addresses", []):
                url = "https://%s:%d" % (a["address"], port)
                if a["type"] == "InternalIP" and url not in have:
                    c = copy.copy(proto)
                    c.server = url
                    self.clients.append(c)
                    have.add(url)
                    self.log.info("Adding server to load balancer: %s" % url)

    def run(self, api_port=None):
        while True:
            try:
                if api_port:
                    self.refresh_servers(api_port)
                self.beat()
            except Exception as e:  # a heartbeat that dies silently would make a live node NotReady
                self.log.error("Failed to update lease: %s" % getattr(e, "reason", e))
            time.sleep(HEARTBEAT)


# ---------------------------------------------------------------- image archives (engines' auto-import, and ctr)

IMAGE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tzst", ".tar.bz2", ".tar.lz4")


def image_refs(path):
    """Image names in a docker-archive (manifest.json) or OCI layout (index.json) tarball; raises when malformed."""
    if path.endswith((".zst", ".zstd", ".tzst", ".lz4")):
        tool = ["zstd", "-dc", path] if not path.endswith(".lz4") else ["lz4", "-dc", path]
        if not shutil.which(tool[0]):
            raise ValueError("%s is needed to read %s" % (tool[0], path))
        proc = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        tf = tarfile.open(fileobj=proc.stdout, mode="r|")
    else:
        proc = None
        tf = tarfile.open(path, mode="r:*")
    found = {}
    try:
        for m in tf:
            base = m.name.lstrip("./")
            if base in ("manifest.json", "index.json") and m.isfile():
                found[base] = json.loads(tf.extractfile(m).read())
    except (tarfile.TarError, ValueError, EOFError) as e:
        raise ValueError("%s: not a valid image archive: %s" % (path, e)) from None
    finally:
        tf.close()
        if proc:
            proc.wait()
    refs = []
    if "manifest.json" in found:
        for ent in found["manifest.json"]:
            refs += ent.get("RepoTags") or []
    elif "index.json" in found:
        for m in found["index.json"].get("manifests", []):
            ann = m.get("annotations", {})
            ref = ann.get("io.containerd.image.name") or ann.get("org.opencontainers.image.ref.name")
            if ref:
                refs.append(ref)
    else:
        raise ValueError("%s: not a valid image archive: no manifest.json or index.json" % path)
    return refs


def record_images(record, path, refs):
    data = json.loads(read_file(record, "{}") or "{}")
    st = os.stat(P(path)) if os.path.exists(P(path)) else os.stat(path)
    for r in refs:
        data[r] = {"source": path, "size": st.st_size}
    write_file(record, json.dumps(data, indent=1, sort_keys=True), 0o644)


def import_image_dir(engine, data_dir, log):
    """rke2/k3s import every tarball in agent/images at start; .cache.json skips the ones already imported."""
    images = data_dir + "/agent/images"
    cache_path = images + "/.cache.json"
    cache = json.loads(read_file(cache_path, "{}") or "{}")
    record = data_dir + "/agent/containerd/standin-images.json"
    changed = False
    for f in sorted(glob.glob(P(images) + "/*")):
        if not f.endswith(IMAGE_SUFFIXES):
            continue
        path = f[len(ROOT):] if ROOT else f
        st = os.stat(f)
        key = {"size": st.st_size, "modTime": int(st.st_mtime)}
        if cache.get(path) == key:
            continue
        log.info("Importing images from %s" % path)
        t0 = time.time()
        try:
            refs = image_refs(f)
        except (ValueError, OSError) as e:
            log.error("Unable to import %s: %s" % (path, e))
            continue
        record_images(record, path, refs)
        cache[path] = key
        changed = True
        log.info("Imported images from %s in %s" % (path, "%.3fs" % (time.time() - t0)))
    if changed:
        write_file(cache_path, json.dumps(cache, sort_keys=True), 0o644)
    return sorted(json.loads(read_file(record, "{}") or "{}"))


# ---------------------------------------------------------------- rke2 and k3s

RANCHER = {
    "rke2": {"config": "/etc/rancher/rke2/config.yaml", "data": "/var/lib/rancher/rke2",
             "kubeconfig": "/etc/rancher/rke2/rke2.yaml", "supervisor": 9345, "api": 6443, "svc_ip": "10.43.0.1",
             "kubectl": "/var/lib/rancher/rke2/bin/kubectl", "env": "RKE2_"},
    "k3s": {"config": "/etc/rancher/k3s/config.yaml", "data": "/var/lib/rancher/k3s",
            "kubeconfig": "/etc/rancher/k3s/k3s.yaml", "supervisor": 6443, "api": 6443, "svc_ip": "10.43.0.1",
            "kubectl": "/usr/bin/kubectl", "env": "K3S_"},
}
LIST_FLAGS = {"tls-san", "node-label", "node-taint", "disable", "kube-apiserver-arg", "kubelet-arg",
              "kube-controller-manager-arg", "kube-scheduler-arg", "etcd-arg", "kube-proxy-arg", "node-external-ip",
              "cluster-cidr", "service-cidr", "node-ip"}
BOOL_FLAGS = {"cluster-init", "disable-network-policy", "disable-cloud-controller", "disable-kube-proxy",
              "selinux", "protect-kernel-defaults", "secrets-encryption", "debug", "write-kubeconfig-group",
              "embedded-registry", "disable-apiserver", "disable-scheduler", "disable-etcd", "prefer-bundled-bin",
              "flannel-ipv6-masq", "with-node-id", "enable-pprof", "docker", "rootless", "disable-helm-controller"}
KNOWN_KEYS = LIST_FLAGS | BOOL_FLAGS | {
    "server", "token", "token-file", "agent-token", "agent-token-file", "node-name", "data-dir", "config",
    "write-kubeconfig", "write-kubeconfig-mode", "advertise-address", "advertise-port", "bind-address",
    "https-listen-port", "supervisor-port", "cluster-dns", "cluster-domain", "cni", "flannel-backend",
    "audit-policy-file", "pod-security-admission-config-file", "private-registry", "system-default-registry",
    "default-runtime", "container-runtime-endpoint", "resolv-conf", "kubelet-path", "image-credential-provider-bin-dir",
    "image-credential-provider-config", "etcd-snapshot-schedule-cron", "etcd-snapshot-retention", "etcd-snapshot-dir",
    "etcd-expose-metrics", "datastore-endpoint", "profile", "ingress-controller", "service-node-port-range",
    "egress-selector-mode", "lb-server-port", "log", "alsologtostderr", "v", "vmodule", "node-name-from-cloud"}


def parse_flags(args):
    flags, positional = {}, []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            k, eq, v = a[2:].partition("=")
            if not eq:
                if k in BOOL_FLAGS:
                    v = True
                elif i + 1 < len(args):
                    i += 1
                    v = args[i]
                else:
                    v = ""
            if k in LIST_FLAGS:
                flags.setdefault(k, []).append(v)
            else:
                flags[k] = v
        else:
            positional.append(a)
        i += 1
    return flags, positional


def as_list(v):
    if v is None:
        return []
    if isinstance(v, list):
        out = []
        for x in v:
            out += [s for s in str(x).split(",") if s] if not isinstance(x, dict) else [x]
        return out
    return [s for s in str(v).split(",") if s]


def load_rancher_config(engine, flags, log):
    e = RANCHER[engine]
    path = flags.get("config") or os.environ.get(e["env"] + "CONFIG_FILE") or e["config"]
    cfg = {}
    try:
        files = [path] + sorted(glob.glob(P(path) + ".d/*.yaml"))
        for f in files:
            f = f[len(ROOT):] if ROOT and f.startswith(ROOT) else f
            data = load_yaml_file(f)
            if data is None:
                continue
            if not isinstance(data, dict):
                log.fatal("Error: failed to parse %s: not a map" % f)
            for k, v in data.items():
                if k.endswith("+"):
                    cfg[k[:-1]] = as_list(cfg.get(k[:-1])) + as_list(v)
                else:
                    cfg[k] = v
    except yaml.YAMLError as err:
        log.fatal("Error: failed to parse %s: %s" % (path, err))
    for k in list(cfg):
        if k not in KNOWN_KEYS:
            log.warn("Unknown flag --%s found in config.yaml, skipping\n" % k)
            del cfg[k]
    env = e["env"]
    for var, key in (("TOKEN", "token"), ("URL", "server"), ("TOKEN_FILE", "token-file"), ("NODE_NAME", "node-name"),
                     ("AGENT_TOKEN", "agent-token")):
        if os.environ.get(env + var):
            cfg[key] = os.environ[env + var]
    for k, v in flags.items():
        cfg[k] = as_list(cfg.get(k)) + v if k in LIST_FLAGS and k in ("node-label", "node-taint", "tls-san") else v
    return cfg


def parse_token(tok):
    """K10<ca sha256>::<user>:<password>, or a bare password."""
    m = re.match(r"^K10([0-9a-f]{64})::([^:]+):(.+)$", tok or "")
    if m:
        return m.group(1), m.group(2), m.group(3)
    return None, None, tok


def token_from(cfg, key):
    if cfg.get(key + "-file"):
        text = read_file(cfg[key + "-file"])
        if text is None:
            return None
        return text.strip()
    v = cfg.get(key)
    return str(v).strip() if v not in (None, "") else None


def check_engine_files(engine, cfg, server, log):
    """Files the real engine reads at start and dies on when they are missing or not YAML: registries.yaml
    (optional), and on servers the audit policy and the pod security admission config when configured."""
    reg = str(cfg.get("private-registry") or "/etc/rancher/%s/registries.yaml" % engine)
    keys = [("private-registry", reg, False)]
    if server:
        keys += [(k, str(cfg[k]), True) for k in ("audit-policy-file", "pod-security-admission-config-file")
                 if cfg.get(k)]
    for key, path, required in keys:
        text = read_file(path)
        if text is None:
            if required:
                log.fatal("Error: %s: open %s: no such file or directory" % (key, path))
            continue
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            log.fatal("Error: failed to load %s %s: %s" % (key, path, str(e).replace("\n", " ")))
        if data is not None and not isinstance(data, dict):
            log.fatal("Error: failed to load %s %s: not a map" % (key, path))


class RancherNode:
    """What rke2 and k3s share: naming, paths, the node password, joining a server, the embedded agent."""

    def __init__(self, engine, cfg, log):
        self.engine, self.cfg, self.log = engine, cfg, log
        self.e = RANCHER[engine]
        self.data = str(cfg.get("data-dir") or self.e["data"])
        self.version = engine_version(engine)
        self.name = str(cfg.get("node-name") or hostname()).lower()
        ips = as_list(cfg.get("node-ip"))
        self.ip = ips[0] if ips else first_private_address()
        self.api_port = int(cfg.get("https-listen-port") or self.e["api"])
        self.sup_port = self.api_port if engine == "k3s" else int(cfg.get("supervisor-port") or self.e["supervisor"])
        try:
            self.taints = [parse_taint(t) for t in as_list(cfg.get("node-taint"))]
        except ValueError as err:
            log.fatal("Error: %s" % err)
        self.labels = parse_labels(as_list(cfg.get("node-label")))

    def node_password(self):
        path = "/etc/rancher/node/password"
        pw = read_file(path)
        if not pw:
            pw = rand_str(32, string.hexdigits.lower()[:16])
            write_file(path, pw + "\n", 0o600)
        return pw.strip()

    def fetch_credentials(self, url, pw, user):
        """The agent side of the supervisor: CA (checked against the token's hash), then kubelet credentials."""
        token = token_from(self.cfg, "token")
        ca_hash, _, _ = parse_token(token)
        client = Client(url, basic=(user, pw))
        while True:
            try:
                ca = client.raw("GET", "/cacerts").decode()
                break
            except ApiError as err:
                self.log.fatal("Failed to validate connection to cluster at %s: failed to get CA certs: %s"
                               % (url, err))
            except (OSError, urllib.error.URLError) as err:
                self.log.error("failed to get CA certs: Get \"%s/cacerts\": %s" % (url, dial_error(url, err)))
                time.sleep(2)
        got = hashlib.sha256(ca.encode()).hexdigest()
        if ca_hash and got != ca_hash:
            self.log.fatal("Failed to validate connection to cluster at %s: token CA hash does not match the Cluster "
                           "CA certificate hash: %s != %s" % (url, ca_hash, got))
        sec = Client(url, ca_pem=ca, basic=(user, pw))
        sec.headers[self.engine + "-Node-Name"] = self.name
        sec.headers[self.engine + "-Node-Password"] = self.node_password()
        while True:
            try:
                pem = sec.raw("GET", "/v1-%s/client-kubelet.crt" % self.engine).decode()
                conf = json.loads(sec.raw("GET", "/v1-%s/config" % self.engine))
                break
            except ApiError as err:
                if err.code == 401:
                    self.log.fatal("Failed to validate connection to cluster at %s: %s" % (url, err))
                self.log.info("Waiting to retrieve agent configuration; server is not ready: %s"
                              % (err.body.decode(errors="replace").strip() or err))
            except (OSError, urllib.error.URLError) as err:
                self.log.info("Waiting to retrieve agent configuration; server is not ready: %s" % dial_error(url, err))
            time.sleep(2)
        blocks = re.findall(r"-----BEGIN [^-]+-----.*?-----END [^-]+-----\n?", pem, re.S)
        crt = "".join(b for b in blocks if "PRIVATE KEY" not in b)
        key = "".join(b for b in blocks if "PRIVATE KEY" in b)
        agent = self.data + "/agent/"
        write_file(agent + "server-ca.crt", ca, 0o644)
        write_file(agent + "client-kubelet.crt", crt, 0o644)
        write_file(agent + "client-kubelet.key", key, 0o600)
        return ca, crt, key, conf

    def start_agent(self, ca, crt, key, api_urls, extra_labels=None, images=()):
        clients = [Client(u, ca_pem=ca, crt_pem=crt, key_pem=key) for u in api_urls]
        labels = dict(extra_labels or {}, **self.labels)
        agent = NodeAgent(self.engine, self.name, self.ip, self.version, labels, self.taints, clients, self.log,
                          images=images)
        agent.register()
        threading.Thread(target=agent.run, args=(self.api_port,), daemon=True).start()
        return agent


def on_term(flush=None):
    def handler(signum, frame):
        if flush:
            try:
                flush()
            except Exception:  # exiting anyway; a failed last save must not hang the stop
                pass
        os._exit(0)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def rancher_agent(engine, cfg, log):
    n = RancherNode(engine, cfg, log)
    url = cfg.get("server")
    token = token_from(cfg, "token")
    if not url:
        log.fatal("Error: --server is required")
    if not token:
        log.fatal("Error: --token is required")
    on_term()
    log.info("Starting %s agent %s (%s)" % (engine, n.version, commit_of(n.version, 8)))
    check_engine_files(engine, cfg, False, log)
    images = import_image_dir(engine, n.data, log)
    _, user, pw = parse_token(token)
    ca, crt, key, conf = n.fetch_credentials(str(url).rstrip("/"), pw, "node" if user != "server" else "server")
    n.start_agent(ca, crt, key, conf["apiServers"], images=images)
    sd_notify("READY=1")
    log.info("%s agent is up and running" % engine)
    while True:
        time.sleep(3600)


def server_sans(cfg, name, ip, svc_ip, extra=()):
    sans = {"localhost", "127.0.0.1", "::1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local", svc_ip, name, ip, hostname()}
    sans |= {str(s) for s in as_list(cfg.get("tls-san"))} | set(extra)
    return sans


def listen_addrs(ip, port, bind=None):
    """The node's private address, plus loopback where the admin kubeconfig points (unless the node *is* on
    loopback, as in the stand-in's own tests, where 127.0.0.1 may belong to another node)."""
    addrs = [(bind or ip, port)]
    if not (bind or ip).startswith("127.") and bind in (None, "", "0.0.0.0"):
        addrs.append(("127.0.0.1", port))
    return addrs


class PeerSync:
    """Servers keep the same state: each pulls every other server's store once a second and merges it."""

    def __init__(self, cluster, ca, crt, key, log, seeds=()):
        self.cluster, self.log = cluster, log
        self.ca, self.crt, self.key = ca, crt, key
        self.seeds = list(seeds)
        self.failing = set()
        self.pulled, self.pushed = {}, {}

    def peers(self):
        urls = set(self.seeds)
        for node in self.cluster.store.list("", "nodes"):
            labels = node["metadata"].get("labels", {})
            if "node-role.kubernetes.io/control-plane" in labels:
                for a in node.get("status", {}).get("addresses", []):
                    if a["type"] == "InternalIP" and a["address"] != self.cluster.self_ip:
                        urls.add("https://%s:%d" % (a["address"], self.cluster.api_port))
        return sorted(urls - {"https://%s:%d" % (self.cluster.self_ip, self.cluster.api_port)})

    def pull(self, url, full):
        """Pull the peer's changes and push ours: a server that joined is known to the others from its first push.
        Changes only, by stamp, with a full exchange now and then (stamps from another writer may be older)."""
        c = Client(url, ca_pem=self.ca, crt_pem=self.crt, key_pem=self.key)
        since = 0 if full else self.pulled.get(url, 0)
        got = c.call("GET", "/v1-standin/state?since=%d" % since, timeout=5)["entries"]
        self.cluster.store.merge(got)
        if got:
            self.pulled[url] = max(e["s"][0] for e in got.values())
        mark = time.time_ns()
        mine = self.cluster.store.snapshot(0 if full else self.pushed.get(url, 0))
        if mine:
            c.call("POST", "/v1-standin/state", {"entries": mine}, timeout=5)
        self.pushed[url] = mark - 2 * 10 ** 9

    def register_then_run(self):
        self.register()
        self.run()

    def run(self):
        rounds = 0
        while True:
            full = rounds % 30 == 0
            for url in self.peers():
                try:
                    self.pull(url, full or url in self.failing)
                    self.failing.discard(url)
                except Exception as e:  # a peer that is down or half up must not stop the sync
                    if url not in self.failing:
                        self.log.info("Peer %s unreachable: %s" % (url, getattr(e, "reason", e)))
                    self.failing.add(url)
            rounds += 1
            time.sleep(1)


def init_cluster_objects(cluster, svc_ip):
    ns_spec = cluster.spec_for("", "v1", "namespaces")
    for ns in DEFAULT_NAMESPACES:
        if cluster.store.get(cluster.key(ns_spec, None, ns)) is None:
            cluster.create(ns_spec, None, {"metadata": {"name": ns}})
    svc = cluster.spec_for("", "v1", "services")
    if cluster.store.get(cluster.key(svc, "default", "kubernetes")) is None:
        cluster.create(svc, "default", {"metadata": {"name": "kubernetes", "labels": {
            "component": "apiserver", "provider": "kubernetes"}}, "spec": {"clusterIP": svc_ip, "ports": [
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "type": "ClusterIP"}})
    cluster.workload_objects()


def apply_manifest_objects(cluster, docs, log, source):
    """The deploy controller's apply: create, or replace what the file says while keeping the object's identity."""
    for obj in docs:
        if not isinstance(obj, dict) or not obj.get("kind"):
            continue
        if obj["kind"] == "List":
            apply_manifest_objects(cluster, obj.get("items", []), log, source)
            continue
        spec = cluster.spec_by_kind(obj.get("apiVersion", ""), obj["kind"])
        if spec is None:
            log.error("Failed to process %s: no matches for kind \"%s\" in version \"%s\""
                      % (source, obj["kind"], obj.get("apiVersion")))
            continue
        ns = obj.get("metadata", {}).get("namespace") or ("kube-system" if spec["namespaced"] else None)
        name = obj.get("metadata", {}).get("name")
        try:
            if cluster.store.get(cluster.key(spec, ns, name)) is None:
                cluster.create(spec, ns, copy.deepcopy(obj))
            else:
                cluster.patch(spec, ns, name, "application/merge-patch+json", copy.deepcopy(obj))
        except HttpError as e:
            log.error("Failed to process %s: %s" % (source, e))


def deploy_manifests(cluster, data_dir, log):
    """rke2/k3s apply every file in server/manifests at start and when it changes; an Addon records each file."""
    seen = {}
    addon_spec = cluster.spec_for("k3s.cattle.io", "v1", "addons")
    while True:
        for f in sorted(glob.glob(P(data_dir + "/server/manifests") + "/*")):
            if not f.endswith((".yaml", ".yml", ".json")) or os.path.basename(f).startswith("."):
                continue
            try:
                with open(f, "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            digest = hashlib.sha256(raw).hexdigest()
            if seen.get(f) == digest:
                continue
            seen[f] = digest
            path = f[len(ROOT):] if ROOT else f
            name = re.sub(r"\.(ya?ml|json)$", "", os.path.basename(f))
            try:
                docs = list(yaml.safe_load_all(raw))
            except yaml.YAMLError as e:
                log.error("Failed to process %s: %s" % (path, e))
                continue
            apply_manifest_objects(cluster, docs, log, path)
            addon = {"metadata": {"name": name, "namespace": "kube-system"},
                     "spec": {"source": path, "checksum": digest}}
            if cluster.store.get(cluster.key(addon_spec, "kube-system", name)) is None:
                cluster.create(addon_spec, "kube-system", addon)
            else:
                cluster.patch(addon_spec, "kube-system", name, "application/merge-patch+json", addon)
            log.info("Applied manifest %s" % path)
        time.sleep(5)


def rancher_server(engine, cfg, log):
    n = RancherNode(engine, cfg, log)
    e = n.e
    tls = n.data + "/server/tls/"
    on_term()
    log.info("Starting %s %s (%s)" % (engine, n.version, commit_of(n.version, 8)))
    check_engine_files(engine, cfg, True, log)
    join = cfg.get("server")
    token = token_from(cfg, "token")
    if cfg.get("token-file") and token is None:
        log.fatal("Error: failed to read token file %s" % cfg["token-file"])
    have_ca = os.path.exists(P(tls + "server-ca.crt"))
    state = {}
    if join and not have_ca:
        if not token:
            log.fatal("Error: --token is required when joining a cluster")
        ca_hash, _, pw = parse_token(token)
        url = str(join).rstrip("/")
        client = Client(url, basic=("server", pw))
        while True:
            try:
                boot = client.call("GET", "/v1-%s/server-bootstrap" % engine, timeout=30)
                break
            except ApiError as err:
                log.fatal("starting kubernetes: preparing server: failed to bootstrap cluster data: %s" % err)
            except (OSError, urllib.error.URLError) as err:
                log.info("Waiting to bootstrap cluster data from %s: %s" % (url, dial_error(url, err)))
                time.sleep(2)
        got = hashlib.sha256(boot["files"]["server-ca.crt"].encode()).hexdigest()
        if ca_hash and got != ca_hash:
            log.fatal("starting kubernetes: preparing server: token CA hash does not match the Cluster CA "
                      "certificate hash: %s != %s" % (ca_hash, got))
        for fname, content in boot["files"].items():
            write_file(tls + fname, content, 0o600 if fname.endswith(".key") else 0o644)
        state = boot["state"]
        stored = boot["token"]
        agent_stored = boot["agent-token"]
    else:
        if not have_ca:
            t = int(time.time())
            make_ca(tls + "server-ca.crt", tls + "server-ca.key", "%s-server-ca@%d" % (engine, t))
            make_ca(tls + "client-ca.crt", tls + "client-ca.key", "%s-client-ca@%d" % (engine, t))
        old = read_file(n.data + "/server/token")
        stored = parse_token(token)[2] if token else (parse_token(old.strip())[2] if old else rand_str(64))
        agent_tok = token_from(cfg, "agent-token")
        old_agent = read_file(n.data + "/server/agent-token")
        agent_stored = parse_token(agent_tok)[2] if agent_tok else (parse_token(old_agent.strip())[2]
                                                                    if old_agent else stored)
    ca_pem = read_file(tls + "server-ca.crt")
    ca_hash = hashlib.sha256(ca_pem.encode()).hexdigest()
    write_file(n.data + "/server/token", "K10%s::server:%s\n" % (ca_hash, stored), 0o600)
    write_file(n.data + "/server/agent-token", "K10%s::node:%s\n" % (ca_hash, agent_stored), 0o600)
    link = P(n.data + "/server/node-token")
    if not os.path.islink(link):
        if os.path.exists(link):
            os.unlink(link)
        os.symlink(P(n.data + "/server/token"), link)
    sans = server_sans(cfg, n.name, n.ip, e["svc_ip"])
    ensure_serving_cert(tls + "serving-kube-apiserver.crt", tls + "serving-kube-apiserver.key",
                        tls + "server-ca.crt", tls + "server-ca.key", engine, sans, org=engine)
    if not os.path.exists(P(tls + "client-admin.crt")):
        c, k = make_cert(tls + "client-ca.crt", tls + "client-ca.key", "system:admin", "system:masters", client=True)
        write_file(tls + "client-admin.crt", c, 0o644)
        write_file(tls + "client-admin.key", k, 0o600)
    if not os.path.exists(P(tls + "client-kubelet-%s.crt" % n.name)):
        c, k = make_cert(tls + "client-ca.crt", tls + "client-ca.key", "system:node:" + n.name, "system:nodes",
                         client=True)
        write_file(tls + "client-kubelet-%s.crt" % n.name, c, 0o644)
        write_file(tls + "client-kubelet-%s.key" % n.name, k, 0o600)
    admin_crt, admin_key = read_file(tls + "client-admin.crt"), read_file(tls + "client-admin.key")
    addrs = listen_addrs(n.ip, n.api_port, cfg.get("bind-address"))
    local = "https://%s:%d" % (addrs[-1][0], n.api_port)
    kc_path = str(cfg.get("write-kubeconfig") or e["kubeconfig"])
    mode = int(str(cfg.get("write-kubeconfig-mode") or "0600"), 8)
    write_file(kc_path, kubeconfig_yaml("default", "default", "default", local, ca_pem, admin_crt, admin_key), mode)

    store = Store(n.data + "/server/db/standin-state.json", n.name)
    if state:
        store.merge(state)
    cluster = Cluster(engine, store, n.version, tls + "server-ca.crt", tls + "server-ca.key", tls + "client-ca.crt",
                      tls + "client-ca.key", n.ip, n.api_port, n.sup_port, log)
    cluster.passwords = {"server": stored, "node": agent_stored}
    on_term(store.flush)
    init_cluster_objects(cluster, e["svc_ip"])

    def supervisor(h, method, path, query, ident):
        return rancher_supervisor(h, method, path, ident, cluster, engine, tls, stored, agent_stored)
    serve(cluster, supervisor, addrs, tls + "serving-kube-apiserver.crt", tls + "serving-kube-apiserver.key",
          tls + "client-ca.crt")
    if n.sup_port != n.api_port:
        serve(cluster, supervisor, listen_addrs(n.ip, n.sup_port, cfg.get("bind-address")),
              tls + "serving-kube-apiserver.crt", tls + "serving-kube-apiserver.key", tls + "client-ca.crt")
    log.info("Running kube-apiserver on %s" % ", ".join("%s:%d" % a for a in addrs))
    seeds = ["https://%s:%d" % (urllib.parse.urlsplit(str(join)).hostname, n.api_port)] if join else []
    sync = PeerSync(cluster, ca_pem, admin_crt, admin_key, log, seeds)
    threading.Thread(target=sync.run, daemon=True).start()
    threading.Thread(target=cluster.monitor, daemon=True).start()
    threading.Thread(target=deploy_manifests, args=(cluster, n.data, log), daemon=True).start()
    images = import_image_dir(engine, n.data, log)
    roles = {"node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/master": "true",
             "node-role.kubernetes.io/etcd": "true"}
    kc, kk = read_file(tls + "client-kubelet-%s.crt" % n.name), read_file(tls + "client-kubelet-%s.key" % n.name)
    n.start_agent(ca_pem, kc, kk, [local], roles, images)
    sd_notify("READY=1")
    log.info("%s is up and running" % engine)
    while True:
        time.sleep(3600)


def rancher_supervisor(h, method, path, ident, cluster, engine, tls, server_pw, agent_pw):
    """The supervisor's endpoints: CA certificates, kubelet credentials, agent config, server bootstrap."""
    if method != "GET":
        return False
    if path == "/cacerts":
        h.send_json(200, read_file(tls + "server-ca.crt").encode(), "text/plain")
        return True
    prefix = "/v1-%s/" % engine
    if not path.startswith(prefix):
        return False
    if ident is None or not ident[0].startswith("supervisor:"):
        raise HttpError(401, "Unauthorized", "Unauthorized")
    what = path[len(prefix):]
    if what == "server-bootstrap":
        if ident[0] != "supervisor:server":
            raise HttpError(401, "Unauthorized", "Unauthorized")
        files = {f: read_file(tls + f) for f in ("server-ca.crt", "server-ca.key", "client-ca.crt", "client-ca.key",
                                                  "client-admin.crt", "client-admin.key")}
        h.send_json(200, {"files": files, "state": cluster.store.snapshot(), "token": server_pw,
                          "agent-token": agent_pw})
        return True
    if what == "client-kubelet.crt":
        name = h.headers.get(engine + "-Node-Name", "")
        pw = h.headers.get(engine + "-Node-Password", "")
        if not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name):
            raise HttpError(400, "BadRequest", "invalid node name")
        sec_spec = cluster.spec_for("", "v1", "secrets")
        sname = "%s.node-password.%s" % (name, engine)
        digest = b64(hashlib.sha256(pw.encode()).hexdigest())
        with cluster.lock:
            sec = cluster.store.get(cluster.key(sec_spec, "kube-system", sname))
            if sec and sec.get("data", {}).get("hash") != digest:
                h.send_json(403, ("Node password rejected, duplicate hostname or contents of "
                                  "'/etc/rancher/node/password' may not match server node-passwd entry, try enabling "
                                  "a unique node name with the --with-node-id flag\n").encode(), "text/plain")
                return True
            if not sec:
                cluster.create(sec_spec, "kube-system", {"metadata": {"name": sname}, "type": engine + ".cattle.io/"
                               "node-password", "data": {"hash": digest}})
        crt, key = make_cert(tls + "client-ca.crt", tls + "client-ca.key", "system:node:" + name, "system:nodes",
                             client=True)
        h.send_json(200, (crt + key).encode(), "text/plain")
        return True
    if what == "config":
        peers = {"https://%s:%d" % (cluster.self_ip, cluster.api_port)}
        for node in cluster.store.list("", "nodes"):
            if "node-role.kubernetes.io/control-plane" in node["metadata"].get("labels", {}):
                for a in node.get("status", {}).get("addresses", []):
                    if a["type"] == "InternalIP":
                        peers.add("https://%s:%d" % (a["address"], cluster.api_port))
        h.send_json(200, {"apiServers": sorted(peers), "supervisorPort": cluster.peer_port})
        return True
    return False


def rancher_main(engine, args):
    log = Logger("logrus")
    v = engine_version(engine)
    if not args or args[0] in ("--version", "-v", "version"):
        if args and args[0] == "version" or args and args[0] in ("--version", "-v"):
            print("%s version %s (%s)" % (engine, v, commit_of(v, 40 if engine == "rke2" else 8)))
            print("go version %s%s" % (GO_VERSION, " X:boringcrypto" if engine == "rke2" else ""))
            return 0
        print("NAME:\n   %s - Kubernetes, but standing in\n\nUSAGE:\n   %s [global options] command [command options]"
              "\n\nCOMMANDS:\n   server   Run management server\n   agent    Run node agent\n" % (engine, engine))
        return 0
    cmd, rest = args[0], args[1:]
    if cmd in ("kubectl", "crictl", "ctr") and engine == "k3s":
        return k3s_tool(cmd, rest)
    if cmd not in ("server", "agent"):
        sys.stderr.write("Incorrect Usage. flag provided but not defined: -%s\n" % cmd.lstrip("-"))
        return 1
    flags, _ = parse_flags(rest)
    cfg = load_rancher_config(engine, flags, log)
    try:
        if cmd == "server":
            rancher_server(engine, cfg, log)
        else:
            rancher_agent(engine, cfg, log)
    except (RuntimeError, OSError) as e:  # certificates or files that cannot be made: a fatal line, not a trace
        log.fatal("Error: %s" % e)
    return 0


def k3s_tool(cmd, args):
    """k3s kubectl runs the real kubectl against k3s.yaml (as k3s does when KUBECONFIG is unset); ctr the stand-in."""
    if cmd == "kubectl":
        env = dict(os.environ)
        if not env.get("KUBECONFIG") and os.access(P(RANCHER["k3s"]["kubeconfig"]), os.R_OK):
            env["KUBECONFIG"] = P(RANCHER["k3s"]["kubeconfig"])
        kubectl = os.environ.get("STANDIN_KUBECTL", "/usr/bin/kubectl")
        os.execve(kubectl, ["kubectl"] + args, env)
    if cmd == "ctr":
        return ctr_main(args)
    sys.stderr.write("crictl is not part of the stand-in\n")
    return 1


# ---------------------------------------------------------------- kubeadm and kubelet

KDIR = "/etc/kubernetes"
PKI = KDIR + "/pki/"
MANIFESTS = KDIR + "/manifests"
KUBELET_DIR = "/var/lib/kubelet"


def kflags(args):
    """kubeadm/kubelet flags: --k=v, --k v, -f style; repeated flags become lists only where the tools allow it."""
    flags, pos = {}, []
    bools = {"upload-certs", "control-plane", "print-join-command", "discovery-token-unsafe-skip-ca-verification",
             "force", "f", "y", "yes", "dry-run", "skip-token-print", "skip-certificate-key-print", "version"}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1:
            k, eq, v = a.lstrip("-").partition("=")
            if not eq:
                if k in bools:
                    v = True
                elif i + 1 < len(args):
                    i += 1
                    v = args[i]
            flags[k] = v
        else:
            pos.append(a)
        i += 1
    return flags, pos


def extra_args(nr):
    """kubeletExtraArgs as a map (v1beta3) or a list of name/value (v1beta4)."""
    ea = nr.get("kubeletExtraArgs") or {}
    if isinstance(ea, list):
        return {x["name"]: x.get("value", "") for x in ea}
    return {k: str(v) for k, v in ea.items()}


def load_kubeadm_config(path):
    docs = {}
    if not path:
        return docs
    text = read_file(path)
    if text is None:
        sys.stderr.write("unable to read config from \"%s\" : open %s: no such file or directory\n" % (path, path))
        sys.exit(1)
    try:
        for d in yaml.safe_load_all(text):
            if isinstance(d, dict) and d.get("kind"):
                docs[d["kind"]] = d
    except yaml.YAMLError as e:
        sys.stderr.write("error unmarshaling configuration: %s\n" % e)
        sys.exit(1)
    return docs


def vtuple(v):
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", v or "")
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def init_system():
    """kubeadm drives systemd when there is one; on other hosts it says so and leaves the kubelet to the operator."""
    if ROOT or not shutil.which("systemctl") or not os.path.isdir("/run/systemd/system"):
        return None
    return "systemd"


def start_kubelet():
    if init_system() is None:
        print("[kubelet-start] No supported init system detected, won't make sure the kubelet is running properly.")
        return
    r = subprocess.run("systemctl daemon-reload && systemctl restart kubelet", shell=True, capture_output=True,
                       text=True)
    if r.returncode:
        print("[kubelet-start] WARNING: unable to start the kubelet service: [%s]" % r.stderr.strip())
        print("[kubelet-start] Please ensure kubelet is reloaded and running manually.")


def wait_for(what, fn, timeout, interval=0.5):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if fn():
                return time.time() - t0
        except (OSError, urllib.error.URLError, ApiError, ValueError):
            pass
        time.sleep(interval)
    return None


def phase_fail(phase, msg):
    sys.stderr.write("error execution phase %s: %s\nTo see the stack trace of this error execute with --v=5 or higher\n"
                     % (phase, msg))
    sys.exit(1)


def preflight(checks, ignore):
    errs = [(n, m) for n, m in checks if n.lower() not in ignore and "all" not in ignore]
    if errs:
        lines = "".join("\t[ERROR %s]: %s\n" % e for e in errs)
        sys.stderr.write("error execution phase preflight: [preflight] Some fatal errors occurred:\n%s[preflight] If "
                         "you know what you are doing, you can make a check non-fatal with "
                         "`--ignore-preflight-errors=...`\nTo see the stack trace of this error execute with --v=5 or "
                         "higher\n" % lines)
        sys.exit(1)


def port_free(ip, port):
    s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def cri_problem(endpoint):
    """Where Debian's containerd is installed, kubelet and kubeadm need its CRI socket to answer (hosts that have
    only the stand-in ctr have no runtime to check)."""
    endpoint = endpoint or "unix:///var/run/containerd/containerd.sock"
    if not os.path.exists(P("/usr/bin/containerd")):
        return None
    path = endpoint.replace("unix://", "")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.settimeout(2)
        s.connect(P(path))
        return None
    except OSError as e:
        why = "no such file or directory" if isinstance(e, FileNotFoundError) else "connection refused"
        return ('validate service connection: validate CRI v1 runtime API for endpoint "%s": rpc error: code = '
                'Unavailable desc = connection error: desc = "transport: Error while dialing: dial unix %s: connect: '
                '%s"' % (endpoint, path, why))
    finally:
        s.close()


def new_token():
    return "%s.%s" % (rand_str(6), rand_str(16))


def token_secret(tok, ttl="24h0m0s", groups="system:bootstrappers:kubeadm:default-node-token", usages=None,
                 description=None):
    tid, sec = tok.split(".")
    data = {"token-id": tid, "token-secret": sec, "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true", "auth-extra-groups": groups}
    secs = parse_duration(ttl)
    if secs:
        data["expiration"] = rfc3339(now_utc() + datetime.timedelta(seconds=secs))
    if description:
        data["description"] = description
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system"},
            "data": {k: b64(v) for k, v in data.items()}}


def parse_duration(s):
    total = 0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", str(s or "")):
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total


def seal(key_hex, data):
    """kubeadm-certs encryption keyed by the certificate key (HMAC-SHA256 stream + tag: stdlib has no AES)."""
    key = bytes.fromhex(key_hex)
    nonce = os.urandom(12)
    raw = data.encode()
    stream = b"".join(hmac.new(key, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest()
                      for i in range(len(raw) // 32 + 1))
    ct = bytes(a ^ b for a, b in zip(raw, stream))
    tag = hmac.new(key, b"tag" + nonce + ct, hashlib.sha256).digest()[:16]
    return b64(nonce + ct + tag)


def unseal(key_hex, blob):
    key = bytes.fromhex(key_hex)
    raw = base64.b64decode(blob)
    nonce, ct, tag = raw[:12], raw[12:-16], raw[-16:]
    if not hmac.compare_digest(tag, hmac.new(key, b"tag" + nonce + ct, hashlib.sha256).digest()[:16]):
        raise ValueError("cipher: message authentication failed")
    stream = b"".join(hmac.new(key, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest()
                      for i in range(len(ct) // 32 + 1))
    return bytes(a ^ b for a, b in zip(ct, stream)).decode()


CERT_FILES = ["ca.crt", "ca.key", "sa.key", "sa.pub", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt",
              "etcd/ca.key"]


def ensure_pki(name, ip, sans, svc_ip):
    print('[certs] Using certificateDir folder "%s"' % PKI.rstrip("/"))
    for ca, cn in (("ca", "kubernetes"), ("front-proxy-ca", "front-proxy-ca"), ("etcd/ca", "etcd-ca")):
        if not os.path.exists(P(PKI + ca + ".crt")):
            print('[certs] Generating "%s" certificate and key' % ca)
            make_ca(PKI + ca + ".crt", PKI + ca + ".key", cn, "rsa")
        else:
            print('[certs] Using existing %s certificate authority' % ca)
    all_sans = sorted(set(sans) | {"kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                   "kubernetes.default.svc.cluster.local", name, svc_ip, ip})
    if ensure_serving_cert(PKI + "apiserver.crt", PKI + "apiserver.key", PKI + "ca.crt", PKI + "ca.key",
                           "kube-apiserver", all_sans, kind="rsa"):
        print('[certs] Generating "apiserver" certificate and key')
        dns = [s for s in all_sans if not re.match(r"^[0-9.:]+$", s)]
        ips = [s for s in all_sans if re.match(r"^[0-9.:]+$", s)]
        print("[certs] apiserver serving cert is signed for DNS names [%s] and IPs [%s]" % (" ".join(dns),
                                                                                           " ".join(ips)))
    if not os.path.exists(P(PKI + "sa.key")):
        print('[certs] Generating "sa" key and public key')
        write_file(PKI + "sa.key", openssl("genrsa", "2048"), 0o600)
        write_file(PKI + "sa.pub", openssl("rsa", "-in", P(PKI + "sa.key"), "-pubout"), 0o600)


def write_kubeconfigs(name, server, super_admin=True):
    print('[kubeconfig] Using kubeconfig folder "%s"' % KDIR)
    ca = read_file(PKI + "ca.crt")
    files = [("admin.conf", "kubernetes-admin", "kubeadm:cluster-admins")]
    if super_admin:
        files.append(("super-admin.conf", "kubernetes-super-admin", "system:masters"))
    files += [("controller-manager.conf", "system:kube-controller-manager", None),
              ("scheduler.conf", "system:kube-scheduler", None)]
    for fname, cn, org in files:
        if os.path.exists(P(KDIR + "/" + fname)):
            print('[kubeconfig] Using existing kubeconfig file: "%s/%s"' % (KDIR, fname))
            continue
        print('[kubeconfig] Writing "%s" kubeconfig file' % fname)
        c, k = make_cert(PKI + "ca.crt", PKI + "ca.key", cn, org, client=True, kind="rsa")
        write_file(KDIR + "/" + fname, kubeconfig_yaml("kubernetes", cn, "%s@kubernetes" % cn, server, ca, c, k),
                   0o600)


def static_manifests(version, ip, port, peers, name, service_cidr, pod_cidr):
    print('[etcd] Creating static Pod manifest for local etcd in "%s"' % MANIFESTS)
    cluster = ",".join("%s=https://%s:2380" % (n, a) for n, a in peers + [(name, ip)])
    etcd = ["etcd", "--advertise-client-urls=https://%s:2379" % ip, "--data-dir=/var/lib/etcd",
            "--initial-advertise-peer-urls=https://%s:2380" % ip, "--initial-cluster=" + cluster,
            "--initial-cluster-state=" + ("existing" if peers else "new"), "--name=" + name,
            "--listen-client-urls=https://127.0.0.1:2379,https://%s:2379" % ip]
    api = ["kube-apiserver", "--advertise-address=" + ip, "--secure-port=%d" % port,
           "--client-ca-file=/etc/kubernetes/pki/ca.crt", "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
           "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key", "--etcd-servers=https://127.0.0.1:2379",
           "--service-cluster-ip-range=" + service_cidr, "--authorization-mode=Node,RBAC",
           "--enable-bootstrap-token-auth=true"]
    cm = ["kube-controller-manager", "--kubeconfig=/etc/kubernetes/controller-manager.conf",
          "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt",
          "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key"]
    if pod_cidr:
        cm += ["--allocate-node-cidrs=true", "--cluster-cidr=" + pod_cidr]
    sched = ["kube-scheduler", "--kubeconfig=/etc/kubernetes/scheduler.conf"]
    images = {"etcd": "registry.k8s.io/etcd:3.6.5-0"}
    for comp, cmd in (("etcd", etcd), ("kube-apiserver", api), ("kube-controller-manager", cm),
                      ("kube-scheduler", sched)):
        if comp != "etcd":
            print('[control-plane] Creating static Pod manifest for "%s"' % comp)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": comp, "namespace": "kube-system",
                                                                "labels": {"component": comp, "tier": "control-plane"}},
               "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical", "containers": [
                   {"name": comp, "image": images.get(comp, "registry.k8s.io/%s:%s" % (comp, version)),
                    "command": cmd}]}, "status": {}}
        write_file(MANIFESTS + "/%s.yaml" % comp, yaml.safe_dump(pod, default_flow_style=False), 0o600)


def set_manifest_version(version):
    for comp in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        path = MANIFESTS + "/%s.yaml" % comp
        pod = load_yaml_file(path)
        if pod:
            pod["spec"]["containers"][0]["image"] = "registry.k8s.io/%s:%s" % (comp, version)
            write_file(path, yaml.safe_dump(pod, default_flow_style=False), 0o600)


def kubelet_files(kubelet_cfg, flags_env):
    print('[kubelet-start] Writing kubelet environment file with flags to file "%s/kubeadm-flags.env"' % KUBELET_DIR)
    write_file(KUBELET_DIR + "/kubeadm-flags.env", 'KUBELET_KUBEADM_ARGS="%s"\n' % " ".join(flags_env), 0o644)
    print('[kubelet-start] Writing kubelet configuration to file "%s/config.yaml"' % KUBELET_DIR)
    write_file(KUBELET_DIR + "/config.yaml", kubelet_cfg, 0o644)


def kubelet_config_text(user):
    cfg = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
           "cgroupDriver": "systemd", "clusterDNS": ["10.96.0.10"], "clusterDomain": "cluster.local",
           "staticPodPath": MANIFESTS, "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
           "rotateCertificates": True, "authentication": {"x509": {"clientCAFile": PKI + "ca.crt"}}}
    cfg.update({k: v for k, v in (user or {}).items() if k not in ("apiVersion", "kind")})
    return yaml.safe_dump(cfg, default_flow_style=False)


def flags_env(nr, ip):
    ea = extra_args(nr)
    out = ["--container-runtime-endpoint=" + nr.get("criSocket", "unix:///var/run/containerd/containerd.sock"),
           "--pod-infra-container-image=registry.k8s.io/pause:3.10"]
    if nr.get("name"):
        out.append("--hostname-override=" + nr["name"])
    if ip and "node-ip" not in ea:
        out.append("--node-ip=" + ip)
    out += ["--%s=%s" % (k, v) for k, v in sorted(ea.items())]
    return out


def admin_client(path=KDIR + "/admin.conf"):
    server, ca, crt, key, token = kubeconfig_parts(path)
    if not server:
        sys.stderr.write("failed to load admin kubeconfig: open %s: no such file or directory\n" % path)
        sys.exit(1)
    return Client(server, ca_pem=ca, crt_pem=crt, key_pem=key, token=token)


def ensure_object(client, path, obj):
    try:
        client.call("POST", path, obj)
    except ApiError as e:
        if e.code != 409:
            raise
        client.call("PUT", path + "/" + obj["metadata"]["name"], obj)


def mark_control_plane(client, name, taints):
    print("[mark-control-plane] Marking the node %s as control-plane by adding the labels: "
          "[node-role.kubernetes.io/control-plane node.kubernetes.io/exclude-from-external-load-balancers]" % name)
    if taints:
        print("[mark-control-plane] Marking the node %s as control-plane by adding the taints [%s]"
              % (name, " ".join("%s:%s" % (t["key"], t["effect"]) for t in taints)))
    if wait_for("node", lambda: client.call("GET", "/api/v1/nodes/" + name), 240) is None:
        phase_fail("mark-control-plane", 'error patching node "%s" through apiserver: timed out waiting for the '
                   'condition' % name)
    node = client.call("GET", "/api/v1/nodes/" + name)
    have = node.get("spec", {}).get("taints", [])
    merged = have + [t for t in taints if not any(h["key"] == t["key"] and h["effect"] == t["effect"] for h in have)]
    client.call("PATCH", "/api/v1/nodes/" + name, {"metadata": {"labels": {
        "node-role.kubernetes.io/control-plane": "", "node.kubernetes.io/exclude-from-external-load-balancers": ""}},
        "spec": {"taints": merged or None}}, "application/merge-patch+json")


def node_reg(docs, kind, flags):
    nr = dict(docs.get(kind, {}).get("nodeRegistration") or {})
    if flags.get("node-name"):
        nr["name"] = flags["node-name"]
    nr.setdefault("name", hostname())
    nr["name"] = nr["name"].lower()
    return nr


def kubeadm_init(args):
    flags, _ = kflags(args)
    docs = load_kubeadm_config(flags.get("config"))
    ic, cc = docs.get("InitConfiguration", {}), docs.get("ClusterConfiguration", {})
    kv = engine_version("upstream")
    version = str(flags.get("kubernetes-version") or cc.get("kubernetesVersion") or kv)
    if version in ("stable", "stable-1", "latest"):
        version = kv
    version = "v" + version.lstrip("v")
    if vtuple(version)[:2] < (vtuple(kv)[0], vtuple(kv)[1] - 1):
        phase_fail("preflight", "this version of kubeadm only supports deploying clusters with the control plane "
                   "version >= v%d.%d.0. Current version: %s" % (vtuple(kv)[0], vtuple(kv)[1] - 1, version))
    print("[init] Using Kubernetes version: %s" % version)
    if vtuple(version)[:2] > vtuple(kv)[:2]:
        print("[init] WARNING: Kubernetes version is greater than kubeadm version. Please consider to upgrade kubeadm."
              " Kubernetes version: %s. Kubeadm version: %d.%d.x" % (version.lstrip("v"), *vtuple(kv)[:2]))
    nr = node_reg(docs, "InitConfiguration", flags)
    name = nr["name"]
    ep = ic.get("localAPIEndpoint") or {}
    ip = str(flags.get("apiserver-advertise-address") or ep.get("advertiseAddress") or
             extra_args(nr).get("node-ip") or first_private_address())
    port = int(flags.get("apiserver-bind-port") or ep.get("bindPort") or 6443)
    cpe = str(flags.get("control-plane-endpoint") or cc.get("controlPlaneEndpoint") or "%s:%d" % (ip, port))
    if ":" not in cpe:
        cpe += ":%d" % port
    net = cc.get("networking") or {}
    svc_cidr = str(flags.get("service-cidr") or net.get("serviceSubnet") or "10.96.0.0/12")
    pod_cidr = str(flags.get("pod-network-cidr") or net.get("podSubnet") or "")
    svc_ip = re.sub(r"\.0/\d+$", ".1", svc_cidr)
    taints = nr.get("taints")
    if taints is None:
        taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    ignore = {x.strip().lower() for x in str(flags.get("ignore-preflight-errors", "")).split(",") if x}
    ignore |= {x.lower() for x in nr.get("ignorePreflightErrors") or []}
    print("[preflight] Running pre-flight checks")
    checks = []
    for f in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
        if os.path.exists(P(MANIFESTS + "/%s.yaml" % f)):
            checks.append(("FileAvailable--etc-kubernetes-manifests-%s.yaml" % f,
                           "%s/%s.yaml already exists" % (MANIFESTS, f)))
    if not port_free(ip, port):
        checks.append(("Port-%d" % port, "Port %d is in use" % port))
    cri = cri_problem(nr.get("criSocket"))
    if cri:
        checks.append(("CRI", "container runtime is not running: output: level=fatal msg=\"%s\"\n, error: exit "
                              "status 1" % cri.replace('"', '\\"')))
    if os.path.isdir(P("/var/lib/etcd")) and os.listdir(P("/var/lib/etcd")):
        checks.append(("DirAvailable--var-lib-etcd", "/var/lib/etcd is not empty"))
    preflight(checks, ignore)
    print("[preflight] Pulling images required for setting up a Kubernetes cluster")
    print("[preflight] This might take a minute or two, depending on the speed of your internet connection")
    sans = [str(s) for s in (cc.get("apiServer") or {}).get("certSANs") or []] + [cpe.rsplit(":", 1)[0]]
    ensure_pki(name, ip, sans, svc_ip)
    write_kubeconfigs(name, "https://" + cpe)
    static_manifests(version, ip, port, [], name, svc_cidr, pod_cidr)
    kubelet_files(kubelet_config_text(docs.get("KubeletConfiguration")), flags_env(nr, ip))
    kc, kk = make_cert(PKI + "ca.crt", PKI + "ca.key", "system:node:" + name, "system:nodes", client=True, kind="rsa")
    write_file(KDIR + "/kubelet.conf", kubeconfig_yaml("kubernetes", "system:node:" + name,
                                                      "system:node:%s@kubernetes" % name, "https://%s:%d" % (ip, port),
                                                      read_file(PKI + "ca.crt"), kc, kk), 0o600)
    print("[kubelet-start] Starting the kubelet")
    start_kubelet()
    print('[wait-control-plane] Waiting for the kubelet to boot up the control plane as static Pods from directory '
          '"%s"' % MANIFESTS)
    kl = docs.get("KubeletConfiguration") or {}
    hz = "http://%s:%s/healthz" % (kl.get("healthzBindAddress") or "127.0.0.1", kl.get("healthzPort") or 10248)
    print("[kubelet-check] Waiting for a healthy kubelet at %s. This can take up to 4m0s" % hz)
    took = wait_for("kubelet", lambda: urllib.request.urlopen(hz, timeout=2).read(), 240)
    if took is None:
        print("[kubelet-check] The kubelet is not healthy after 4m0s\n\nUnfortunately, an error has occurred, likely "
              "caused by:\n\t- The kubelet is not running\n\t- The kubelet is unhealthy due to a misconfiguration of "
              "the node in some way (required cgroups disabled)")
        phase_fail("wait-control-plane", "failed while waiting for the kubelet to start: The HTTP call equal to 'curl "
                   "-sSL http://127.0.0.1:10248/healthz' returned error: Get \"http://127.0.0.1:10248/healthz\": dial "
                   "tcp 127.0.0.1:10248: connect: connection refused")
    print("[kubelet-check] The kubelet is healthy after %.6fs" % took)
    print("[control-plane-check] Waiting for healthy control plane components. This can take up to 4m0s")
    print("[control-plane-check] Checking kube-apiserver at https://%s:%d/livez" % (ip, port))
    sadmin = admin_client(KDIR + "/super-admin.conf")
    took = wait_for("apiserver", lambda: sadmin.raw("GET", "/livez", timeout=2), 240)
    if took is None:
        phase_fail("wait-control-plane", "kube-apiserver check failed at https://%s:%d/livez: context deadline exceeded"
                   % (ip, port))
    print("[control-plane-check] kube-apiserver is healthy after %.6fs" % took)
    print('[upload-config] Storing the configuration used in ConfigMap "kubeadm-config" in the "kube-system" Namespace')
    ccfg = dict(cc, apiVersion=cc.get("apiVersion", "kubeadm.k8s.io/v1beta4"), kind="ClusterConfiguration",
                kubernetesVersion=version, controlPlaneEndpoint=cpe,
                networking=dict(net, serviceSubnet=svc_cidr, **({"podSubnet": pod_cidr} if pod_cidr else {})))
    ensure_object(sadmin, "/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": "kubeadm-config",
                  "namespace": "kube-system"}, "data": {"ClusterConfiguration": yaml.safe_dump(ccfg)}})
    print('[kubelet] Creating a ConfigMap "kubelet-config" in namespace kube-system with the configuration for the '
          'kubelets in the cluster')
    ensure_object(sadmin, "/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": "kubelet-config",
                  "namespace": "kube-system"}, "data": {"kubelet": read_file(KUBELET_DIR + "/config.yaml")}})
    cert_key = str(flags.get("certificate-key") or ic.get("certificateKey") or "")
    if flags.get("upload-certs"):
        cert_key = cert_key or os.urandom(32).hex()
        upload_certs(sadmin, cert_key)
    else:
        print("[upload-certs] Skipping phase. Please see --upload-certs")
    mark_control_plane(sadmin, name, taints)
    tokens = [str(t.get("token")) for t in ic.get("bootstrapTokens") or [] if t.get("token")]
    if flags.get("token"):
        tokens = [str(flags["token"])]
    tokens = tokens or [new_token()]
    for tok in tokens:
        if not re.match(r"^[a-z0-9]{6}\.[a-z0-9]{16}$", tok):
            phase_fail("bootstrap-token", 'the bootstrap token "%s" was not of the form "\\\\A([a-z0-9]{6})\\\\.'
                       '([a-z0-9]{16})\\\\z"' % tok)
    print("[bootstrap-token] Using token: %s" % tokens[0])
    print("[bootstrap-token] Configuring bootstrap tokens, cluster-info ConfigMap, RBAC Roles")
    ttl = next((t.get("ttl") for t in ic.get("bootstrapTokens") or [] if t.get("ttl")), None)
    ttl = str(flags.get("token-ttl") or ttl or "24h0m0s")
    for tok in tokens:
        ensure_object(sadmin, "/api/v1/namespaces/kube-system/secrets", token_secret(tok, ttl))
    ca = read_file(PKI + "ca.crt")
    print('[bootstrap-token] Creating the "cluster-info" ConfigMap in the "kube-public" namespace')
    info = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: https://%s\n  " \
           "name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {}\nusers: null\n" % (b64(ca),
                                                                                                            cpe)
    ensure_object(sadmin, "/api/v1/namespaces/kube-public/configmaps", {"metadata": {"name": "cluster-info",
                  "namespace": "kube-public"}, "data": {"kubeconfig": info}})
    # the bootstrap signer runs in the apiserver process: make it sign now that cluster-info exists
    ensure_object(sadmin, "/api/v1/namespaces/kube-system/secrets", token_secret(tokens[0], ttl))
    print('[kubelet-finalize] Updating "%s/kubelet.conf" to point to a rotatable kubelet client certificate and key'
          % KDIR)
    print("[addons] Applied essential addon: CoreDNS")
    print("[addons] Applied essential addon: kube-proxy")
    h = ca_pubkey_hash(ca)
    print("\nYour Kubernetes control-plane has initialized successfully!\n\nTo start using your cluster, you need to "
          "run the following as a regular user:\n\n  mkdir -p $HOME/.kube\n  sudo cp -i /etc/kubernetes/admin.conf "
          "$HOME/.kube/config\n  sudo chown $(id -u):$(id -g) $HOME/.kube/config\n\nAlternatively, if you are the "
          "root user, you can run:\n\n  export KUBECONFIG=/etc/kubernetes/admin.conf\n\nYou should now deploy a pod "
          "network to the cluster.\nRun \"kubectl apply -f [podnetwork].yaml\" with one of the options listed at:\n"
          "  https://kubernetes.io/docs/concepts/cluster-administration/addons/\n")
    if cert_key and flags.get("upload-certs"):
        print("You can now join any number of control-plane nodes running the following command on each as root:\n\n"
              "  kubeadm join %s --token %s \\\n\t--discovery-token-ca-cert-hash %s \\\n\t--control-plane "
              "--certificate-key %s\n\nPlease note that the certificate-key gives access to cluster sensitive data, "
              "keep it secret!\nAs a safeguard, uploaded-certs will be deleted in two hours; If necessary, you can use"
              "\n\"kubeadm init phase upload-certs --upload-certs\" to reload certs afterward.\n"
              % (cpe, tokens[0], h, cert_key))
    else:
        print("You can now join any number of control-plane nodes by copying certificate authorities\nand service "
              "account keys on each node and then running the following as root:\n\n  kubeadm join %s --token %s "
              "\\\n\t--discovery-token-ca-cert-hash %s \\\n\t--control-plane \n" % (cpe, tokens[0], h))
    print("Then you can join any number of worker nodes by running the following on each as root:\n\nkubeadm join %s "
          "--token %s \\\n\t--discovery-token-ca-cert-hash %s " % (cpe, tokens[0], h))
    return 0


def upload_certs(client, cert_key):
    print('[upload-certs] Storing the certificates in Secret "kubeadm-certs" in the "kube-system" Namespace')
    data = {f.replace("/", "-"): seal(cert_key, read_file(PKI + f)) for f in CERT_FILES if read_file(PKI + f)}
    ensure_object(client, "/api/v1/namespaces/kube-system/secrets", {"metadata": {"name": "kubeadm-certs",
                  "namespace": "kube-system"}, "type": "Opaque", "data": {k: b64(v) for k, v in data.items()}})
    print("[upload-certs] Using certificate key:\n%s" % cert_key)


def discover(endpoint, token, hashes, unsafe, timeout):
    """Token discovery: cluster-info fetched anonymously, its JWS checked with the token, the CA with the pins."""
    tid, secret = token.split(".")
    anon = Client("https://" + endpoint)
    t0 = time.time()
    while True:
        try:
            cm = anon.call("GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info", timeout=10)
            data = cm.get("data", {})
            jws = data.get("jws-kubeconfig-" + tid)
            if jws:
                break
            msg = ('[discovery] The cluster-info ConfigMap does not yet contain a JWS signature for token ID "%s", '
                   'will try again' % tid)
            final = 'could not find a JWS signature in the cluster-info ConfigMap for token ID "%s"' % tid
        except (ApiError, OSError, urllib.error.URLError) as e:
            reason = e if isinstance(e, ApiError) else dial_error("https://" + endpoint, e)
            msg = ('[discovery] Failed to request cluster-info, will try again: Get "https://%s/api/v1/namespaces/'
                   'kube-public/configmaps/cluster-info?timeout=10s": %s' % (endpoint, reason))
            final = "failed to request the cluster-info ConfigMap: %s" % reason
        print(msg)
        if time.time() - t0 > timeout:
            phase_fail("preflight", "couldn't validate the identity of the API Server: " + final)
        time.sleep(min(5, max(timeout / 10, 0.5)))
    if not jws_verify(jws, data["kubeconfig"], secret):
        phase_fail("preflight", "couldn't validate the identity of the API Server: failed to verify JWS signature of "
                   "received cluster info object, can't trust this API Server")
    ca = unb64(yaml.safe_load(data["kubeconfig"])["clusters"][0]["cluster"]["certificate-authority-data"])
    h = ca_pubkey_hash(ca)
    if not unsafe and h not in hashes:
        phase_fail("preflight", 'couldn\'t validate the identity of the API Server: cluster CA found in cluster-info '
                   'ConfigMap is invalid: none of the public keys "%s" are pinned' % h)
    print("[discovery] Cluster info signature and contents are valid and %s, will use API Server \"%s\""
          % ("TLS certificate validates against pinned roots" if not unsafe else "no TLS pinning was specified",
             endpoint))
    return ca


def kubeadm_join(args):
    flags, pos = kflags(args)
    docs = load_kubeadm_config(flags.get("config"))
    jc = docs.get("JoinConfiguration", {})
    disc = (jc.get("discovery") or {})
    bt = disc.get("bootstrapToken") or {}
    endpoint = str(pos[0] if pos else bt.get("apiServerEndpoint") or "")
    token = str(flags.get("token") or flags.get("discovery-token") or bt.get("token") or disc.get("tlsBootstrapToken")
                or "")
    hashes = [flags["discovery-token-ca-cert-hash"]] if flags.get("discovery-token-ca-cert-hash") else \
        [str(h) for h in bt.get("caCertHashes") or []]
    unsafe = bool(flags.get("discovery-token-unsafe-skip-ca-verification") or bt.get("unsafeSkipCAVerification"))
    cp = jc.get("controlPlane")
    control = bool(flags.get("control-plane")) or cp is not None
    cert_key = str(flags.get("certificate-key") or (cp or {}).get("certificateKey") or "")
    if not endpoint or not token:
        sys.stderr.write("discovery: Invalid value: \"\": bootstrapToken or file must be set\n")
        return 1
    if not hashes and not unsafe:
        sys.stderr.write('discovery.bootstrapToken: Invalid value: "": using token-based discovery without '
                         'caCertHashes can be unsafe. Set unsafeSkipCAVerification as true in your kubeadm config file '
                         'or pass --discovery-token-unsafe-skip-ca-verification flag to continue\n')
        return 1
    nr = node_reg(docs, "JoinConfiguration", flags)
    name = nr["name"]
    lep = (cp or {}).get("localAPIEndpoint") or {}
    ip = str(flags.get("apiserver-advertise-address") or lep.get("advertiseAddress") or extra_args(nr).get("node-ip")
             or first_private_address())
    port = int(flags.get("apiserver-bind-port") or lep.get("bindPort") or 6443)
    ignore = {x.strip().lower() for x in str(flags.get("ignore-preflight-errors", "")).split(",") if x}
    print("[preflight] Running pre-flight checks")
    checks = []
    for f in (KDIR + "/kubelet.conf", KDIR + "/bootstrap-kubelet.conf", PKI + "ca.crt"):
        if os.path.exists(P(f)):
            checks.append(("FileAvailable-" + f.replace("/", "-"), "%s already exists" % f))
    cri = cri_problem(nr.get("criSocket"))
    if cri:
        checks.append(("CRI", "container runtime is not running: output: level=fatal msg=\"%s\"\n, error: exit "
                              "status 1" % cri.replace('"', '\\"')))
    if control and not port_free(ip, port):
        checks.append(("Port-%d" % port, "Port %d is in use" % port))
    preflight(checks, ignore)
    timeout = parse_duration(disc.get("timeout") or "5m0s")
    ca = discover(endpoint, token, hashes, unsafe, timeout)
    boot = Client("https://" + endpoint, ca_pem=ca, token=token)
    print("[preflight] Reading configuration from the cluster...")
    print("[preflight] FYI: You can look at this config file with 'kubectl -n kube-system get cm kubeadm-config "
          "-o yaml'")
    try:
        ccfg = yaml.safe_load(boot.call("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")["data"][
            "ClusterConfiguration"])
        kcfg = boot.call("GET", "/api/v1/namespaces/kube-system/configmaps/kubelet-config")["data"]["kubelet"]
    except ApiError as e:
        phase_fail("preflight", "unable to fetch the kubeadm-config ConfigMap: %s" % e)
    cpe = ccfg.get("controlPlaneEndpoint") or endpoint
    if control:
        print("[preflight] Running pre-flight checks before initializing the new control plane instance")
        if not cert_key:
            phase_fail("control-plane-prepare/download-certs", "unable to download certificates: a certificate key "
                       "is required (--certificate-key)")
        print('[download-certs] Downloading the certificates in Secret "kubeadm-certs" in the "kube-system" Namespace')
        try:
            sec = boot.call("GET", "/api/v1/namespaces/kube-system/secrets/kubeadm-certs")
            for f in CERT_FILES:
                blob = sec["data"].get(f.replace("/", "-"))
                if blob:
                    write_file(PKI + f, unseal(cert_key, unb64(blob)), 0o600 if f.endswith(".key") else 0o644)
        except ApiError as e:
            phase_fail("control-plane-prepare/download-certs", 'error downloading certs: error downloading the '
                       'secret: secret "kubeadm-certs" was not found' if e.code == 404 else str(e))
        except ValueError as e:
            phase_fail("control-plane-prepare/download-certs", "error downloading certs: error decoding certificate "
                       "key: %s" % e)
        net = ccfg.get("networking") or {}
        svc_cidr = net.get("serviceSubnet", "10.96.0.0/12")
        ensure_pki(name, ip, [str(s) for s in (ccfg.get("apiServer") or {}).get("certSANs") or []] +
                   [cpe.rsplit(":", 1)[0]], re.sub(r"\.0/\d+$", ".1", svc_cidr))
        write_kubeconfigs(name, "https://" + cpe, super_admin=False)
        members = []
        nodes = boot_nodes(boot)
        for n in nodes:
            if "node-role.kubernetes.io/control-plane" in n["metadata"].get("labels", {}):
                a = next((x["address"] for x in n["status"].get("addresses", []) if x["type"] == "InternalIP"), None)
                if a and n["metadata"]["name"] != name:
                    members.append((n["metadata"]["name"], a))
        if not members:
            members = [("seed", cpe.rsplit(":", 1)[0])]
        print("[etcd] Announced new etcd member joining to the existing etcd cluster")
        static_manifests(ccfg.get("kubernetesVersion", engine_version("upstream")), ip, port, members, name,
                         svc_cidr, net.get("podSubnet", ""))
    else:
        write_file(PKI + "ca.crt", ca, 0o644)
    write_file(KDIR + "/bootstrap-kubelet.conf", kubeconfig_yaml("kubernetes", "tls-bootstrap-token-user",
                                                                "tls-bootstrap-token-user@kubernetes",
                                                                "https://" + cpe, ca, token=token), 0o600)
    user_kc = docs.get("KubeletConfiguration")
    kubelet_files(kubelet_config_text(dict(yaml.safe_load(kcfg) or {}, **(user_kc or {}))),
                  flags_env(nr, ip) + (["--register-with-taints=" + ",".join(
                      "%s%s:%s" % (t["key"], "=" + t["value"] if t.get("value") else "", t["effect"])
                      for t in nr["taints"])] if nr.get("taints") and not control else []))
    print("[kubelet-start] Starting the kubelet")
    start_kubelet()
    print("[kubelet-check] Waiting for a healthy kubelet at http://127.0.0.1:10248/healthz. This can take up to 4m0s")
    print("[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap")
    if wait_for("tls bootstrap", lambda: os.path.exists(P(KDIR + "/kubelet.conf")), 240) is None:
        phase_fail("kubelet-start", "timed out waiting for the condition")
    if control:
        admin = admin_client()
        print("[control-plane-join] Using the existing \"kube-apiserver\" at https://%s:%d" % (ip, port))
        local = Client("https://%s:%d" % (ip, port), ca_pem=ca, crt_pem=admin_client_parts()[0],
                       key_pem=admin_client_parts()[1])
        if wait_for("apiserver", lambda: local.raw("GET", "/livez", timeout=2), 240) is None:
            phase_fail("control-plane-join", "kube-apiserver did not become healthy")
        taints = nr.get("taints")
        if taints is None:
            taints = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
        mark_control_plane(admin, name, taints)
        print("\nThis node has joined the cluster and a new control plane instance was created:\n\n* Certificate "
              "signing request was sent to apiserver and approval was received.\n* The Kubelet was informed of the "
              "new secure connection details.\n* Control plane label and taint were applied to the new node.\n* The "
              "Kubernetes control plane instances scaled up.\n* A new etcd member was added to the local/stacked etcd "
              "cluster.\n\nTo start administering your cluster from this node, you need to run the following as a "
              "regular user:\n\n\tmkdir -p $HOME/.kube\n\tsudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config\n"
              "\tsudo chown $(id -u):$(id -g) $HOME/.kube/config\n\nRun 'kubectl get nodes' to see this node join the "
              "cluster.\n")
    else:
        print("\nThis node has joined the cluster:\n* Certificate signing request was sent to apiserver and a response "
              "was received.\n* The Kubelet was informed of the new secure connection details.\n\nRun 'kubectl get "
              "nodes' on the control-plane to see this node join the cluster.\n")
    return 0


def admin_client_parts():
    _, _, crt, key, _ = kubeconfig_parts(KDIR + "/admin.conf")
    return crt, key


def boot_nodes(client):
    """Control-plane members, read with the cluster's admin view when the token allows it (it does not: ask the
    seed endpoint's nodes through the bootstrap client, which may only GET named nodes)."""
    try:
        return client.call("GET", "/api/v1/nodes").get("items", [])
    except ApiError:
        return []


def kubeadm_token(args):
    flags, pos = kflags(args)
    sub = pos[0] if pos else "list"
    kc = str(flags.get("kubeconfig") or KDIR + "/admin.conf")
    if sub == "generate":
        print(new_token())
        return 0
    client = admin_client(kc)
    if sub == "create":
        tok = pos[1] if len(pos) > 1 else new_token()
        if not re.match(r"^[a-z0-9]{6}\.[a-z0-9]{16}$", tok):
            sys.stderr.write('token "%s" was not of the form "\\\\A([a-z0-9]{6})\\\\.([a-z0-9]{16})\\\\z"\n' % tok)
            return 1
        ensure_object(client, "/api/v1/namespaces/kube-system/secrets",
                      token_secret(tok, str(flags.get("ttl") or "24h0m0s"), description=flags.get("description")))
        if flags.get("print-join-command"):
            server = client.server.replace("https://", "")
            ca = kubeconfig_parts(kc)[1]
            print("kubeadm join %s --token %s --discovery-token-ca-cert-hash %s " % (server, tok, ca_pubkey_hash(ca)))
        else:
            print(tok)
        return 0
    if sub == "list":
        items = client.call("GET", "/api/v1/namespaces/kube-system/secrets").get("items", [])
        rows = []
        for s in items:
            if s.get("type") != "bootstrap.kubernetes.io/token":
                continue
            d = {k: unb64(v) for k, v in s.get("data", {}).items()}
            exp = d.get("expiration")
            ttl = "<forever>" if not exp else human_duration((parse_time(exp) - now_utc()).total_seconds())
            usages = ",".join(sorted(k[len("usage-bootstrap-"):] for k, v in d.items()
                                     if k.startswith("usage-bootstrap-") and v == "true"))
            rows.append(("%s.%s" % (d.get("token-id"), d.get("token-secret")), ttl, exp or "<never>", usages,
                         d.get("description", "<none>"), d.get("auth-extra-groups", "")))
        if rows:
            print("%-24s %-11s %-22s %-24s %-13s %s" % ("TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION",
                                                       "EXTRA GROUPS"))
            for r in rows:
                print("%-24s %-11s %-22s %-24s %-13s %s" % r)
        return 0
    if sub == "delete":
        for tok in pos[1:]:
            tid = tok.split(".")[0]
            try:
                client.call("DELETE", "/api/v1/namespaces/kube-system/secrets/bootstrap-token-" + tid)
                print('bootstrap token "%s" deleted' % tid)
            except ApiError:
                sys.stderr.write('bootstrap token "%s" not found\n' % tid)
                return 1
        return 0
    sys.stderr.write('unknown command "%s" for "kubeadm token"\n' % sub)
    return 1


def kubeadm_upgrade(args):
    flags, pos = kflags(args)
    sub = pos[0] if pos else ""
    kv = engine_version("upstream")
    if sub == "node":
        have_admin = os.path.exists(P(KDIR + "/admin.conf"))
        client = admin_client(KDIR + "/admin.conf" if have_admin else KDIR + "/kubelet.conf")
        ccfg = yaml.safe_load(client.call("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")["data"][
            "ClusterConfiguration"])
        print("[upgrade] Reading configuration from the cluster...")
        if os.path.exists(P(MANIFESTS + "/kube-apiserver.yaml")):
            print("[upgrade] Upgrading your Static Pod-hosted control plane instance to version \"%s\"..."
                  % ccfg["kubernetesVersion"])
            set_manifest_version(ccfg["kubernetesVersion"])
        else:
            print("[upgrade] Skipping phase. Not a control plane node.")
        print("[upgrade] The configuration for this node was successfully updated!\n[upgrade] Now you should go "
              "ahead and upgrade the kubelet package using your package manager.")
        return 0
    client = admin_client()
    cm = client.call("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    ccfg = yaml.safe_load(cm["data"]["ClusterConfiguration"])
    cur = ccfg.get("kubernetesVersion", kv)
    if sub == "plan":
        print("[upgrade/config] Reading configuration from the cluster...\n[preflight] Running pre-flight checks.\n"
              "[upgrade] Running cluster health checks\n[upgrade] Fetching available versions to upgrade to\n"
              "[upgrade/versions] Cluster version: %s\n[upgrade/versions] kubeadm version: %s" % (cur, kv))
        if vtuple(kv) > vtuple(cur):
            print("\nUpgrade to the latest stable version:\n\nCOMPONENT                 NODE      CURRENT   TARGET\n"
                  "kube-apiserver                      %s   %s\n\nYou can now apply the upgrade by executing the "
                  "following command:\n\n\tkubeadm upgrade apply %s\n" % (cur, kv, kv))
        else:
            print("\nAwesome, you're up-to-date! Enjoy!")
        return 0
    if sub == "apply":
        target = "v" + str(pos[1] if len(pos) > 1 else kv).lstrip("v")
        print("[upgrade] Reading configuration from the cluster...\n[preflight] Running pre-flight checks.\n"
              "[upgrade] Running cluster health checks\n[upgrade/version] You have chosen to change the cluster "
              "version to \"%s\"\n[upgrade/versions] Cluster version: %s\n[upgrade/versions] kubeadm version: %s"
              % (target, cur, kv))
        if vtuple(target) > vtuple(kv) and not flags.get("force"):
            sys.stderr.write("[upgrade/version] FATAL: the --version argument is invalid due to these errors:\n\n\t- "
                             "Specified version to upgrade to \"%s\" is higher than the kubeadm version \"%s\". "
                             "Upgrade kubeadm first using the tool you used to install kubeadm\n\nCan be bypassed if "
                             "you pass the --force flag\nTo see the stack trace of this error execute with --v=5 or "
                             "higher\n" % (target, kv))
            return 1
        if not (flags.get("y") or flags.get("yes") or flags.get("force")):
            sys.stdout.write("[upgrade] Are you sure you want to proceed? [y/N]: ")
            sys.stdout.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                sys.stderr.write("won't proceed; the user didn't answer (Y|y) in order to continue\n")
                return 1
        print('[upgrade/staticpods] Writing new Static Pod manifests to "%s"' % MANIFESTS)
        set_manifest_version(target)

        def upgraded():
            return client.call("GET", "/version", timeout=2).get("gitVersion") == target
        if wait_for("apiserver", upgraded, 300) is None:
            phase_fail("upgrade", "timed out waiting for the kube-apiserver to report %s" % target)
        print('[upgrade/staticpods] Component "kube-apiserver" upgraded successfully!')
        # as kubeadm does, the configuration is stored once the control plane is back: written
        # before, the PUT met the API server the kubelet was restarting (connection reset)
        print('[upload-config] Storing the configuration used in ConfigMap "kubeadm-config" in the "kube-system" '
              'Namespace')
        ccfg["kubernetesVersion"] = target
        cm["data"]["ClusterConfiguration"] = yaml.safe_dump(ccfg)

        def stored():
            client.call("PUT", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config", cm, timeout=5)
            return True
        if wait_for("kubeadm-config", stored, 60) is None:
            phase_fail("upload-config", "timed out storing the kubeadm-config ConfigMap")
        print('[upgrade/successful] SUCCESS! Your cluster was upgraded to "%s". Enjoy!\n\n[upgrade/kubelet] Now that '
              'your control plane is upgraded, please proceed with upgrading your kubelets if you haven\'t already '
              'done so.' % target)
        return 0
    sys.stderr.write('unknown command "%s" for "kubeadm upgrade"\n' % sub)
    return 1


def kubeadm_reset(args):
    flags, _ = kflags(args)
    if not (flags.get("f") or flags.get("force")):
        sys.stdout.write("W%s reset.go] [reset] WARNING: Changes made to this host by 'kubeadm init' or 'kubeadm "
                         "join' will be reverted.\n[reset] Are you sure you want to proceed? [y/N]: "
                         % now_utc().strftime("%m%d %H:%M:%S"))
        sys.stdout.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            sys.stderr.write("won't proceed; the user didn't answer (Y|y) in order to continue\n")
            return 1
    cp = os.path.exists(P(MANIFESTS + "/etcd.yaml"))
    print("[preflight] Running pre-flight checks")
    if init_system():
        print("[reset] Stopping the kubelet service")
        subprocess.run(["systemctl", "stop", "kubelet"], capture_output=True)
    else:
        print("[reset] Couldn't detect a kubelet service, can't stop it")
    print('[reset] Unmounting mounted directories in "%s"' % KUBELET_DIR)
    dirs = [MANIFESTS, KUBELET_DIR, PKI.rstrip("/")]
    if cp:
        print("[reset] Deleting contents of etcd directory: /var/lib/etcd")
        dirs.append("/var/lib/etcd")
    for d in dirs:
        for f in glob.glob(P(d) + "/*") + glob.glob(P(d) + "/.*"):
            shutil.rmtree(f, ignore_errors=True) if os.path.isdir(f) and not os.path.islink(f) else os.unlink(f)
    print("[reset] Deleting contents of directories: [%s]" % " ".join(d for d in dirs if d != "/var/lib/etcd"))
    files = ["admin.conf", "super-admin.conf", "kubelet.conf", "bootstrap-kubelet.conf", "controller-manager.conf",
             "scheduler.conf"]
    for f in files:
        if os.path.exists(P(KDIR + "/" + f)):
            os.unlink(P(KDIR + "/" + f))
    print("[reset] Deleting files: [%s]" % " ".join(KDIR + "/" + f for f in files))
    print("\nThe reset process does not clean CNI configuration. To do so, you must remove /etc/cni/net.d\n\nThe reset "
          "process does not reset or clean up iptables rules or IPVS tables.\nIf you wish to reset iptables, you must "
          "do so manually by using the \"iptables\" command.\n\nThe reset process does not clean your kubeconfig files "
          "and you must remove them manually.\nPlease, check the contents of the $HOME/.kube/config file.")
    return 0


def kubeadm_main(args):
    kv = engine_version("upstream")
    flags, pos = kflags(args)
    cmd = pos[0] if pos else ""
    if cmd == "version":
        info = {"major": str(vtuple(kv)[0]), "minor": str(vtuple(kv)[1]), "gitVersion": kv,
                "gitCommit": commit_of(kv, 40), "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": GO_VERSION, "compiler": "gc", "platform": "linux/amd64"}
        out = flags.get("o") or flags.get("output")
        if out == "short":
            print(kv)
        elif out == "json":
            print(json.dumps({"clientVersion": info}, indent=2))
        elif out == "yaml":
            print(yaml.safe_dump({"clientVersion": info}, default_flow_style=False).rstrip())
        else:
            print("kubeadm version: &version.Info{Major:\"%s\", Minor:\"%s\", GitVersion:\"%s\", GitCommit:\"%s\", "
                  "GitTreeState:\"clean\", BuildDate:\"%s\", GoVersion:\"%s\", Compiler:\"gc\", "
                  "Platform:\"linux/amd64\"}" % (info["major"], info["minor"], kv, info["gitCommit"],
                                                 info["buildDate"], GO_VERSION))
        return 0
    rest = args[args.index(cmd) + 1:] if cmd in args else []
    if cmd == "init" and rest[:2] == ["phase", "upload-certs"]:
        f2, _ = kflags(rest[2:])
        key = str(f2.get("certificate-key") or os.urandom(32).hex())
        upload_certs(admin_client(), key)
        return 0
    if cmd == "init":
        return kubeadm_init(rest)
    if cmd == "join":
        return kubeadm_join(rest)
    if cmd == "token":
        return kubeadm_token(rest)
    if cmd == "upgrade":
        return kubeadm_upgrade(rest)
    if cmd == "reset":
        return kubeadm_reset(rest)
    if cmd == "certs" and rest[:1] == ["certificate-key"]:
        print(os.urandom(32).hex())
        return 0
    sys.stderr.write('unknown command "%s" for "kubeadm"\n' % cmd)
    return 1


def kubelet_main(args):
    log = Logger("klog")
    v = engine_version("upstream")
    flags, _ = kflags(args)
    if flags.get("version"):
        print("Kubernetes " + v)
        return 0
    cfg_path = flags.get("config")
    if not cfg_path or read_file(cfg_path) is None:
        log.error('"command failed" err="failed to load kubelet config file, path: %s, error: failed to load Kubelet '
                  'config file %s, error failed to read kubelet config file \\"%s\\", error: open %s: no such file or '
                  'directory"' % (cfg_path, cfg_path, cfg_path, cfg_path))
        return 1
    def stale_flags():
        """Our arguments come from kubeadm-flags.env through the service manager: if it asks for flags we were
        not given (kubeadm rewrote it after we started), exit and be started again with them."""
        text = read_file(KUBELET_DIR + "/kubeadm-flags.env", "") or ""
        m = re.search(r'KUBELET_KUBEADM_ARGS="([^"]*)"', text)
        return bool(m) and not set(m.group(1).split()) <= set(args)
    kcfg = load_yaml_file(cfg_path) or {}
    cri = cri_problem(flags.get("container-runtime-endpoint") or kcfg.get("containerRuntimeEndpoint"))
    if cri:
        log.error('"command failed" err="failed to run Kubelet: %s"' % cri.replace('"', '\\"'))
        return 1
    kubeconfig = flags.get("kubeconfig") or KDIR + "/kubelet.conf"
    bootstrap = flags.get("bootstrap-kubeconfig")
    name = str(flags.get("hostname-override") or hostname()).lower()
    ip = str(flags.get("node-ip") or first_private_address())
    on_term()
    if stale_flags():
        log.info('"Flags in %s/kubeadm-flags.env differ from ours, exiting to be restarted with them"' % KUBELET_DIR)
        return 0
    if not os.path.exists(P(kubeconfig)):
        if not bootstrap or not os.path.exists(P(bootstrap)):
            log.error('"command failed" err="failed to run Kubelet: unable to load bootstrap kubeconfig: stat %s: no '
                      'such file or directory"' % (bootstrap or KDIR + "/bootstrap-kubelet.conf"))
            return 1
        tls_bootstrap(bootstrap, kubeconfig, name, log)
    mstatic = str(kcfg.get("staticPodPath") or MANIFESTS)
    api = load_yaml_file(mstatic + "/kube-apiserver.yaml")
    if api:
        start_static_apiserver(api, load_yaml_file(mstatic + "/etcd.yaml"), name, log)
    hz = (str(kcfg.get("healthzBindAddress") or "127.0.0.1"), int(kcfg.get("healthzPort") or 10248))
    threading.Thread(target=healthz_server, args=(hz, log), daemon=True).start()
    server, ca, crt, key, token = kubeconfig_parts(kubeconfig)
    labels = parse_labels([flags.get("node-labels", "")])
    taints = [parse_taint(t) for t in str(flags.get("register-with-taints", "")).split(",") if t]

    def network_ready(agent):
        for f in glob.glob(P("/etc/cni/net.d") + "/*"):
            if f.endswith((".conf", ".conflist", ".json")):
                return True
        try:
            dss = agent.call("GET", "/apis/apps/v1/daemonsets").get("items", [])
        except (ApiError, OSError, urllib.error.URLError):
            return False
        return any(d["metadata"]["name"] != "kube-proxy" for d in dss)
    agent = NodeAgent("upstream", name, ip, v, labels, taints, [Client(server, ca_pem=ca, crt_pem=crt, key_pem=key,
                                                                        token=token)], log, network_ready)
    log.info('"Starting kubelet" version="%s" node="%s"' % (v, name))
    sd_notify("READY=1")
    threading.Thread(target=agent.register_then_run, daemon=True).start()
    watch = [mstatic, cfg_path, kubeconfig]
    before = tree_digest(watch)
    while True:
        time.sleep(2)
        if stale_flags():
            log.info('"Flags in %s/kubeadm-flags.env changed, exiting to be restarted with them"' % KUBELET_DIR)
            sys.stderr.flush()
            os._exit(0)
        if tree_digest(watch) != before:
            # a changed static pod (kubeadm upgrade) or config restarts what runs from it: re-exec the kubelet
            log.info('"Static pod manifests or kubelet configuration changed, restarting"')
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
                     if os.path.basename(sys.argv[0]) in ("standin", "standin.py") else
                     [sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:])


def tree_digest(paths):
    h = hashlib.sha256()
    for p in paths:
        for f in sorted(glob.glob(P(p) + "/*") if os.path.isdir(P(p)) else [P(p)]):
            h.update(f.encode())
            try:
                with open(f, "rb") as fh:
                    h.update(fh.read())
            except OSError:
                h.update(b"-")
    return h.hexdigest()


def healthz_server(addr, log):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"ok"
            self.send_response(200 if self.path.startswith("/healthz") else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    while True:
        try:
            http.server.ThreadingHTTPServer(addr, H).serve_forever()
        except OSError as e:
            log.error('"Failed to start healthz server" err="%s"' % e)
            time.sleep(5)


def tls_bootstrap(bootstrap, kubeconfig, name, log):
    """The kubelet's TLS bootstrap: a CSR posted with the bootstrap token, signed by the controller manager."""
    server, ca, _, _, token = kubeconfig_parts(bootstrap)
    client = Client(server, ca_pem=ca, token=token)
    with tempfile.TemporaryDirectory() as d:
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", d + "/k", "-out", d + "/csr", "-subj", "/O=system:nodes/CN=system:node:" + name)
        key = open(d + "/k").read()
        csr = open(d + "/csr").read()
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"}, "spec": {"request": b64(csr), "usages": [
                "digital signature", "client auth"], "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}}
    while True:
        try:
            made = client.call("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", body)
            break
        except (ApiError, OSError, urllib.error.URLError) as e:
            log.error('"Failed to request signed certificate from the API server" err="%s"' % e)
            if isinstance(e, ApiError) and e.code == 401:
                sys.exit(1)
            time.sleep(2)
    cert = None
    while not cert:
        got = client.call("GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests/" + made["metadata"]["name"])
        cert = got.get("status", {}).get("certificate")
        time.sleep(0.2 if not cert else 0)
    stamp_ = now_utc().strftime("%Y-%m-%d-%H-%M-%S")
    pem = KUBELET_DIR + "/pki/kubelet-client-%s.pem" % stamp_
    write_file(pem, unb64(cert) + key, 0o600)
    cur = P(KUBELET_DIR + "/pki/kubelet-client-current.pem")
    if os.path.lexists(cur):
        os.unlink(cur)
    os.symlink(P(pem), cur)
    write_file(kubeconfig, "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: %s\n"
               "  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n"
               "    user: default-auth\n  name: default-context\ncurrent-context: default-context\nkind: Config\n"
               "preferences: {}\nusers:\n- name: default-auth\n  user:\n    client-certificate: %s\n    client-key: "
               "%s\n" % (b64(ca), server, KUBELET_DIR + "/pki/kubelet-client-current.pem",
                         KUBELET_DIR + "/pki/kubelet-client-current.pem"), 0o600)
    log.info('"Certificate rotation detected, shutting down client connections to start using new credentials"')


def start_static_apiserver(pod, etcd, name, log):
    """The kube-apiserver static pod, run in the kubelet's process: version from the image tag, flags from the
    command, state in etcd's data dir, peers from etcd's initial cluster."""
    c = pod["spec"]["containers"][0]
    fl = dict(a[2:].split("=", 1) for a in c.get("command", []) if a.startswith("--") and "=" in a)
    version = c["image"].rsplit(":", 1)[1]
    ip = fl.get("advertise-address", first_private_address())
    port = int(fl.get("secure-port", 6443))
    efl = dict(a[2:].split("=", 1) for a in ((etcd or {}).get("spec", {}).get("containers", [{}])[0]
                                             .get("command", [])) if a.startswith("--") and "=" in a)
    data_dir = efl.get("data-dir", "/var/lib/etcd")
    seeds = []
    for member in efl.get("initial-cluster", "").split(","):
        if "=" in member:
            host = urllib.parse.urlsplit(member.split("=", 1)[1]).hostname
            if host and host != ip:
                seeds.append("https://%s:%d" % (host, port))
    store = Store(data_dir + "/standin-state.json", name)
    admin_crt, admin_key = make_cert(PKI + "ca.crt", PKI + "ca.key", "kube-apiserver-peer", "system:masters",
                                     client=True, kind="rsa")
    ca = read_file(PKI + "ca.crt")
    if seeds and not store.entries:
        for _ in range(30):
            try:
                store.merge(Client(seeds[0], ca_pem=ca, crt_pem=admin_crt, key_pem=admin_key).call(
                    "GET", "/v1-standin/state", timeout=5)["entries"])
                break
            except (ApiError, OSError, urllib.error.URLError) as e:
                log.error('"Waiting for etcd peer" peer="%s" err="%s"' % (seeds[0], e))
                time.sleep(1)
    cluster = Cluster("upstream", store, version, PKI + "ca.crt", PKI + "ca.key",
                      fl.get("client-ca-file", PKI + "ca.crt"), PKI + "ca.key", ip, port, port, log)
    on_term(store.flush)
    if not store.entries:
        init_cluster_objects(cluster, re.sub(r"\.0/\d+$", ".1", fl.get("service-cluster-ip-range", "10.96.0.0/12")))
    serve(cluster, None, listen_addrs(ip, port, fl.get("bind-address")), fl.get("tls-cert-file", PKI + "apiserver.crt"),
          fl.get("tls-private-key-file", PKI + "apiserver.key"), fl.get("client-ca-file", PKI + "ca.crt"))
    threading.Thread(target=PeerSync(cluster, ca, admin_crt, admin_key, log, seeds).run, daemon=True).start()
    threading.Thread(target=cluster.monitor, daemon=True).start()
    log.info('"Static pod running" pod="kube-system/kube-apiserver-%s" version="%s" address="%s:%d"'
             % (name, version, ip, port))



# ---------------------------------------------------------------- ctr (for hosts without Debian's containerd)

CTR_RECORD = "/var/lib/containerd/standin-images.json"


def ctr_main(args):
    ns = "default"
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in ("-n", "--namespace"):
            ns = args[i + 1]
            i += 2
        elif a.startswith("--namespace=") or a.startswith("-n="):
            ns = a.split("=", 1)[1]
            i += 1
        elif a in ("-a", "--address", "--timeout", "--connect-timeout"):
            i += 2
        else:
            i += 1
    rest = args[i:]
    if rest[:1] == ["version"] or rest[:1] == ["--version"]:
        print("Client:\n  Version:  1.6.20~ds1\n  Revision: 1.6.20~ds1-1+b1\n  Go version: go1.19.8\n\n"
              "Server:\n  Version:  1.6.20~ds1\n  Revision: 1.6.20~ds1-1+b1\n  UUID: standin")
        return 0
    if rest[:1] in (["images"], ["image"], ["i"]) and len(rest) >= 2:
        sub = rest[1]
        opts = [a for a in rest[2:] if a.startswith("-")]
        files = [a for a in rest[2:] if not a.startswith("-")]
        record = json.loads(read_file(CTR_RECORD, "{}") or "{}")
        if sub == "import":
            if not files:
                sys.stderr.write("ctr: please provide an image archive\n")
                return 1
            for f in files:
                try:
                    refs = image_refs(P(f) if os.path.exists(P(f)) else f)
                except (ValueError, OSError) as e:
                    sys.stderr.write("ctr: %s\n" % e)
                    return 1
                for r in refs:
                    digest = "sha256:" + hashlib.sha256((r + f).encode()).hexdigest()
                    record.setdefault(ns, {})[r] = {"source": f, "digest": digest}
                    print("unpacking %s (%s)...done" % (r, digest))
            write_file(CTR_RECORD, json.dumps(record, indent=1, sort_keys=True), 0o644)
            return 0
        if sub in ("ls", "list"):
            quiet = "-q" in opts or "--quiet" in opts
            imgs = record.get(ns, {})
            if not quiet:
                print("%-60s %-55s %-72s %-8s %-12s %s" % ("REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"))
            for r in sorted(imgs):
                if quiet:
                    print(r)
                else:
                    print("%-60s %-55s %-72s %-8s %-12s %s" % (
                        r, "application/vnd.docker.distribution.manifest.v2+json", imgs[r]["digest"], "-",
                        "linux/amd64", "-"))
            return 0
    sys.stderr.write("ctr: the stand-in knows `images import|ls` and `version` only\n")
    return 1


# ---------------------------------------------------------------- entry

def stamp(version, out):
    """Writes a copy of this program that reports `version`: what a package build does."""
    if not re.match(r"^v\d+\.\d+\.\d+(\+(rke2r|k3s)\d+)?$", version):
        sys.stderr.write("stamp: not an engine version: %s\n" % version)
        return 1
    with open(os.path.abspath(__file__)) as f:
        src = f.read()
    src, n = re.subn(r"(?m)^VERSION = .*$", "VERSION = %r" % version, src, count=1)
    assert n == 1
    with open(out + ".tmp", "w") as f:
        f.write(src)
    os.chmod(out + ".tmp", 0o755)
    os.rename(out + ".tmp", out)
    return 0


def main(argv):
    name = os.path.basename(argv[0])
    args = argv[1:]
    if name in ("standin", "standin.py"):
        if args[:1] == ["stamp"] and len(args) == 3:
            return stamp(args[1], args[2])
        if args and args[0] in ("rke2", "k3s", "kubeadm", "kubelet", "ctr"):
            name, args = args[0], args[1:]
        else:
            sys.stderr.write("usage: standin stamp VERSION OUT | standin rke2|k3s|kubeadm|kubelet|ctr ARGS...\n")
            return 2
    if name in ("rke2", "k3s"):
        return rancher_main(name, args)
    if name == "kubeadm":
        return kubeadm_main(args)
    if name == "kubelet":
        return kubelet_main(args)
    if name == "ctr":
        return ctr_main(args)
    sys.stderr.write("standin: unknown name %s\n" % name)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
