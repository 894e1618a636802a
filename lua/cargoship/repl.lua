-- cargoship.repl: the operator's Lua prompt over connected hosts: environment, evaluation, line editing loop.
--
-- A session holds a pipeline context whose hosts the connect, detect_os and gather_facts
-- phases have been through (M.connect), and an environment of its own (not _G, though it
-- reads through to it):
--   hosts            by name, and hosts[1..n] in cluster order; a host whose name is a Lua
--                    name (h1, ctrl_1 for "ctrl-1") is also a variable of its own
--   all, role(r)     groups that fan :run/:probe/:each out over their hosts concurrently
--   plan()           the dry run of apply over the live hosts, as its text report
--   readonly(flag)   writes refused (as in a dry run) or allowed; readonly() says which
--   help, exit()     what is at hand (help alone or help()); leave
-- An expression shows its values; a statement runs; an error is shown and the session
-- goes on. docs/phases.md and `cargoship repl --help` describe it for operators.
local loop = require "cargoship.loop"
local complete = require "cargoship.repl.complete"
local pretty = require "cargoship.repl.pretty"
local rhosts = require "cargoship.repl.hosts"

local M = {}

-- The phases whose work the session starts from: apply's first three, unchanged.
M.CONNECT_PHASES = { "cargoship.phases.connect", "cargoship.phases.detect_os", "cargoship.phases.gather_facts" }

M.HELP = [[
At hand:
  hosts              every host, by name (hosts.h1, hosts["10.0.0.5"]) and in order (hosts[1])
  h1, h2, ...        each host whose name is a Lua name ('-' and '.' read as '_')
  host.name, .role, .address, .facts, .config, .os
  host:run(cmd)      runs cmd (as root), prints its output; returns stdout, stderr, exit code
  host:probe(cmd)    the same, as a read: allowed in read-only mode
  host:read_file(path), host:exists(path), host:write_file(path, text), host:probes{k = cmd}
  all, role("worker")  groups: group:run(cmd) / group:probe(cmd) on every host at once, output
                     prefixed by host; returns results by host name ({stdout, stderr, code});
                     group:each(function(host) ... end)
  plan()             what `cargoship apply` would do now (its dry run, as a report)
  readonly(true|false)  refuse writes as a dry run does, or allow them; readonly() tells
  cluster            the loaded cluster file
  help, exit()       this text; leave (so do Ctrl-D and, at the prompt, `exit`)
Tab completes names, host methods and fact keys, after hosts[2] too. Ctrl-C clears the
line, or stops what runs.]]

-- ---- connecting --------------------------------------------------------------------------

