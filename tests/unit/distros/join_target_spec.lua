-- Unit spec: each engine's join_target and listen_ports, what the dry run's forecast probes (issue 23).
local engine = require "distros.engine"

local leader = { name = "c1", role = "controller", fqdn = "c1.example.internal", private_address = "10.0.0.1" }
local c2 = { name = "c2", role = "controller", fqdn = "c2.example.internal" }
local w1 = { name = "w1", role = "worker", hostname = "w1" }

local function view(lb)
  return { leader = leader, controllers = { leader, c2 }, nodes = { leader, c2, w1 }, loadbalancer = lb }
end

describe("engine join_target", function()
  it("is nothing for the leader, which joins no one", function()
    for _, t in ipairs(engine.TYPES) do assert.is_nil(engine.load(t):join_target(leader, view("lb.example"))) end
  end)

  it("rancher engines: agents join the load balancer, servers the leader by the name it is joined by", function()
    for t, port in pairs { k3s = 6443, rke2 = 9345 } do
      local e = engine.load(t)
      assert.are.same({ host = "lb.example", port = port, what = "the load balancer" },
        e:join_target(w1, view("lb.example")))
      local s = e:join_target(c2, view("lb.example"))
      assert.are.same({ "c1.example.internal", port, "the leader c1" }, { s.host, s.port, s.what })
    end
  end)

  it("upstream: every node joins the control-plane endpoint, the load balancer", function()
    local e = engine.load("upstream")
    local lb = { host = "lb.example", port = 6443, what = "the load balancer" }
    assert.are.same(lb, e:join_target(c2, view("lb.example")))
    assert.are.same(lb, e:join_target(w1, view("lb.example")))
    local t = e:join_target(w1, view(nil))
    assert.are.same({ "c1.example.internal", 6443 }, { t.host, t.port })
  end)

  it("lists the ports each engine's role must find free", function()
    assert.are.same({ 6443, 10250 }, engine.load("k3s").listen_ports.controller)
    assert.are.same({ 10250 }, engine.load("rke2").listen_ports.worker)
    for _, t in ipairs(engine.TYPES) do
      local p = engine.load(t).listen_ports
      assert.is_true(#p.controller > 0 and #p.worker > 0, t)
    end
  end)
end)
