-- Specs of cargoship.action: the records assess returns, their checks and what of them may be shown.
local action = require "cargoship.action"

describe("action records", function()
  it("carry a stable kind and a sentence, filled in when the phase gives none", function()
    local w = action.write { path = "/etc/x.conf", content = "a=1\n", mode = "644" }
    assert.are.same({ "write", "write /etc/x.conf (4 bytes, mode 0644)", "0644" }, { w.kind, w.say, w.mode })
    assert.are.equal("start service k3s", action.service { verb = "start", service = "k3s" }.say)
    assert.are.equal("run echo one", action.run { cmd = "echo one\necho two" }.say)
    assert.are.equal("upload /opt/a.tar (10 bytes)",
      action.upload { path = "/opt/a.tar", source = "/tmp/a.tar", sha256 = "ab", size = 10 }.say)
    assert.are.equal("remove /tmp/old", action.remove { path = "/tmp/old" }.say)
    assert.are.equal("wait for h1 Ready", action.step { name = "ready", say = "wait for h1 Ready" }.say)
  end)

  it("write an empty file: empty content is content", function()
    local w = action.write { path = "/var/lib/cargoship/manifest.txt", content = "" }
    assert.are.equal("write /var/lib/cargoship/manifest.txt (0 bytes)", w.say)
  end)

  it("refuse misuse, naming the field", function()
    assert.has_error(function() action.write { path = "/x" } end, "action write: content must be a string, not nil")
    assert.has_error(function() action.write { path = "/x", content = "", mode = "0999" } end)
    assert.has_error(function() action.run { cmd = "" } end)
    assert.has_error(function() action.service { verb = "explode", service = "k3s" } end)
    assert.has_error(function() action.step { name = "drain" } end)
    assert.has_error(function() action.check { kind = "teleport" } end)
  end)

  it("name a kubectl operation's verb and node, and show them with its command in the plan", function()
    local d = action.kube { verb = "drain", node = "w1", cmd = "kubectl drain w1" }
    assert.are.same({ "kube", "kubectl drain node w1" }, { d.kind, d.say })
    assert.are.equal("kubectl delete node w2", action.kube { verb = "delete_node", node = "w2", cmd = "x" }.say)
    assert.are.equal("kubectl apply -f /var/lib/cargoship/m.yaml",
      action.kube { verb = "apply", path = "/var/lib/cargoship/m.yaml", node = "cp1", cmd = "x" }.say)
    assert.are.same({ kind = "kube", say = "kubectl drain node w1", verb = "drain", node = "w1",
      cmd = "kubectl drain w1" }, action.public(d))
    assert.is_nil(action.public(action.kube { verb = "label", node = "w1", cmd = "kubectl label t=s3cr3t",
      secret = true }).cmd)
    assert.has_error(function() action.kube { verb = "reboot", node = "w1", cmd = "x" } end,
      "action kube: unknown verb reboot")
    assert.has_error(function() action.kube { verb = "drain", cmd = "x" } end)
    assert.has_error(function() action.kube { verb = "apply", node = "cp1", cmd = "x" } end)
    assert.has_error(function() action.kube { verb = "cordon", node = "w1" } end)
    assert.are.equal(d, action.check(d))
  end)

  it("show neither file content, stdin nor a secret command in their public part", function()
    local w = action.public(action.write { path = "/etc/rancher/k3s/config.yaml", content = "token: s3cr3t\n" })
    assert.is_nil(w.content)
    assert.are.equal("/etc/rancher/k3s/config.yaml", w.path)
    local r = action.public(action.run { cmd = "echo hi", stdin = "s3cr3t" })
    assert.are.same({ "echo hi", nil }, { r.cmd, r.stdin })
    local s = action.public(action.run { cmd = "kubeadm join --token s3cr3t", secret = true, say = "join" })
    assert.is_nil(s.cmd)
    assert.are.equal("join", s.say)
  end)
end)
