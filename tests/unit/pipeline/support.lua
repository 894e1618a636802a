-- tests/unit/pipeline/support.lua: fake hosts, fake phases and a one-call runner for the pipeline specs.
local batch = require "cargoship.host_batch"
local context = require "cargoship.pipeline.context"
local log = require "cargoship.log"
local loop = require "cargoship.loop"
local runner = require "cargoship.pipeline.runner"

local M = {}

M.capture = require "unit.capture"

-- A connection that answers every command from `answers` (cmd pattern -> stdout) or with
-- "" and exit 0, recording what it was asked. exec may sleep (delay) to let tasks interleave.
-- Like the transport, it starts nothing in a task being cancelled (raises "cancelled").
local function not_stopping()
  local me = loop.current()
  if me and me:stopping() then error("cancelled", 0) end
end

-- A batch of records (cargoship.host_batch) is answered body by body as checks, each recorded
-- as {op = "check", cmd = body, batch = n} (n: the batch's size), with the markers the host's
-- script prints, stopping at the first that fails (an `error` answer: exit 1, its text on stderr).
local function batch_reply(conn, o, stdin)
  local out, err, bodies = {}, {}, batch.unpack(stdin)
  for i, body in ipairs(bodies) do
    conn.calls[#conn.calls + 1] = { op = "check", cmd = body, batch = #bodies }
    local answer, code = "", 0
    for pattern, a in pairs(o.answers or {}) do
      if body:find(pattern, 1, true) then answer = a break end
    end
    local e = ""
    if type(answer) == "table" then answer, code, e = "", 1, answer.error end
    out[#out + 1] = string.format("\30cs-a:%d\n%s\30cs-z:%d:%d\n", i, answer, i, code)
    err[#err + 1] = string.format("\30cs-a:%d\n%s", i, e)
    if code ~= 0 then return table.concat(out), table.concat(err), code end
  end
  return table.concat(out), table.concat(err), 0
end

function M.fake_conn(o)
  o = o or {}
  local conn = { calls = {} }
  function conn.exec(_, cmd, opts)
    not_stopping()
    if cmd == batch.LOADER then
      if o.delay then loop.sleep(o.delay) end
      return batch_reply(conn, o, opts.stdin)
    end
    conn.calls[#conn.calls + 1] = { op = "exec", cmd = cmd, opts = opts }
    if o.delay then loop.sleep(o.delay) end
    for pattern, out in pairs(o.answers or {}) do
      if cmd:find(pattern, 1, true) then return out, "", 0 end
    end
    return "", "", 0
  end
  function conn.check(_, cmd, opts)
    not_stopping()
    conn.calls[#conn.calls + 1] = { op = "check", cmd = cmd, opts = opts }
    if o.delay then loop.sleep(o.delay) end
    for pattern, out in pairs(o.answers or {}) do
      if cmd:find(pattern, 1, true) then
        if type(out) == "table" then return nil, out.error, "exit" end
        return out, ""
      end
    end
    return ""
  end
  function conn.upload(_, src, dst)
    not_stopping()
    conn.calls[#conn.calls + 1] = { op = "upload", src = src, dst = dst }
    return { skipped = false, bytes = 0 }
  end
  return conn
end

M.HOSTS = {
  { name = "ctrl-1", role = "controller" },
  { name = "ctrl-2", role = "controller" },
  { name = "worker-1", role = "worker" },
}

-- A cluster of `names` (default M.HOSTS), as config.load would give it (only what Host reads).
function M.cluster(hosts)
  local list = {}
  for i, h in ipairs(hosts or M.HOSTS) do
    list[i] = { index = i, name = h.name, role = h.role,
      connection = { kind = "ssh", address = "10.0.0." .. i, port = 22, user = "root" } }
  end
  return { name = "lab", hosts = list }
end

-- A context over real Host objects with fake connections attached.
-- o = {dry_run =, concurrency =, hosts =, conn = {fake_conn options}, log_stream =}
function M.ctx(o)
  o = o or {}
  local stream = o.log_stream or M.capture()
  local logger = log.new { level = "debug", stream = stream }
  local ctx = context.new { cluster = M.cluster(o.hosts), options = { concurrency = o.concurrency or 30 },
    log = logger, dry_run = o.dry_run, run_id = "run-1" }
  for _, h in ipairs(ctx.hosts) do h:attach(M.fake_conn(o.conn)) end
  ctx.log_stream = stream
  return ctx
end

-- The sentence of the default assess of M.phase.
function M.default_say(id) return "do " .. id end

-- A phase table with every call recorded in `calls` (a shared list of "id:fn[:host]").
-- fields override the defaults (id, title, run that does nothing, and unless the phase is
-- read-only an assess planning one note "do <id>" per host: the contract wants assess).
function M.phase(calls, id, fields)
  local p = { id = id, title = "Phase " .. id }
  p.run = function(_, hosts)
    local names = {}
    for i, h in ipairs(hosts) do names[i] = h.name end
    calls[#calls + 1] = id .. ":run:" .. table.concat(names, ",")
  end
  fields = fields or {}
  if fields.dry_run ~= "read_only" then p.assess = function() return { M.default_say(id) } end end
  for k, v in pairs(fields) do p[k] = v end
  return p
end

-- The sentences of a report host entry's actions (or of a list of records).
function M.says(entry)
  local out = {}
  for i, a in ipairs(entry.actions or entry) do out[i] = type(a) == "table" and a.say or a end
  return out
end

-- runner.run inside a fresh loop; -> report (raises what the runner raised)
function M.run(ctx, phases, opts)
  local ok, rep = loop.run(function() return runner.run(ctx, phases, opts) end)
  if not ok then error(rep, 0) end
  return rep
end

-- The report's phase entry by id.
function M.phase_of(rep, id)
  for _, p in ipairs(rep.phases) do
    if p.id == id then return p end
  end
end

-- A phase entry's host entry by name.
function M.host_of(entry, name)
  for _, h in ipairs(entry.hosts) do
    if h.host == name then return h end
  end
end

return M
