-- Integration specs of `cargoship repl` on the lab: a real terminal (tmux), completion, history, Ctrl-C, -e mode.
--
-- The terminal is a tmux pane started inside the lab's network namespace (where this spec
-- runs); keys go in with send-keys and the screen comes back with capture-pane. The hosts
-- are the lab's first three, named h1..h3 by `hostname:` in a cluster file of our own.
local util = require "cargoship.util"
local lab = require "integration.lab"

local q = util.quote
local N = 3

local read, write = lab.read, lab.write

local function sleep(s) os.execute("sleep " .. s) end

local work, cluster, state
local socket = "csrepl" .. util.getpid()

-- The first N lab hosts as h1..hN, host keys from the lab's known_hosts.
local function write_cluster()
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: repl",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs { table.unpack(lab.hosts(), 1, N) } do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i, h.address, lab.key, lab.known_hosts)
  end
  write(cluster, table.concat(lines, "\n") .. "\n")
end

-- ---- tmux ------------------------------------------------------------------------------------

local function tmux(args)
  return lab.sh("tmux -L " .. socket .. " " .. args)
end

local function screen()
  local _, out = tmux("capture-pane -p -t repl")
  return out
end

-- Waits until the screen matches every plain string in `wanted`. -> screen
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
    sleep(0.1)
  until util.now() > deadline
  error("the screen never showed " .. table.concat(wanted, " / ") .. "; it shows:\n" .. text, 2)
end

-- The last line with text on it.
local function last_line()
  local last = ""
  for line in screen():gmatch("[^\n]+") do
    if line:match("%S") then last = line end
  end
  return last
end

local function keys(...)
  local list = {}
  for i, k in ipairs { ... } do list[i] = q(k) end
  tmux("send-keys -t repl " .. table.concat(list, " "))
end

-- Types text as it is (tmux would read "end" or "Up" as key names) and presses Enter.
local function type_line(text)
  tmux("send-keys -t repl -l " .. q(text))
  keys("Enter")
end

-- Starts the repl in a fresh window; its terminal settings before and after go to files.
local function start_repl()
  tmux("kill-session -t repl")
  local cmd = string.format("stty -g > %s/stty.before; env HOME=%s XDG_STATE_HOME=%s %s repl %s; echo EXIT=$?; "
    .. "stty -g > %s/stty.after; sleep 3600", work, work, state, q(lab.bin), q(cluster), work)
  local code, out = tmux("-f /dev/null new-session -d -s repl -x 120 -y 50 " .. q(cmd))
  assert(code == 0, "tmux: " .. out)
  return wait_for("cargoship>") -- capture-pane drops the prompt's trailing space
end

local function cargoship(args, stdin)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("env HOME=%s %s %s <%s >%s 2>%s", q(work), q(lab.bin), args,
    stdin or "/dev/null", q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err) }
  os.remove(out)
  os.remove(err)
  return r
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
  cluster = work .. "/cluster.yaml"
  state = work .. "/state"
  write_cluster()
end)

teardown(function()
  tmux("kill-server")
  os.execute("rm -rf " .. q(work))
end)

