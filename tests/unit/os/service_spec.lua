-- Specs for the service managers' log command: what a failed start shows under its error, run by a real sh.
local service = require "cargoship.os.service"
local util = require "cargoship.util"

-- Runs a manager's command with its absolute paths moved under root (a temp dir).
local function run_under(root, cmd)
  cmd = cmd:gsub("'/etc/sv/", "'" .. root .. "/etc/sv/"):gsub("'/var/log/", "'" .. root .. "/var/log/")
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

local function write(path, text)
  assert(os.execute("mkdir -p " .. util.quote(path:match("^(.*)/"))))
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

describe("runit logs", function()
  local root
  before_each(function()
    root = os.tmpname()
    os.remove(root)
    assert(os.execute("mkdir -p " .. util.quote(root)))
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)
  local logs = service.manager("runit").command("logs", "k3s-server")

  it("reads the directory the service's log/run gives svlogd, wherever that is", function()
    write(root .. "/etc/sv/k3s-server/log/run", "#!/bin/sh\nmkdir -p /x\nexec svlogd -tt " .. root
      .. "/var/log/runit/k3s-server\n")
    write(root .. "/var/log/runit/k3s-server/current", "line 1\ntoken CA hash does not match\n")
    write(root .. "/var/log/k3s-server/current", "the other place\n")
    assert.are.equal("line 1\ntoken CA hash does not match\n", run_under(root, logs))
  end)

  it("falls back to /var/log/NAME and /var/log/runit/NAME without a log/run", function()
    write(root .. "/var/log/runit/k3s-server/current", "runit dir\n")
    assert.are.equal("runit dir\n", run_under(root, logs))
    write(root .. "/var/log/k3s-server/current", "void dir\n")
    assert.are.equal("void dir\n", run_under(root, logs))
  end)

  it("says so when there is no log at all", function()
    assert.are.equal("no log found for k3s-server\n", run_under(root, logs))
  end)
end)

