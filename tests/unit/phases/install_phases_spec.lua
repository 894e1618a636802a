-- Specs for phases 19-22 as a real run drives them: order across hosts, waiting for Ready, failures naming the cause.
--
-- Hosts are real Host objects (not dry run) over scripted connections: each command is
-- answered by the first rule whose pattern it contains, and recorded per host, so a spec
-- can say which host ran what, in which order.
local common = require "cargoship.phases.lib.engine_common"
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

-- The package stages the k3s binary beside its target (the upload phases' binary method).
local K3S = { type = "k3s", version = "1.35.2-k3s1", engine = {}, manifests = {},
              os_files = { { selector = { package = "binary" }, staged = "/dev/null", target = "/usr/local/bin/k3s",
                             mode = "0755" } } }
local K3S_NO_FILES = { type = "k3s", version = "1.35.2-k3s1", engine = {}, manifests = {} }

local journal = {}   -- every command of every host, in order: "cp1: systemctl enable 'k3s-server'"

-- An engine's start on systemd, as the OS configurer spells it: it does not wait for the
-- engine to report ready (the Ready wait watches the unit's state and log instead).
local SYSTEMD = os_registry.by_name("debian"):new { service_manager = "systemd" }
local function start_cmd(svc) return (SYSTEMD:service("start", svc, { nowait = true })) end

-- rules: list of {pattern, out, code} or {pattern, fn = function(cmd) -> out, code}
local function conn(name, rules)
  return support.scripted(name, rules, function(line) journal[#journal + 1] = line end)
end

-- o.staged: the upload phases staged the k3s binary there (the install probe finds it).
local function host(name, role, rules, o)
  o = o or {}
  if o.staged then table.insert(rules, 1, { ".cargoship-staged' ] && echo S1", "S1\n", 0 }) end
  local h = host_mod.new { config = { index = 1, name = name, role = role, profile = o.profile,
                                      engine = { labels = {}, taints = {} } }, dry_run = false }
  h:attach(conn(name, rules or {}))
  h.os = os_registry.by_name("debian"):new { service_manager = o.manager or "systemd" }
  h.facts = { node_name = name, hostname = name, private_address = o.address or "10.253.11.1",
              engine = { running = o.running or false, action = o.action or "install", joined = o.joined } }
  return h
end

local function context(hosts, o)
  o = o or {}
  local ctx = support.ctx(hosts, { dry_run = false, distro = o.distro or K3S,
                                   cluster = o.cluster or { name = "lab", loadbalancer = "10.253.11.10",
                                                            hosts = {}, profiles = o.profiles or {} },
                                   options = o.options })
  ctx.join_secret = { token = string.rep("T", 64), agent_token = string.rep("A", 64) }
  return ctx
end

local drive = support.drive

local function run(fn)
  local ok, a, b = loop.run(fn)
  assert(ok, a)
  return a, b
end

local function grep(pattern)
  local out = {}
  for _, l in ipairs(journal) do
    if l:find(pattern, 1, true) then out[#out + 1] = l end
  end
  return out
end

local STAGED = true
local phase_worker = require "cargoship.phases.initialize_worker"

before_each(function()
  journal = {}
  common.READY_INTERVAL = 0.01
  common.READY_TIMEOUT = 2
end)

describe("Initialize Controller", function()
  local phase = require "cargoship.phases.initialize_controller"

  it("starts the leader first, then each other controller only once the one before is Ready", function()
    local ready = {}
    local leader_rules = {
      { "start --no-block 'k3s-server'", fn = function() ready.cp1 = true; return "", 0 end },
      { "'get' 'nodes'", fn = function()
          local lines = {}
          for _, n in ipairs { "cp1", "cp2", "cp3" } do
            if ready[n] ~= nil then lines[#lines + 1] = n .. " " .. (ready[n] and "True" or "False") end
          end
          if ready.cp2 and not ready.cp3 then ready.cp2_seen = #journal end
          return table.concat(lines, "\n") .. "\n", 0
        end },
    }
    local cp1 = host("cp1", "controller", leader_rules, { staged = STAGED })
    local cp2 = host("cp2", "controller", { { "start --no-block 'k3s-server'",
      fn = function() ready.cp2 = true; return "", 0 end } }, { staged = STAGED })
    local cp3 = host("cp3", "controller", { { "start --no-block 'k3s-server'",
      fn = function() ready.cp3 = true; return "", 0 end } }, { staged = STAGED })
    local ctx = context({ cp2, cp1, cp3 })
    ctx.leader = cp1
    assert.is_true(run(function() return drive(phase, ctx) end))
    local starts = grep("start --no-block 'k3s-server'")
    local start = start_cmd("k3s-server")
    assert.same({ "cp1: " .. start, "cp2: " .. start, "cp3: " .. start }, starts)
    -- every Ready check ran on the leader, and cp3 started after cp2 was Ready
    for _, l in ipairs(grep("'get' 'nodes'")) do assert.matches("^cp1: ", l) end
    local pos = {}
    for i, l in ipairs(journal) do pos[l] = pos[l] or i end
    assert.is_truthy(ready.cp2_seen)
    assert.is_true(ready.cp2_seen < pos["cp3: " .. start])
    -- the staged binary was moved into place before the start
    local moved = pos["cp1: mv -f -- '/usr/local/bin/k3s.cargoship-staged' '/usr/local/bin/k3s'"]
    assert.is_true(moved < pos["cp1: " .. start])
  end)

  it("a server that fails to start fails naming the host, the cause and the service's recent log", function()
    local cp1 = host("cp1", "controller", {
      { "start --no-block 'k3s-server'", "Job for k3s-server.service failed", 1 },
      { "journalctl", "level=fatal msg=\"starting kubernetes: preparing server: bad token\"", 0 },
    }, { staged = STAGED })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    local ok, err = run(function() return drive(phase, ctx) end)
    assert.is_nil(ok)
    assert.matches("^cp1: ", err)
    assert.matches("Job for k3s-server.service failed", err, 1, true)
    assert.matches("recent log of k3s-server", err, 1, true)
    assert.matches("preparing server: bad token", err, 1, true)
  end)

  it("not installed and nothing staged: the plan says so, naming the host", function()
    local cp1 = host("cp1", "controller", {})
    local ctx = context({ cp1 }, { distro = K3S_NO_FILES })
    ctx.leader = cp1
    local ok, err = run(function() return pcall(drive, phase, ctx) end)
    assert.is_false(ok)
    assert.matches("cp1: k3s is not installed and no engine files were staged", err, 1, true)
    assert.same({}, grep("systemctl start"))
  end)

  it("a node that never gets Ready fails with the leader's last answer", function()
    local saved = common.READY_TIMEOUT
    common.READY_TIMEOUT = 0.05
    local cp1 = host("cp1", "controller", { { "'get' 'nodes'", "cp1 False\n", 0 } }, { action = "same" })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    local ok, err = run(function() return drive(phase, ctx) end)
    common.READY_TIMEOUT = saved
    assert.is_nil(ok)
    assert.matches("node cp1 is not Ready", err, 1, true)
    assert.matches("through cp1's kubectl: Ready is False", err, 1, true)
  end)

  it("a node the cluster knew before is Ready for this start only after a newer heartbeat", function()
    -- a wrong token: the old registration stays Ready for the grace period, its heartbeat old
    local beats = { "cp1 True 2026-12-01T10:00:00Z", "cp1 True 2026-12-01T10:00:00Z", "cp1 True 2026-12-01T10:00:09Z" }
    local asked = 0
    local cp1 = host("cp1", "controller", { { "'get' 'nodes'", fn = function()
      asked = asked + 1
      return beats[math.min(asked, #beats)], 0
    end } }, { staged = STAGED })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    ctx.nodes = { { name = "cp1", host = cp1, ready = "True", heartbeat = "2026-12-01T10:00:00Z" } }
    assert.is_true(run(function() return drive(phase, ctx) end))
    assert.equal(3, asked)
    -- never newer: fails, saying why
    asked, beats = 0, { "cp1 True 2026-12-01T10:00:00Z" }
    local saved = common.READY_TIMEOUT
    common.READY_TIMEOUT = 0.05
    local cp1b = host("cp1", "controller", { { "'get' 'nodes'", "cp1 True 2026-12-01T10:00:00Z\n", 0 } },
      { staged = STAGED })
    ctx = context({ cp1b })
    ctx.leader = cp1b
    ctx.nodes = { { name = "cp1", host = cp1b, ready = "True", heartbeat = "2026-12-01T10:00:00Z" } }
    local ok, err = run(function() return drive(phase, ctx) end)
    common.READY_TIMEOUT = saved
    assert.is_nil(ok)
    assert.matches("no heartbeat from its kubelet since the start", err, 1, true)
  end)

  it("a controller whose service runs but never joined is configured and restarted", function()
    local cp1 = host("cp1", "controller", { { "'get' 'nodes'", "cp1 True 2026-12-01T10:00:09Z\n", 0 } },
      { running = true, joined = false, action = "same" })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    assert.is_true(run(function() return drive(phase, ctx) end))
    assert.same({ "cp1: " .. SYSTEMD:service("restart", "k3s-server", { nowait = true }) }, grep("systemctl restart"))
    assert.same({}, grep("systemctl start"))
    assert.is_false(common.settled(cp1))
  end)

  it("a running controller has nothing to do", function()
    local cp1 = host("cp1", "controller", {}, { running = true, action = "same" })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    local ok, what = run(function() return drive(phase, ctx) end)
    assert.is_true(ok)
    assert.equal("nothing", what)
    assert.same({}, journal)
  end)
end)

describe("Initialize Worker", function()
  local phase = require "cargoship.phases.initialize_worker"

  it("starts workers in per-profile batches of the profile's concurrency", function()
    local all_ready = "cp1 True\nw1 True\nw2 True\nw3 True\nw4 True\nw5 True\n"
    local leader = host("cp1", "controller", { { "'get' 'nodes'", all_ready, 0 } },
      { running = true, action = "same" })
    local ws = {}
    for i = 1, 5 do
      ws[i] = host("w" .. i, "worker", {}, { action = "same", profile = i <= 3 and "small" or nil })
    end
    local hosts = { leader, ws[1], ws[2], ws[3], ws[4], ws[5] }
    local ctx = context(hosts, { profiles = { small = { name = "small", concurrency = { kind = "fixed", value = 2 } } },
                                 options = { concurrency = 10 } })
    ctx.leader = leader
    local batches = {}
    local each = ctx.each
    function ctx.each(self, list, fn)
      local names = {}
      for _, h in ipairs(list) do names[#names + 1] = h.name end
      batches[#batches + 1] = table.concat(names, ",")
      return each(self, list, fn)
    end
    assert.is_true(run(function() return drive(phase, ctx) end))
    assert.same({ "w1,w2", "w3", "w4,w5" }, batches)
    assert.equal(5, #grep("start --no-block 'k3s-agent'"))
  end)

  it("a worker whose controller is unreachable fails naming the host and the agent's log", function()
    local leader = host("cp1", "controller", { { "'get' 'node'", "NotFound", 1 } }, { running = true, action = "same" })
    local w1 = host("w1", "worker", {
      { "start --no-block 'k3s-agent'", "", 0 },
      { "journalctl", "dial tcp 10.253.11.10:6443: connect: no route to host", 0 },
    }, { action = "same" })
    local saved = common.READY_TIMEOUT
    common.READY_TIMEOUT = 0.05
    local ctx = context({ leader, w1 })
    ctx.leader = leader
    local ok, failures = run(function() return drive(phase, ctx) end)
    common.READY_TIMEOUT = saved
    assert.is_nil(ok)
    local msg = support.errors(failures)[1]
    assert.matches("w1: ", msg, 1, true)
    assert.matches("node w1 is not Ready", msg, 1, true)
    assert.matches("connect: no route to host", msg, 1, true)
  end)

  it("a worker whose node password the cluster rejects fails at once with the engine's cause", function()
    -- a host reinstalled under an existing node's name: its old node stays registered (Ready
    -- for the grace period), and the agent retries the refused password for ever
    local rejected = 'level=info msg="Waiting to retrieve agent configuration; server is not ready: Node password'
      .. " rejected, duplicate hostname or contents of '/etc/rancher/node/password' may not match server"
      .. ' node-passwd entry, try enabling a unique node name with the --with-node-id flag"\n'
    local reads = 0
    local leader = host("cp1", "controller", { { "'get' 'nodes'", "cp1 True 2026-12-01T10:00:09Z\n"
      .. "w1 True 2026-12-01T10:00:00Z\n", 0 } }, { running = true, action = "same" })
    local w1 = host("w1", "worker", {
      { "start --no-block 'k3s-agent'", "", 0 },
      { "journalctl", fn = function()
        reads = reads + 1
        return 'level=info msg="Starting k3s agent v1.35.2+k3s1"\n' .. string.rep(rejected, reads - 1), 0
      end },
    }, { staged = STAGED })
    local saved, saved_iv = common.READY_TIMEOUT, common.REFUSAL_INTERVAL
    common.READY_TIMEOUT, common.REFUSAL_INTERVAL = 30, 0
    local ctx = context({ leader, w1 })
    ctx.leader = leader
    ctx.nodes = { { name = "w1", host = w1, ready = "True", heartbeat = "2026-12-01T10:00:00Z" } }
    local t0 = ctx:now()
    local ok, failures = run(function() return drive(phase, ctx) end)
    common.READY_TIMEOUT, common.REFUSAL_INTERVAL = saved, saved_iv
    assert.is_nil(ok)
    assert.is_true(ctx:now() - t0 < 5, "waited the whole start timeout")
    local msg = support.errors(failures)[1]
    assert.matches("w1: node w1: its engine refused the start: Node password rejected, duplicate hostname", msg, 1,
      true)
    assert.matches("kubectl delete node w1,", msg, 1, true)
  end)

  it("an engine's refusal logged before this start is not this start's", function()
    local old = "Node password rejected, duplicate hostname\n"
    local leader = host("cp1", "controller", { { "'get' 'nodes'", fn = function()
      return "cp1 True 2026-12-01T10:00:09Z\nw1 True 2026-12-01T10:00:09Z\n", 0 end } },
      { running = true, action = "same" })
    local w1 = host("w1", "worker", { { "start --no-block 'k3s-agent'", "", 0 }, { "journalctl", old, 0 } },
      { staged = STAGED })
    local saved_iv = common.REFUSAL_INTERVAL
    common.REFUSAL_INTERVAL = 0
    local ctx = context({ leader, w1 })
    ctx.leader = leader
    assert.is_true(run(function() return drive(phase, ctx) end))
    common.REFUSAL_INTERVAL = saved_iv
  end)
end)

-- A Type=notify unit as systemd runs it for an engine that never reports ready: a start that
-- waits blocks (here `block` seconds, for ever on a host); one that does not returns at once.
-- The unit's state is what `state()` says (systemctl show's lines), parsed by the real start_failed
-- command in a real sh; `log()` is its journal.
local function systemd_rules(svc, block, state, log)
  return {
    { "systemctl show -p ActiveState", fn = function(cmd)
      local fake = "systemctl() { printf '%s\\n' " .. require("cargoship.util").quote(state()) .. "; }\n"
      local p = assert(io.popen("sh -c " .. require("cargoship.util").quote(fake .. cmd) .. "; echo \"~$?\""))
      local out = p:read("a")
      p:close()
      local text, code = out:match("^(.-)~(%d+)%s*$")
      return text, tonumber(code)
    end },
    { "journalctl", fn = function() return log(), 0 end },
    { "'" .. svc .. "'", fn = function(cmd)
      if cmd:find("systemctl start '" .. svc .. "'", 1, true) then loop.sleep(block) end
      return "", 0
    end },
  }
end

local REJECTED = 'level=info msg="Waiting to retrieve agent configuration; server is not ready: Node password'
  .. " rejected, duplicate hostname or contents of '/etc/rancher/node/password' may not match server"
  .. ' node-passwd entry, try enabling a unique node name with the --with-node-id flag"\n'
local STARTING = "ActiveState=activating\nSubState=start\nResult=success\nExecMainStatus=0\n"
  .. "ActiveEnterTimestampMonotonic=0\nInactiveExitTimestampMonotonic=24641549160"

-- w1 (a reinstalled host under an existing node's name) joins a cluster whose leader lists
-- the old w1 node Ready; READY_TIMEOUT 30. -> ok, the first failure, seconds taken
local function refused_join(w1)
  local leader = host("cp1", "controller", { { "'get' 'nodes'", "cp1 True 2026-12-01T10:00:09Z\n"
    .. "w1 True 2026-12-01T10:00:00Z\n", 0 } }, { running = true, action = "same" })
  local saved, saved_iv = common.READY_TIMEOUT, common.REFUSAL_INTERVAL
  common.READY_TIMEOUT, common.REFUSAL_INTERVAL = 30, 0.05
  local ctx = context({ leader, w1 })
  ctx.leader = leader
  ctx.nodes = { { name = "w1", host = w1, ready = "True", heartbeat = "2026-12-01T10:00:00Z" } }
  local t0 = ctx:now()
  local ok, failures = run(function() return drive(phase_worker, ctx) end)
  common.READY_TIMEOUT, common.REFUSAL_INTERVAL = saved, saved_iv
  -- the host's own error: the message an operator reads under its name
  return ok, type(failures) == "table" and tostring(failures[1].err) or failures, ctx:now() - t0
end

describe("a start the engine refuses or that fails, on both service managers", function()
  local WANT = "w1: node w1: its engine refused the start: Node password rejected, duplicate hostname or contents of"
    .. " '/etc/rancher/node/password' may not match server node-passwd entry, try enabling a unique node name with"
    .. " the --with-node-id flag (the cluster knows this node name with another node password: delete the node"
    .. " (kubectl delete node w1, which removes its password secret) or give the host another name)"

  it("systemd: a refused node password fails in seconds: the start does not wait for the engine's READY", function()
    local reads = 0
    local w1 = host("w1", "worker", systemd_rules("k3s-agent", 8, function() return STARTING end, function()
      reads = reads + 1
      return 'level=info msg="Starting k3s agent v1.35.2+k3s1"\n' .. string.rep(REJECTED, reads - 1)
    end), { staged = STAGED })
    local ok, msg, secs = refused_join(w1)
    assert.is_nil(ok)
    assert.is_true(secs < 5, secs .. " s: the start waited for the engine")
    assert.are.equal(WANT, msg:match("^[^\n]*"))
    assert.matches("--- recent log of k3s-agent ---", msg, 1, true)
    assert.are.equal(1, #grep("systemctl start --no-block 'k3s-agent'"))
  end)

  it("runit: the same refusal fails in seconds with the same message", function()
    local reads = 0
    local w1 = host("w1", "worker", {
      { "sv up '/etc/service/k3s-agent'", "", 0 },
      { "tail -n 50", fn = function()
        reads = reads + 1
        return 'level=info msg="Starting k3s agent v1.35.2+k3s1"\n' .. string.rep(REJECTED, reads - 1), 0
      end },
    }, { staged = STAGED, manager = "runit" })
    local ok, msg, secs = refused_join(w1)
    assert.is_nil(ok)
    assert.is_true(secs < 5, secs .. " s")
    assert.are.equal(WANT, msg:match("^[^\n]*"))
    assert.matches("--- recent log of k3s-agent ---", msg, 1, true)
    assert.same({}, grep("systemctl"))
  end)

  it("systemd: an engine that exits during its start fails at once with the unit's state and its log", function()
    local asked = 0
    local w1 = host("w1", "worker", systemd_rules("k3s-agent", 8, function()
      asked = asked + 1
      if asked < 3 then return STARTING end
      return "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"
        .. "ActiveEnterTimestampMonotonic=0\nInactiveExitTimestampMonotonic=24641549160"
    end, function()
      return 'level=fatal msg="Failed to validate connection to cluster at https://10.253.11.10:6443: failed to get'
        .. ' CA certs: https://10.253.11.10:6443/cacerts: 401 Unauthorized"\n'
    end), { staged = STAGED })
    local ok, msg, secs = refused_join(w1)
    assert.is_nil(ok)
    assert.is_true(secs < 5, secs .. " s")
    assert.are.equal("w1: node w1: its engine's service did not start: systemd: k3s-agent is activating"
      .. " (auto-restart) after its start failed (result exit-code, exit status 1)", msg:match("^[^\n]*"))
    assert.matches("--- recent log of k3s-agent ---", msg, 1, true)
    assert.matches("cacerts: 401 Unauthorized", msg, 1, true)
  end)

  it("systemd: a normal start still waits for Ready, watching the unit while it starts", function()
    local leader_asked = 0
    local leader = host("cp1", "controller", { { "'get' 'nodes'", fn = function()
      leader_asked = leader_asked + 1
      return "cp1 True 2026-12-01T10:00:09Z\n" .. (leader_asked >= 4 and "w1 True 2026-12-01T10:00:09Z\n" or ""), 0
    end } }, { running = true, action = "same" })
    -- up after this start, then down once and restarting: not this start's failure
    local w1 = host("w1", "worker", systemd_rules("k3s-agent", 8, function()
      return "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nExecMainStatus=1\n"
        .. "ActiveEnterTimestampMonotonic=24641559160\nInactiveExitTimestampMonotonic=24641549160"
    end, function() return "" end), { staged = STAGED })
    local ctx = context({ leader, w1 })
    ctx.leader = leader
    -- the unit's state is first asked a STATE_INTERVAL into the wait (Ready at once costs no probe)
    local saved = common.STATE_INTERVAL
    common.STATE_INTERVAL = 0.01
    local ok = run(function() return drive(phase_worker, ctx) end)
    common.STATE_INTERVAL = saved
    assert.is_true(ok)
    assert.is_true(leader_asked >= 4)
    assert.is_true(#grep("w1: systemctl show -p ActiveState") >= 1)
  end)
end)

describe("waiting for Ready", function()
  it("nodes waited for at once share one listing a round on the leader", function()
    local calls, up = 0, {}
    local leader = host("cp1", "controller", { { "'get' 'nodes'", fn = function()
      calls = calls + 1
      loop.sleep(0.02)   -- a kubectl run takes a while: the other waiters queue behind it
      local lines = { "cp1 True" }
      for i = 1, 6 do lines[#lines + 1] = "w" .. i .. " " .. (up["w" .. i] and "True" or "False") end
      return table.concat(lines, "\n") .. "\n", 0
    end } }, { running = true, action = "same" })
    local ctx = context({ leader })
    ctx.leader = leader
    local cmd = ctx.engine:ready_check("w1")
    assert.equal(cmd, ctx.engine:ready_check("w5"))   -- one command for every node
    local results = {}
    run(function()
      local tasks = {}
      for i = 1, 5 do
        tasks[i] = loop.spawn(function()
          results[i] = { common.steps.wait_ready(ctx, leader, { node = "w" .. i, cmd = cmd }) }
        end)
      end
      loop.sleep(0.1)
      for i = 1, 5 do up["w" .. i] = true end
      for i = 1, 5 do tasks[i]:join() end
    end)
    for i = 1, 5 do assert.same({ true }, results[i]) end
    -- about 0.1 s of polls every 0.01 s plus one to see them Ready: rounds, not rounds x 5
    local rounds = calls
    assert.is_true(rounds >= 2, "polled " .. rounds .. " times")
    assert.is_true(rounds <= 10, "polled " .. rounds .. " times for 5 waiters")
    -- a node missing from the listing is "not registered"
    local saved = common.READY_TIMEOUT
    common.READY_TIMEOUT = 0.05
    local ok, err = run(function() return common.steps.wait_ready(ctx, leader, { node = "w9", cmd = cmd }) end)
    common.READY_TIMEOUT = saved
    assert.is_nil(ok)
    assert.matches("node w9 is not Ready after 0.05 s (through cp1's kubectl: not registered)", err, 1, true)
  end)
end)

describe("Configure engine", function()
  local phase = require "cargoship.phases.configure_engine"

  it("reuses the leader's token files", function()
    local cp1 = host("cp1", "controller", { { "sed 's/^/token=/'",
      "token=" .. string.rep("x", 64) .. "\nagent_token=" .. string.rep("y", 64) .. "\n", 0 } })
    local ctx = context({ cp1 })
    ctx.join_secret, ctx.leader = nil, cp1
    run(function() return phase.prepare(ctx) end)
    assert.same({ token = string.rep("x", 64), agent_token = string.rep("y", 64) }, ctx.join_secret)
  end)

  it("makes a new secret of 64 alphanumerics each when the leader has none, and the worker gets the agent one",
    function()
      local cp1 = host("cp1", "controller", {})
      local w1 = host("w1", "worker", {})
      local ctx = context({ cp1, w1 })
      ctx.join_secret, ctx.leader = nil, cp1
      local work = run(function() return phase.prepare(ctx) end)
      assert.equal(2, #work)
      assert.matches("^%w+$", ctx.join_secret.token)
      assert.equal(64, #ctx.join_secret.token)
      assert.are_not.equal(ctx.join_secret.token, ctx.join_secret.agent_token)
      local acts = run(function() return phase.assess(ctx, w1) end)
      local contents = {}
      for _, a in ipairs(acts) do if a.path then contents[a.path] = a.content end end
      assert.equal(ctx.join_secret.agent_token .. "\n", contents["/etc/rancher/k3s/agent-token"])
      assert.is_nil(contents["/etc/rancher/k3s/token"])
    end)
end)

describe("Configure engine plans from what the host holds", function()
  local phase = require "cargoship.phases.configure_engine"
  local digest = require "cargoship.digest"

  -- A probe rule answering facts.host's file lines: `have` maps path -> {content, mode} (a
  -- regular file, root:root) or "dir"; anything else is missing.
  local function holding(have)
    return { "cs_file()", fn = function(cmd)
      local lines = {}
      for path, i in cmd:gmatch("cs_file '([^']+)' (%d+)") do
        local h = have[path]
        if h == "dir" then lines[#lines + 1] = i .. " Y dir 755 root root -"
        elseif h then
          lines[#lines + 1] = string.format("%s Y file %s root root %s", i, h.mode, digest.sha256(h.content))
        else lines[#lines + 1] = i .. " N" end
      end
      return "\30cs-begin:files\n" .. table.concat(lines, "\n") .. "\n\30cs-end:files:0\n", 0
    end }
  end

  local function kinds(acts)
    local out = {}
    for _, a in ipairs(acts) do out[#out + 1] = a.kind .. " " .. (a.path or a.cmd or "") end
    return out
  end

  it("writes only the files that differ and makes only the missing directories", function()
    local probe = host("cp1", "controller", {})
    local ctx0 = context({ probe })
    ctx0.leader = probe
    local fresh = run(function() return phase.assess(ctx0, probe) end)
    local want, have = {}, {}
    for _, a in ipairs(fresh) do
      if a.kind == "write" then
        want[#want + 1] = a
        have[a.path] = { content = a.content, mode = (a.mode or "0600"):gsub("^0", "") }
        have[a.path:match("^(.*)/[^/]*$")] = "dir"
      end
    end
    assert.is_true(#want >= 3, "a fresh controller gets several files")
    assert.equal("run", fresh[1].kind, "a fresh host gets its directories made")
    -- the host holds every file, one with other content and one with another mode
    have[want[1].path] = { content = "old\n", mode = have[want[1].path].mode }
    have[want[2].path] = { content = want[2].content, mode = "644" }
    local cp1 = host("cp1", "controller", { holding(have) })
    local ctx = context({ cp1 })
    ctx.leader = cp1
    local acts = run(function() return phase.assess(ctx, cp1) end)
    assert.same({ "write " .. want[1].path, "write " .. want[2].path }, kinds(acts))
    -- and a host holding all of it has nothing planned at all
    have[want[1].path] = { content = want[1].content, mode = (want[1].mode or "0600"):gsub("^0", "") }
    have[want[2].path] = { content = want[2].content, mode = (want[2].mode or "0600"):gsub("^0", "") }
    local cp2 = host("cp1", "controller", { holding(have) })
    local ctx2 = context({ cp2 })
    ctx2.leader = cp2
    assert.same({}, kinds(run(function() return phase.assess(ctx2, cp2) end)))
  end)
end)

describe("Configure engine, with the context's random source pinned", function()
  local phase = require "cargoship.phases.configure_engine"
  local engine = require "distros.engine"

  it("draws the new secret from ctx:random, nothing else", function()
    local cp1 = host("cp1", "controller", {})
    local ctx = context({ cp1 })
    ctx.join_secret, ctx.leader = nil, cp1
    local bytes = {}
    for i = 1, 128 do bytes[i] = string.char((i * 7) % 256) end
    local asked = {}
    function ctx.random(_, n) asked[#asked + 1] = n; return table.concat(bytes):sub(1, n) end
    run(function() return phase.prepare(ctx) end)
    assert.same({ 128 }, asked)
    local pinned = table.concat(bytes)
    assert.same({ token = engine.token_from_bytes(pinned:sub(1, 64)),
                  agent_token = engine.token_from_bytes(pinned:sub(65)) }, ctx.join_secret)
  end)

  it("an engine that joins by command gets no secret here, and no kubeadm document on a joining node", function()
    local cp1 = host("cp1", "controller", {})
    local cp2 = host("cp2", "controller", {})
    local up = { type = "upstream", version = "1.35.3", engine = {}, manifests = {} }
    local ctx = context({ cp1, cp2 }, { distro = up })
    ctx.join_secret, ctx.leader = nil, cp1
    function ctx.random() error("no secret is made for this engine") end
    run(function() return phase.prepare(ctx) end)
    assert.is_nil(ctx.join_secret)
    local function written(h)
      local out = {}
      for _, a in ipairs(run(function() return phase.assess(ctx, h) end)) do
        if a.kind == "write" then out[#out + 1] = a.path end
      end
      return table.concat(out, " ")
    end
    assert.matches("/etc/kubernetes/kubeadm-config.yaml", written(cp1), 1, true)
    assert.not_matches("kubeadm-config.yaml", written(cp2), 1, true)
    assert.matches("/etc/containerd/config.toml", written(cp2), 1, true)
  end)
end)

describe("Apply manifests asks the engine whether it applies them itself", function()
  local phase = require "cargoship.phases.apply_manifests"

  it("an engine watching its manifests directory leaves the leader nothing to apply", function()
    local cp1 = host("cp1", "controller", {})
    local with = { type = "k3s", version = "1.35.2-k3s1", engine = {}, manifests = { "/m/a.yaml" } }
    local ctx = context({ cp1 }, { distro = with })
    ctx.leader = cp1
    assert.is_true(ctx.engine.applies_manifests)
    assert.same({}, phase.prepare(ctx))
    ctx.engine = setmetatable({ applies_manifests = false }, { __index = ctx.engine })
    assert.same({ cp1 }, phase.prepare(ctx))
  end)
end)

describe("join step (an engine that joins by command)", function()
  local steps = require("cargoship.phases.initialize_controller").steps
  local UP = { type = "upstream", version = "1.35.3", engine = {}, manifests = {} }
  local JOIN = "kubeadm join 10.253.11.10:6443 --token abcdef.0123456789abcdef "
    .. "--discovery-token-ca-cert-hash sha256:" .. string.rep("a", 64) .. "\n"

  it("creates a fresh token on the leader, and a certificate key for a control plane, then joins", function()
    local cp1 = host("cp1", "controller", {
      { "kubeadm token create", JOIN, 0 },
      { "upload-certs", "[upload-certs] Using certificate key:\n" .. string.rep("b", 64) .. "\n", 0 } },
      { running = true, action = "same" })
    local written
    local cp2 = host("cp2", "controller", { { "kubeadm join", "", 0 } })
    local apply = cp2.apply
    function cp2.apply(self, acts, o)
      written = acts[1].content
      return apply(self, acts, o)
    end
    local ctx = context({ cp1, cp2 }, { distro = UP })
    ctx.leader = cp1
    assert.is_true(run(function() return steps.join(ctx, cp2, { say = "kubeadm join cp2 as a control plane" }) end))
    assert.matches("token: abcdef.0123456789abcdef", written, 1, true)
    assert.matches("certificateKey: " .. string.rep("b", 64), written, 1, true)
    assert.equal(1, #grep("cp1: kubeadm token create"))
    assert.equal(1, #grep("cp2: kubeadm join --config '/etc/kubernetes/kubeadm-config.yaml'"))
  end)

  it("a worker needs no certificate key", function()
    local cp1 = host("cp1", "controller", { { "kubeadm token create", JOIN, 0 } }, { running = true, action = "same" })
    local w1 = host("w1", "worker", { { "kubeadm join", "", 0 } })
    local ctx = context({ cp1, w1 }, { distro = UP })
    ctx.leader = cp1
    assert.is_true(run(function() return steps.join(ctx, w1, { say = "kubeadm join w1" }) end))
    assert.same({}, grep("upload-certs"))
  end)
end)
