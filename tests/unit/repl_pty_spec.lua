-- The repl as a newcomer meets it: the real binary at a terminal (a tmux pane), `help` alone, Tab after hosts[2].
--
-- No lab: the cluster's two hosts are loopback ports nothing listens on, so both fail to
-- connect and the repl (without --strict) gives its prompt over them anyway; help and
-- completion need no connection. tests/integration/repl_spec.lua drives it over live hosts.
local util = require "cargoship.util"

local q = util.quote
local BIN = os.getenv("CARGOSHIP_BIN") or ((os.getenv("CARGOSHIP_BUILD_DIR") or "build") .. "/bin/cargoship")

local work

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

-- the server's socket lives in the work directory, so nothing is left behind
local function tmux(args)
  return sh("tmux -S " .. q(work .. "/tmux.sock") .. " " .. args)
end

local function screen()
  local _, out = tmux("capture-pane -p -t repl")
  return out
end

-- Waits until the screen shows every plain string in `wanted`. -> screen
local function wait_for(wanted, timeout)
  if type(wanted) == "string" then wanted = { wanted } end
  local deadline = util.now() + (timeout or 20)
  local text
  repeat
    text = screen()
    local all = true
    for _, w in ipairs(wanted) do
      if not text:find(w, 1, true) then all = false end
    end
    if all then return text end
    -- the repl ended: waiting longer shows nothing new
    if text:find("EXIT=", 1, true) then break end
    os.execute("sleep 0.1")
  until util.now() > deadline
  error("the screen never showed " .. table.concat(wanted, " / ") .. "; it shows:\n" .. text, 2)
end

local function type_text(text) tmux("send-keys -t repl -l " .. q(text)) end
local function keys(k) tmux("send-keys -t repl " .. k) end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
  local f = assert(io.open(work .. "/cluster.yaml", "w"))
  f:write([[
apiVersion: zarf.dev/v1alpha1
kind: ZarfCluster
metadata: {name: pty}
spec:
  config: {loadbalancer: h1.example.internal}
  hosts:
    - {role: controller, hostname: h1, ssh: {address: 127.0.0.1, port: 1, user: root}}
    - {role: worker, hostname: h2, ssh: {address: 127.0.0.2, port: 1, user: root}}
]])
  f:close()
  local cmd = string.format("env HOME=%s XDG_STATE_HOME=%s/state %s repl --ssh-timeout 5s %s; echo EXIT=$?; "
    .. "sleep 3600", q(work), q(work), q(BIN), q(work .. "/cluster.yaml"))
  local ok, out = tmux("-f /dev/null new-session -d -s repl -x 120 -y 60 " .. q(cmd))
  assert(ok, "tmux: " .. out)
end)

teardown(function()
  tmux("kill-server")
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("cargoship repl at a terminal, as a newcomer meets it", function()
  it("gives a prompt over hosts it could not reach, and says how to get help", function()
    local text = wait_for("cargoship>")
    assert.matches("connected to 0 of 2 hosts", text, 1, true)
    assert.matches("help shows what is at hand", text, 1, true)
  end)

  it("shows the help for a bare `help`, not a function", function()
    type_text("help")
    keys("Enter")
    local text = wait_for { "At hand:", "host:run(cmd)", "Ctrl-C clears the" }
    local after = text:sub((assert(text:find("cargoship> help\n", 1, true))))
    assert.matches("^cargoship> help\nAt hand:\n", after)
    assert.is_nil(after:find("function: 0x", 1, true))
    assert.is_nil(after:find("error:", 1, true))
    keys("C-l")
  end)

  it("completes after an indexed expression with Tab", function()
    wait_for("cargoship>")
    type_text("hosts[2]:ru")
    keys("Tab")
    wait_for("cargoship> hosts[2]:run")
    keys("C-u")
    type_text('print(hosts["h1"].ro')
    keys("Tab")
    wait_for('cargoship> print(hosts["h1"].role')
    keys("C-u")
    type_text("h2:ru")
    keys("Tab")
    wait_for("cargoship> h2:run")
    keys("C-u")
  end)

  it("leaves on Ctrl-D with exit code 0", function()
    keys("C-d")
    wait_for("EXIT=0")
  end)
end)