-- systemd's commands run by a real sh whose `systemctl` is a function answering `show` from
-- props (name -> value, printed in systemd's own order, not the order asked) and recording
-- every other call in calls.
local function with_systemctl(cmd, props)
  local show = {}
  for _, k in ipairs { "Result", "ExecMainStatus", "ActiveState", "SubState", "InactiveExitTimestampMonotonic",
                       "ActiveEnterTimestampMonotonic" } do
    if props[k] then show[#show + 1] = k .. "=" .. props[k] end
  end
  local calls = os.tmpname()
  local fake = "systemctl() { if [ \"$1\" = show ]; then if [ \"$4\" = --value ]; then echo "
    .. util.quote(props.SubState or "") .. "; else printf '%s\\n' " .. util.quote(table.concat(show, "\n"))
    .. "; fi; else echo \"$*\" >> " .. util.quote(calls) .. "; fi; }\n"
  local p = assert(io.popen("sh -c " .. util.quote(fake .. cmd) .. "; echo \"exit $?\""))
  local out = p:read("a")
  p:close()
  local f = assert(io.open(calls))
  local called = f:read("a")
  f:close()
  os.remove(calls)
  return out, called
end

describe("systemd starts that do not wait", function()
  local systemd = service.manager("systemd")

  it("start: the failed state reset, then a start job that does not wait for the unit to be ready", function()
    local cmd = systemd.command("start", "k3s-agent", { nowait = true })
    local out, called = with_systemctl(cmd, { SubState = "dead" })
    assert.are.equal("exit 0\n", out)
    assert.are.equal("reset-failed k3s-agent\nstart --no-block k3s-agent\n", called)
    assert.are.equal("systemctl start 'k3s-agent'", systemd.command("start", "k3s-agent"))
  end)

  it("start of a unit waiting out its restart delay restarts it now (a start job would wait for the delay)",
    function()
      local _, called = with_systemctl(systemd.command("start", "k3s-agent", { nowait = true }),
        { SubState = "auto-restart" })
      assert.are.equal("reset-failed k3s-agent\nrestart --no-block k3s-agent\n", called)
      _, called = with_systemctl(systemd.command("restart", "k3s-agent", { nowait = true }), { SubState = "running" })
      assert.are.equal("reset-failed k3s-agent\nrestart --no-block k3s-agent\n", called)
    end)

  it("start_failed: down after this start failed, or waiting to restart without having been up since", function()
    local cmd = systemd.command("start_failed", "k3s-agent")
    local function state(a, s, ae, ie)
      return (with_systemctl(cmd, { ActiveState = a, SubState = s, Result = "exit-code", ExecMainStatus = "1",
        ActiveEnterTimestampMonotonic = ae, InactiveExitTimestampMonotonic = ie }))
    end
    assert.are.equal("systemd: k3s-agent is activating (auto-restart) after its start failed (result exit-code, "
      .. "exit status 1)\nexit 0\n", state("activating", "auto-restart", "0", "24641549160"))
    assert.are.equal("systemd: k3s-agent is failed (failed) after its start failed (result exit-code, "
      .. "exit status 1)\nexit 0\n", state("failed", "failed", "0", "5"))
    -- starting, waiting for the engine's READY: not a failure (nor a refusal: the log says that)
    assert.are.equal("exit 1\n", state("activating", "start", "0", "24641549160"))
    assert.are.equal("exit 1\n", state("active", "running", "24641559160", "24641549160"))
    -- it was up after this start and crashed later: the Ready wait's to see, not a failed start
    assert.are.equal("exit 1\n", state("activating", "auto-restart", "24641559160", "24641549160"))
  end)

  it("runit and openrc keep no failed state to ask for, and their starts never wait", function()
    assert.is_nil(service.manager("runit").command("start_failed", "k3s-agent"))
    assert.is_nil(service.manager("openrc").command("start_failed", "k3s-agent"))
    assert.are.equal(service.manager("runit").command("start", "k3s-agent"),
      service.manager("runit").command("start", "k3s-agent", { nowait = true }))
  end)
end)

describe("runit start", function()
  local root
  before_each(function()
    root = os.tmpname()
    os.remove(root)
    assert(os.execute("mkdir -p " .. util.quote(root .. "/bin") .. " "
      .. util.quote(root .. "/svc/k3s-agent/supervise")))
    -- sv as runit's: a command on a service whose supervise/ok no runsv reads says "runsv not
    -- running" and exits 1 (a marker file stands for the reading runsv here)
    write(root .. "/bin/sv", "#!/bin/sh\nd=$2\n"
      .. "if [ ! -e \"$d/supervise/reader\" ]; then echo \"fail: $d: runsv not running\"; exit 1; fi\n"
      .. "echo \"$1: $d\" >> \"$d/supervise/done\"\necho \"ok: run: $d\"\n")
    assert(os.execute("chmod 755 " .. util.quote(root .. "/bin/sv")))
    -- a stale supervise/ok: the FIFO exists, nobody reads it
    assert(os.execute("mkfifo " .. util.quote(root .. "/svc/k3s-agent/supervise/ok")))
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)

  it("waits for a runsv that reads supervise/ok, not for the FIFO to exist", function()
    local cmd = service.manager("runit", { service_dir = root .. "/svc" }).command("start", "k3s-agent")
    -- the supervisor arrives 0.5 s after the start began
    local p = assert(io.popen("(sleep 0.5; : > " .. util.quote(root .. "/svc/k3s-agent/supervise/reader") .. ") & "
      .. "PATH=" .. util.quote(root .. "/bin") .. ":$PATH; " .. cmd .. " 2>&1; echo \"exit $?\""))
    local out = p:read("a")
    p:close()
    assert.matches("ok: run: .*\nexit 0\n$", out)
    local f = assert(io.open(root .. "/svc/k3s-agent/supervise/done"))
    assert.matches("up: ", f:read("a"))
    f:close()
  end)
end)
