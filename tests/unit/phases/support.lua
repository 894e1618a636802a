-- Shared helpers for the phase specs: real dry-run Host objects over fake connections that answer from fixtures.
--
-- A fake connection answers host:probes batches key by key from `answers` (a string is
-- stdout with exit 0, {out =, code =} both, a function(cmd) -> out, code) and any other
-- command through answers[1] (a function(cmd, opts) -> out, err, code). Unknown probe keys
-- answer exit 127 with no output, as a missing tool would. Every command is recorded.
-- The hosts are dry-run hosts, so a phase that tries to write raises.
local context = require "cargoship.pipeline.context"
local host_mod = require "cargoship.host"
local batch = require "cargoship.host_batch"
local log_mod = require "cargoship.log"

local M = {}

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

function M.fixture(name)
  local f = assert(io.open(SRC .. "/tests/fixtures/" .. name, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function unquote(s)
  return (s:gsub("^'(.*)'$", "%1"):gsub("'\\''", "'"))
end

local function answer(a, cmd)
  if a == nil then return "", 127 end
  if type(a) == "string" then return a, 0 end
  if type(a) == "function" then
    local out, code = a(cmd)
    return out or "", code or 0
  end
  return a.out or "", a.code or 0
end

-- M.conn(answers, {user = "root", sudo_error = msg}) -> fake connection
function M.conn(answers, o)
  o = o or {}
  local c = { commands = {}, user = o.user or "root", root = (o.user or "root") == "root" }
  function c.exec(_, cmd, opts)
    c.commands[#c.commands + 1] = { cmd = cmd, sudo = opts and opts.sudo }
    if opts and opts.sudo and o.sudo_error then return nil, o.sudo_error, "auth" end
    if cmd:find("\\036cs-begin", 1, true) then
      local parts = {}
      -- each key runs in "( ... )" or "{ ... }" (host:probes decides), stderr discarded
      local pattern = "printf '\\036cs%-begin:%%s\\n' ('[^\n]-')\n([({]) (.-)\n([)}]) 2>/dev/null\n"
      for key, open, body, close in cmd:gmatch(pattern) do
        assert((open == "(") == (close == ")"), "unbalanced probe wrapper")
        key = unquote(key)
        local out, code = answer(answers[key], body)
        parts[#parts + 1] = "\30cs-begin:" .. key .. "\n" .. out .. "\30cs-end:" .. key .. ":" .. code .. "\n"
      end
      return table.concat(parts), "", 0
    end
    if answers[1] then return answers[1](cmd, opts) end
    return "", "", 0
  end
  function c.check() error("fake connection: check is a write", 2) end
  function c.upload() error("fake connection: upload is a write", 2) end
  return c
end

-- A logger whose lines land in `lines` (plain text, no colour).
function M.logger()
  local lines = {}
  local stream = { write = function(self, ...)
    for _, s in ipairs({ ... }) do lines[#lines + 1] = s end
    return self
  end }
  local log = log_mod.new { level = "debug", stream = stream }
  return log, function() return table.concat(lines) end
end

-- M.host(cfg, answers, conn_opts) -> dry-run Host attached to a fake connection.
-- cfg: a normalized host entry; name, role and connection get defaults.
function M.host(cfg, answers, conn_opts, log)
  cfg.role = cfg.role or "controller"
  cfg.connection = cfg.connection or { kind = "ssh", address = cfg.address or "192.0.2.10", user = "root", port = 22 }
  cfg.name = cfg.name or cfg.connection.address
  cfg.engine = cfg.engine or { labels = {}, taints = {} }
  cfg.host = cfg.host or { ports = {}, policy = {}, firewall = { rules = {} } }
  local h = host_mod.new { config = cfg, dry_run = true }
  h.log = (log or M.logger()):for_host(h.name)
  if answers then h:attach(M.conn(answers, conn_opts)) end
  return h
end

-- A real context (cargoship.pipeline.context) with a sequential each of the same contract,
-- so failures come back in host order. o.fields are set on it (leader, engine_running, ...);
-- o.transport is the run's, given to every host as the command would.
function M.ctx(hosts, o)
  o = o or {}
  local log, text = M.logger()
  for _, h in ipairs(hosts) do
    h.log = log:for_host(h.name)
    if o.transport then h.transport = o.transport end
  end
  local ctx = context.new {
    cluster = o.cluster or { hosts = {}, profiles = {} },
    hosts = hosts, options = o.options or {}, dry_run = o.dry_run ~= false, log = log,
    distro = o.distro, transport = o.transport, run_id = o.run_id,
  }
  ctx.clock = o.clock
  for k, v in pairs(o.fields or {}) do ctx[k] = v end
  function ctx.each(_, list, fn)
    local failures, values = {}, {}
    for _, h in ipairs(list) do
      local ok, r, err = pcall(fn, h)
      if not ok then failures[#failures + 1] = { host = h, err = tostring(r) }
      elseif r == nil and err ~= nil then failures[#failures + 1] = { host = h, err = err }
      else values[h] = r end
    end
    if #failures > 0 then return nil, failures, values end
    return true, values
  end
  return ctx, text
end

-- The error texts of a failure list (or a single message), in order.
function M.errors(err)
  if type(err) ~= "table" then return { err } end
  local out = {}
  for i, f in ipairs(err) do out[i] = (f.host and f.host.name .. ": " or "") .. tostring(f.err) end
  return out
end

-- M.scripted(name, rules, record) -> a connection for a real (writing) Host: each command is
-- passed to record("name: cmd") and answered by the first rule whose pattern it contains:
-- {pattern, out, code} or {pattern, fn = function(cmd) -> out, code}. A batched probe
-- (host:probes) no rule answers gets every key empty, as a fresh host answers facts.host;
-- any other command, "" and exit 0.
function M.scripted(name, rules, record)
  local c = {}
  local function reply(cmd)
    record(name .. ": " .. cmd)
    for _, r in ipairs(rules) do
      if cmd:find(r[1], 1, true) then
        if r.fn then return r.fn(cmd) end
        return r[2] or "", r[3] or 0
      end
    end
    local batched = {}
    for key in cmd:gmatch("printf '\\036cs%-begin:%%s\\n' '([^']+)'") do
      batched[#batched + 1] = "\30cs-begin:" .. key .. "\n\30cs-end:" .. key .. ":0\n"
    end
    return table.concat(batched), 0
  end
  -- a batch of records (cargoship.host_batch): each body answered as a command of its own,
  -- stopping at the first non-zero, with the markers the host's script prints
  local function batch_reply(stdin)
    local out, err = {}, {}
    for i, body in ipairs(batch.unpack(stdin)) do
      local o, code = reply(body)
      out[#out + 1] = string.format("\30cs-a:%d\n%s\30cs-z:%d:%d\n", i, o, i, code)
      err[#err + 1] = string.format("\30cs-a:%d\n%s", i, code == 0 and "" or "failed")
      if code ~= 0 then return table.concat(out), table.concat(err), code end
    end
    return table.concat(out), table.concat(err), 0
  end
  function c.exec(_, cmd, opts)
    if cmd == batch.LOADER then return batch_reply(opts.stdin) end
    local out, code = reply(cmd)
    return out, code == 0 and "" or "failed", code
  end
  function c.check(_, cmd)
    local out, code = reply(cmd)
    if code ~= 0 then return nil, name .. ": command failed (exit " .. code .. "): " .. out, "exit" end
    return out, ""
  end
  return c
end

-- M.drive(phase, ctx): what the runner does for a phase: prepare, assess each host, plan, run.
function M.drive(phase, ctx)
  local work = phase.prepare(ctx)
  ctx._planned, ctx._outcomes, ctx._steps = {}, {}, phase.steps
  local with = {}
  for _, h in ipairs(work) do
    local acts = phase.assess(ctx, h)
    if #acts > 0 then ctx._planned[h] = acts; with[#with + 1] = h end
  end
  if #with == 0 then return true, "nothing" end
  return phase.run(ctx, with)
end

return M