-- Runs the connect, detect_os and gather_facts phases over ctx.hosts, each on the hosts the
-- previous one left standing. -> {[host] = message} for the hosts that fell on the way.
function M.connect(ctx, phase_modules)
  local failed, alive = {}, {}
  for _, h in ipairs(ctx.hosts) do alive[#alive + 1] = h end
  for _, mod in ipairs(phase_modules or M.CONNECT_PHASES) do
    local phase = require(mod)
    if #alive == 0 then break end
    local ok, r, err = pcall(phase.run, ctx, alive)
    if not ok then
      if r == "cancelled" then error(r, 0) end
      for _, h in ipairs(alive) do failed[h] = phase.title .. ": " .. tostring(r) end
    elseif r == nil and err ~= nil then
      if type(err) == "table" then
        for _, f in ipairs(err) do failed[f.host] = tostring(f.err) end
      else
        for _, h in ipairs(alive) do failed[h] = phase.title .. ": " .. tostring(err) end
      end
    end
    local left = {}
    for _, h in ipairs(alive) do
      if not failed[h] then left[#left + 1] = h end
    end
    alive = left
  end
  return failed
end

-- ---- the session ---------------------------------------------------------------------------

local Session = {}
Session.__index = Session

-- exit() unwinds to the prompt loop through this value
local EXIT = setmetatable({}, { __tostring = function() return "exit" end })

-- Lua names for host names: "h1" as is, "ctrl-1" as ctrl_1; "10.0.0.5" has none.
function M.alias(name)
  local a = name:gsub("[-.]", "_")
  if a:match("^[%a_][%w_]*$") then return a end
  return nil
end

local function make_env(s)
  local env = {}
  local list = {}
  for i, h in ipairs(s.ctx.hosts) do
    list[i] = rhosts.wrap(h, { stdout = s.stdout, stderr = s.stderr })
  end
  local hosts = {}
  for i, h in ipairs(list) do
    hosts[i] = h
    hosts[h.name] = h
  end
  env.hosts = hosts
  env.cluster = s.ctx.cluster
  env.all = rhosts.group(list, s.concurrency)
  env.role = function(name)
    local picked, roles = {}, {}
    for _, h in ipairs(list) do
      roles[h.role or "?"] = true
      if h.role == name then picked[#picked + 1] = h end
    end
    if #picked == 0 then
      local known = {}
      for r in pairs(roles) do known[#known + 1] = r end
      table.sort(known)
      error(string.format("role(%q): no host has that role (roles here: %s)", tostring(name),
        table.concat(known, ", ")), 2)
    end
    return rhosts.group(picked, s.concurrency)
  end
  env.plan = function()
    if not s.plan then error("plan() is not available in this session", 2) end
    s.plan()
  end
  env.readonly = function(flag)
    if flag ~= nil then s:set_read_only(flag and true or false) end
    return s.read_only
  end
  -- `help` alone shows the help as `help()` does: what a newcomer types first
  env.help = setmetatable({}, { __call = function() s.stdout:write(M.HELP, "\n") end,
    __tostring = function() return M.HELP end, __name = "help" })
  env.exit = function(code)
    s.exit_code = math.tointeger(code) or 0
    error(EXIT, 0)
  end
  env.quit = env.exit
  env.print = function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    s.stdout:write(table.concat(parts, "\t", 1, parts.n), "\n")
  end
  -- host variables last: a host called "all" or "print" stays reachable as hosts.all only
  for _, h in ipairs(list) do
    local a = M.alias(h.name)
    if a and env[a] == nil and _G[a] == nil then env[a] = h end
  end
  return setmetatable(env, { __index = _G })
end

-- M.new{ctx = connected pipeline context, stdout =, stderr = (writers), log =,
--       read_only = bool, concurrency = n, plan = function() (prints the dry run)}
function M.new(o)
  local s = setmetatable({
    ctx = o.ctx, stdout = o.stdout, stderr = o.stderr, log = o.log or o.ctx.log,
    read_only = false, concurrency = o.concurrency or 30, plan = o.plan, exit_code = nil,
  }, Session)
  s.env = make_env(s)
  s:set_read_only(o.read_only and true or false)
  return s
end

-- The one switch of read-only mode: the Host objects' own dry-run flag.
function Session:set_read_only(flag)
  self.read_only = flag
  for _, h in ipairs(self.ctx.hosts) do h.dry_run = flag end
end

function Session:prompt()
  return self.read_only and "cargoship(read-only)> " or "cargoship> "
end

-- Compiles src as an expression (to show its values) or else as statements.
-- -> fn | nil, message, incomplete (true when more lines could finish it)
function Session:compile(src, chunkname)
  local fn = load("return " .. src, chunkname, "t", self.env)
  if fn then return fn end
  local err
  fn, err = load(src, chunkname, "t", self.env)
  if fn then return fn end
  return nil, err, err:match("<eof>$") ~= nil
end

local function message_of(e)
  if type(e) == "table" and e.err then return tostring(e.err) end
  return tostring(e)
end

-- Runs fn. -> true, results (packed) | false, message | false, EXIT
function Session:eval(fn)
  local trace
  local r = table.pack(xpcall(fn, function(e)
    if e ~= EXIT then trace = debug.traceback(message_of(e), 2) end
    return e
  end))
  if r[1] then return true, table.pack(table.unpack(r, 2, r.n)) end
  if r[2] == EXIT then return false, EXIT end
  if trace and self.log then self.log:debug("%s", trace) end
  return false, message_of(r[2])
end

function Session:show(results)
  for i = 1, results.n do self.stdout:write(pretty.show(results[i]), "\n") end
end

function Session:show_error(msg)
  if self.read_only and msg:find("dry run: refused to", 1, true) then
    msg = msg .. " (read-only session: :probe reads; readonly(false) allows writes)"
  end
  self.stderr:write("error: ", msg, "\n")
end

-- Compiles, runs and shows a whole chunk (-e CODE, a script on stdin). -> true | false
function Session:run_chunk(fn)
  local ok, res = self:eval(fn)
  if ok then
    self:show(res)
    return true
  end
  if res == EXIT then return (self.exit_code or 0) == 0 end
  self:show_error(res)
  return false
end

function Session:flush()
  if self.stdout.flush then self.stdout:flush() end
end

-- What Tab offers for `word`; with the line and the word's 0-based start (as the line
-- editor passes them) an indexed expression before it counts: hosts[2]:ru -> :run.
function Session:completions(word, line, start)
  return complete.complete(self.env, word, line, start)
end

-- Evaluates fn in a task of its own, so the first Ctrl-C stops it and not the session.
function Session:eval_interruptible(ed, fn)
  local interrupted = false
  ed:trap_interrupt(true)
  local task = loop.spawn(function() return self:eval(fn) end)
  local watcher = loop.spawn(function()
    loop.wait_fd(ed:interrupt_fd(), "r")
    interrupted = true
    task:cancel()
  end)
  local _, ok, res = task:join()
  watcher:cancel()
  ed:trap_interrupt(false)
  if interrupted then
    -- the terminal echoed ^C where the cursor was
    self.stderr:write("\ninterrupted\n")
  elseif ok then
    self:show(res)
  elseif res == EXIT then
    self.done = true
  else
    self:show_error(res)
  end
end

-- The prompt loop, until Ctrl-D or exit(). o = {term = the term module, history = path,
-- wait = function() returns when stdin is readable (default: the loop's wait on fd 0)}
-- The editor is closed (terminal restored) however the loop ends: the caller's task
-- destructor does it when the session is cancelled.
function Session:interactive(o)
  local ed = o.term.editor { history = o.history,
    complete = function(word, line, start) return self:completions(word, line, start) end }
  loop.defer(function() ed:close() end)
  local wait = o.wait or function() loop.wait_fd(0, "r") end
  local pending
  local warned = false
  self.stdout:write("cargoship repl: ", #self.ctx.hosts, " host", #self.ctx.hosts == 1 and "" or "s",
    "; help shows what is at hand\n")
  while not self.done do
    self:flush()
    ed:start(pending and ">> " or self:prompt())
    local kind, text
    repeat
      wait()
      kind, text = ed:read_char()
    until kind ~= "pending"
    if kind == "eof" then
      self.done = true
    elseif kind == "interrupt" then
      pending = nil
    else
      if text:match("%S") then
        ed:add_history(text)
        local ok, err = ed:save_history()
        if not ok and not warned then
          warned = true
          self.log:warn("history not saved: %s", tostring(err))
        end
      end
      local src = pending and (pending .. "\n" .. text) or text
      if not pending and src:match("^%s*exit%s*$") then break end
      local fn, err, incomplete = self:compile(src, "=repl")
      if incomplete then
        pending = src
      else
        pending = nil
        if fn then self:eval_interruptible(ed, fn) elseif src:match("%S") then self:show_error(err) end
      end
    end
  end
  self:flush()
  ed:close()
end

-- $XDG_STATE_HOME/cargoship/repl_history, else ~/.local/state/cargoship/repl_history.
function M.history_path(env)
  local base = env("XDG_STATE_HOME")
  if not base or base:sub(1, 1) ~= "/" then
    local home = env("HOME")
    if not home or home == "" then return nil end
    base = home .. "/.local/state"
  end
  return base .. "/cargoship/repl_history"
end

M.Session = Session
M.EXIT = EXIT
return M