describe("cargoship repl at a terminal", function()
  it("connects to the hosts and gives a prompt", function()
    local text = start_repl()
    assert.matches("connected to 3 of 3 hosts", text, 1, true)
  end)

  it("completes host names, host methods and fact keys with Tab", function()
    keys("hosts.h", "Tab", "Tab")
    wait_for { "hosts.h1", "hosts.h2", "hosts.h3" }
    keys("C-u")
    tmux("send-keys -t repl -l 'h2:pro'")
    keys("Tab")
    wait_for("cargoship> h2:probe")
    keys("C-u")
    tmux("send-keys -t repl -l 'h1.facts.os.pretty_na'")
    keys("Tab")
    wait_for("cargoship> h1.facts.os.pretty_name")
    keys("C-u")
    -- a unique prefix completes in place
    tmux("send-keys -t repl -l 'hosts.h3.fac'")
    keys("Tab")
    wait_for("cargoship> hosts.h3.facts")
    keys("C-u")
  end)

  it("runs a command on one host and shows that host's name", function()
    type_line('h2:run("hostname")')
    local text = wait_for { '"h2\\n"' }
    assert.matches("\nh2\n", text, 1, true)
  end)

  it("fans a command out over all hosts, output prefixed by host", function()
    type_line('all:run("uname -n")')
    wait_for { "h1 | h1", "h2 | h2", "h3 | h3", "<3 hosts: 3 exit 0>" }
  end)

  it("keeps the loop running while the prompt waits", function()
    type_line('loop = require "cargoship.loop"; ticks = 0; '
      .. 'loop.spawn(function() while true do loop.sleep(0.05); ticks = ticks + 1 end end)')
    sleep(1)
    type_line("ticks >= 10")
    wait_for("\ntrue\n")
  end)

  it("shows an error and goes on", function()
    type_line('error("boom")')
    wait_for("error: repl:1: boom")
    type_line("6 * 7")
    wait_for("\n42\n")
  end)

  it("stops a running command on Ctrl-C, not the session", function()
    type_line('all:run("sleep 60")')
    sleep(1)
    keys("C-c")
    wait_for("interrupted", 10)
    type_line("1 + 2")
    wait_for("\n3\n")
  end)

  it("drops the line being edited on Ctrl-C at the prompt", function()
    tmux("send-keys -t repl -l 'this is not lua'")
    keys("C-c")
    type_line("10 + 1")
    local text = wait_for("\n11\n")
    assert.is_nil(text:find("this is not lua%s*\n[^\n]*error"))
  end)

  it("leaves on Ctrl-D with the terminal as it found it", function()
    keys("C-d")
    wait_for("EXIT=0")
    sleep(0.2)
    assert.are.equal(read(work .. "/stty.before"), read(work .. "/stty.after"))
  end)

  it("keeps its history in a private file, and across a restart", function()
    local file = state .. "/cargoship/repl_history"
    local _, mode = lab.sh("stat -c %a " .. q(file))
    assert.are.equal("600", mode:gsub("%s+$", ""))
    assert.matches("h2:run", read(file), 1, true)
    start_repl()
    keys("Up")
    local deadline = util.now() + 10
    while last_line() ~= "cargoship> 10 + 1" and util.now() < deadline do sleep(0.1) end
    assert.are.equal("cargoship> 10 + 1", last_line())
    keys("Up", "Up")
    deadline = util.now() + 10
    while last_line() ~= 'cargoship> all:run("sleep 60")' and util.now() < deadline do sleep(0.1) end
    assert.are.equal('cargoship> all:run("sleep 60")', last_line())
    keys("C-u", "C-d")
    wait_for("EXIT=0")
  end)
end)

describe("cargoship repl without a terminal", function()
  it("-e runs code after connecting, prints its values, exits 0", function()
    local r = cargoship("repl " .. q(cluster) .. " -e 'h1:run(\"hostname\")' -e 'hosts.h3.facts.hostname'")
    assert.are.equal(0, r.code, r.stderr)
    assert.are.equal('h1\n"h1\\n"\n""\n0\n"h3"\n', r.stdout)
  end)

  it("-e exits 1 when the code raises, and before connecting on a syntax error", function()
    local r = cargoship("repl " .. q(cluster) .. " -e 'h1:run(\"exit 3\") error(\"no\")'")
    assert.are.equal(1, r.code)
    assert.matches("error: %(%-e #1%):1: no", r.stderr)
    r = cargoship("repl " .. q(cluster) .. " -e 'h1:run('")
    assert.are.equal(1, r.code)
    assert.matches("(-e #1):1:", r.stderr, 1, true)
    assert.is_nil(r.stderr:find("connected to", 1, true))
  end)

  it("runs a script from stdin", function()
    local script = work .. "/script.lua"
    write(script, "local names = {}\n"
      .. 'for _, h in ipairs(hosts) do names[#names + 1] = h:probe("uname -n"):gsub("%s", "") end\n'
      .. "return table.concat(names, ',')\n")
    local r = cargoship("repl -q " .. q(cluster), script)
    assert.are.equal(0, r.code, r.stderr)
    assert.matches('"h1,h2,h3"\n$', r.stdout)
  end)

  it("plan() shows apply's dry run over the live hosts", function()
    local r = cargoship("repl " .. q(cluster) .. " -e 'plan()'")
    assert.are.equal(0, r.code, r.stderr)
    assert.matches('Dry run of cluster "repl" on 3 hosts', r.stdout, 1, true)
    assert.matches("Acquire exclusive host lock: would act", r.stdout, 1, true)
  end)

  it("--read-only refuses writes as a dry run does, and writes nothing", function()
    local before = lab.upper_snapshot(1)
    local r = cargoship("repl --read-only " .. q(cluster) .. " -e 'h1:write_file(\"/etc/cs-repl\", \"x\")'")
    assert.are.equal(1, r.code)
    assert.matches("dry run: refused to write /etc/cs-repl", r.stderr, 1, true)
    r = cargoship("repl --read-only " .. q(cluster) .. " -e 'h1:probe(\"test -e /etc/cs-repl\")'")
    assert.are.equal(0, r.code, r.stderr)
    assert.matches("\n1\n$", r.stdout)
    assert.are.same(before, lab.upper_snapshot(1))
  end)
end)
