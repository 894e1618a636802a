-- cargoship.pipeline.custom: loads the operator's phase files into a sandbox and places them in a pipeline.
--
-- A custom phase file is Lua that returns a phase table, the same contract as the built-in
-- phases (pipeline/contract.lua), plus, for files found through `apply --phases DIR`, its
-- placement: exactly one of before/after/replace = "<phase id>". Entries of the cluster
-- file's spec.phases carry their placement in the entry (config/phases.lua), which wins
-- over the file's own.
--
-- The file runs in an environment of its own: safe standard libraries, `shell` (quoting),
-- `json`, `action` (the record constructors of cargoship.action), and print routed to the
-- run's logger; no require, io, os.execute, load, debug, coroutine or package. Its functions
-- receive views of the context and the hosts that expose the phase API and nothing of the
-- runtime: a custom phase reaches a machine only
-- through the host methods, whose writes a dry run refuses. Every error raised from the
-- file names it and the line. docs/phases.md is the operator's manual of all this.
local action = require "cargoship.action"
local contract = require "cargoship.pipeline.contract"
local errors = require "cargoship.config.errors"
local json = require "cargoship.json"
local shell = require "cargoship.shell"

local M = {}

M.PLACEMENTS = { "before", "after", "replace" }

-- ---- the sandbox --------------------------------------------------------------------------

local WHY = "custom phases reach hosts through the host object and nothing else (docs/phases.md)"
local REFUSED = {
  require = WHY, io = WHY, load = WHY, loadfile = WHY, dofile = WHY, debug = WHY,
  coroutine = "the runner schedules phases; use ctx:each for per-host concurrency",
  package = WHY, collectgarbage = WHY, rawset = WHY, rawget = WHY,
}
local OS_REFUSED = { execute = WHY, exit = WHY, remove = WHY, rename = WHY, tmpname = WHY,
  getenv = "use ctx.env(name)", setlocale = WHY }

local function copy(t, skip)
  local c = {}
  for k, v in pairs(t) do
    if not (skip and skip[k]) then c[k] = v end
  end
  return c
end

local function refusing(t, refused, prefix)
  return setmetatable(t, { __index = function(_, k)
    local why = refused[k]
    if why then error(prefix .. tostring(k) .. " is not available to custom phases: " .. why, 2) end
    return nil
  end })
end

-- cjson hands JSON null back as its own sentinel; phases compare with json.null.
local function from_cjson(v, null)
  if v == null then return json.null end
  -- cjson reads every number as a float; 5 should stay the integer it was written as
  if math.type(v) == "float" and math.tointeger(v) then return math.tointeger(v) end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = from_cjson(x, null) end
  return out
end

local function json_decode(text)
  local cjson = require "cjson"
  local ok, v = pcall(cjson.decode, text)
  if not ok then return nil, "json.decode: " .. tostring(v) end
  return from_cjson(v, cjson.null)
end

-- M.sandbox{log = logger, name = "phases/x.lua"} -> a fresh environment for one file.
function M.sandbox(o)
  local log, name = o.log, o.name or "custom phase"
  local env = {
    _VERSION = _VERSION,
    assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall,
    xpcall = xpcall, select = select, tonumber = tonumber, tostring = tostring, type = type,
    rawequal = rawequal, rawlen = rawlen, setmetatable = setmetatable,
    -- strings share one metatable with the whole program; a phase only gets its own tables'
    getmetatable = function(v) if type(v) == "table" then return getmetatable(v) end return nil end,
    string = copy(string, { dump = true }),
    table = copy(table),
    math = copy(math),
    utf8 = copy(utf8),
    os = refusing({ time = os.time, clock = os.clock, date = os.date }, OS_REFUSED, "os."),
    shell = { quote = shell.quote, words = shell.words, fmt = shell.fmt },
    json = { encode = json.encode, decode = json_decode, null = json.null, array = json.array },
    action = { run = action.run, write = action.write, upload = action.upload, remove = action.remove,
      service = action.service, step = action.step, note = action.note },
    print = function(...)
      local parts = table.pack(...)
      for i = 1, parts.n do parts[i] = tostring(parts[i]) end
      if log then log:info("%s: %s", name, table.concat(parts, "\t", 1, parts.n)) end
    end,
  }
  return refusing(env, REFUSED, "")
end

-- ---- errors that name the file and line ------------------------------------------------------

local function message_of(e)
  if type(e) == "table" and e.err then return tostring(e.err) end
  return tostring(e)
end

-- A message handler for code of `file`: a message without position gets the innermost
-- line of the file on the stack. Cancellation passes untouched: it is not the file's error.
local function handler_for(file)
  local source = "@" .. file
  return function(e)
    if e == "cancelled" then return e end
    local msg = message_of(e)
    if msg:sub(1, #file + 1) == file .. ":" then return msg end
    for level = 2, 60 do
      local info = debug.getinfo(level, "Sl")
      if not info then break end
      if info.source == source and info.currentline > 0 then
        return string.format("%s:%d: %s", file, info.currentline, msg)
      end
    end
    return file .. ": " .. msg
  end
end

-- Calls fn(...) so that an error names the file (and returns fn's results otherwise).
local function guarded(handler, fn, ...)
  local r = table.pack(xpcall(fn, handler, ...))
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- ---- views: what a custom phase sees of hosts and the context ----------------------------------

local real_host = setmetatable({}, { __mode = "k" })   -- view -> Host
local host_view = setmetatable({}, { __mode = "k" })   -- Host -> view
local real_ctx = setmetatable({}, { __mode = "k" })   -- view -> Context
local ctx_handler = setmetatable({}, { __mode = "k" }) -- view -> the file's error handler

local HOST_FIELDS = { name = true, role = true, index = true, facts = true, config = true, os = true,
  log = true, dry_run = true }
M.HOST_METHODS = { "probe", "probes", "read_file", "exists", "run", "check", "write_file", "upload",
  "remove", "is_controller" }
local host_methods = {}
for _, name in ipairs(M.HOST_METHODS) do
  host_methods[name] = function(self, ...)
    local h = real_host[self]
    if not h then error("host:" .. name .. ": call it on a host, as host:" .. name .. "(...)", 2) end
    return h[name](h, ...)
  end
end

local HostView = {
  __metatable = "cargoship host view",
  __index = function(v, k)
    if host_methods[k] then return host_methods[k] end
    if HOST_FIELDS[k] then return real_host[v][k] end
    return nil
  end,
  __newindex = function(_, k)
    error("a host is read-only to a custom phase; keep `" .. tostring(k) .. "` in ctx.state", 2)
  end,
  __tostring = function(v) return "host " .. tostring(real_host[v].name) end,
}

local function view_host(h)
  local v = host_view[h]
  if not v then
    v = setmetatable({}, HostView)
    real_host[v], host_view[h] = h, v
  end
  return v
end

local function unview_host(v, what)
  local h = real_host[v]
  if not h then error(what .. " is not one of ctx.hosts", 3) end
  return h
end

local function view_list(hosts)
  local out = {}
  for i, h in ipairs(hosts or {}) do out[i] = view_host(h) end
  return out
end

local function unview_list(list, what)
  if type(list) ~= "table" then return list end
  local out = {}
  for i, v in ipairs(list) do out[i] = unview_host(v, string.format("%s[%d]", what, i)) end
  return out
end

-- A failure list ({host = view, err}) back in the runner's terms; anything else as is.
local function unview_failures(err)
  if type(err) ~= "table" or getmetatable(err) ~= nil or err.err ~= nil then return err end
  local out = {}
  for i, f in ipairs(err) do
    if type(f) == "table" and real_host[f.host] then out[i] = { host = real_host[f.host], err = f.err }
    else out[i] = f end
  end
  return out
end

local CTX_FIELDS = { cluster = true, options = true, dry_run = true, log = true, state = true,
  run_id = true, distro = true, env = true, engine_type = true, engine_running = true }
local ctx_methods = {}

-- ctx:each(hosts, fn, opts): as Context:each, over views.
function ctx_methods.each(self, hosts, fn, opts)
  local ctx, handler = real_ctx[self], ctx_handler[self]
  -- fn fails in a task of its own: name the file there, where the stack still shows it
  local ok, a, b = ctx:each(unview_list(hosts, "hosts"), function(h)
    return guarded(handler, fn, view_host(h))
  end, opts)
  local function values(map)
    local out = {}
    for h, v in pairs(map or {}) do out[view_host(h)] = v end
    return out
  end
  if ok then return true, values(a) end
  local failures = {}
  for i, f in ipairs(a) do failures[i] = { host = view_host(f.host), err = f.err } end
  return nil, failures, values(b)
end

function ctx_methods.fail(self, host, msg)
  return real_ctx[self]:fail(unview_host(host, "host"), msg)
end

-- ctx:planned(host) and ctx:apply(host, actions): as Context's, over views.
function ctx_methods.planned(self, host)
  return real_ctx[self]:planned(unview_host(host, "host"))
end

function ctx_methods.apply(self, host, actions)
  return real_ctx[self]:apply(unview_host(host, "host"), actions)
end

local CtxView = {
  __metatable = "cargoship context view",
  __index = function(v, k)
    if ctx_methods[k] then return ctx_methods[k] end
    if CTX_FIELDS[k] then return real_ctx[v][k] end
    if k == "leader" then
      local h = real_ctx[v].leader
      return h and view_host(h) or nil
    end
    return nil
  end,
  __newindex = function(_, k)
    error("the context is read-only to a custom phase; keep `" .. tostring(k) .. "` in ctx.state", 2)
  end,
}

-- One view per context and file (views[ctx]), so errors inside ctx:each name that file.
local function view_ctx_of(views, ctx, handler)
  local v = views[ctx]
  if not v then
    v = setmetatable({ hosts = view_list(ctx.hosts) }, CtxView)
    real_ctx[v], ctx_handler[v], views[ctx] = ctx, handler, v
  end
  return v
end

-- ---- a phase built from a file ----------------------------------------------------------------

-- The phase the runner walks: the file's functions behind views and the error handler.
local function wrap(phase, file)
  local h = handler_for(file)
  local views = setmetatable({}, { __mode = "k" })
  local function view_ctx(ctx) return view_ctx_of(views, ctx, h) end
  local w = { id = phase.id, title = phase.title, reads = phase.reads, creates = phase.creates,
    dry_run = phase.dry_run }
  if phase.prepare then
    w.prepare = function(ctx)
      local hosts, err = guarded(h, phase.prepare, view_ctx(ctx))
      if hosts == nil then return nil, err end
      return guarded(h, unview_list, hosts, "prepare's result")
    end
  end
  if phase.assess then
    w.assess = function(ctx, host) return guarded(h, phase.assess, view_ctx(ctx), view_host(host)) end
  end
  if phase.run then
    w.run = function(ctx, hosts)
      local r, err = guarded(h, phase.run, view_ctx(ctx), view_list(hosts))
      return r, unview_failures(err)
    end
  end
  if type(phase.steps) == "table" then
    w.steps = {}
    for name, fn in pairs(phase.steps) do
      w.steps[name] = type(fn) == "function" and function(ctx, host, a)
        return guarded(h, fn, view_ctx(ctx), view_host(host), a)
      end or fn
    end
  elseif phase.steps ~= nil then
    w.steps = phase.steps
  end
  if type(phase.dry_run) == "function" then
    w.dry_run = function(ctx, hosts)
      local results, err = guarded(h, phase.dry_run, view_ctx(ctx), view_list(hosts))
      if type(results) == "table" then
        local out = {}
        for i, r in ipairs(results) do
          out[i] = r
          if type(r) == "table" and real_host[r.host] then
            out[i] = { host = real_host[r.host], actions = r.actions }
          end
        end
        results = out
      end
      return results, unview_failures(err)
    end
  end
  if phase.cleanup then
    w.cleanup = function(ctx) return guarded(h, phase.cleanup, view_ctx(ctx)) end
  end
  return w
end

-- M.load(path, {log = logger}) -> phase, placement | nil, message
-- placement = {placement = "before"|"after"|"replace", anchor = id} when the file declares
-- one, else nil. The message names the file (and the line, for syntax and runtime errors).
function M.load(path, o)
  o = o or {}
  local env = M.sandbox { log = o.log, name = path:match("[^/]*$") }
  local chunk, err = loadfile(path, "t", env)
  if not chunk then return nil, err end
  local ok, phase = xpcall(chunk, handler_for(path))
  if not ok then return nil, phase end
  if type(phase) ~= "table" then
    return nil, string.format("%s: a custom phase file returns its phase table (docs/phases.md), this one "
      .. "returned %s", path, type(phase) == "nil" and "nothing" or ("a " .. type(phase)))
  end
  local found, placement = {}, nil
  local plain = {}
  for k, v in pairs(phase) do
    local is_place = false
    for _, p in ipairs(M.PLACEMENTS) do
      if k == p then
        is_place = true
        found[#found + 1] = p
        if type(v) ~= "string" or not v:match("^[a-z][a-z0-9_]*$") then
          return nil, string.format("%s: `%s` must name a phase by its id (like \"validate_hosts\"), not %s",
            path, p, type(v) == "string" and errors.quote(v) or ("a " .. type(v)))
        end
        placement = { placement = p, anchor = v }
      end
    end
    if not is_place then plain[k] = v end
  end
  if #found > 1 then
    table.sort(found)
    return nil, string.format("%s: a phase has one placement, this one declares %s", path, table.concat(found, ", "))
  end
  local good, problems = contract.check(plain)
  if not good then
    return nil, string.format("%s: breaks the phase contract: %s", path, table.concat(problems, "; "))
  end
  return wrap(plain, path), placement
end

-- ---- placing phases in a pipeline ---------------------------------------------------------------

local function where_text(src, at)
  at = at or src
  local e = { file = src.file, line = at.line, col = at.col, path = at.path or src.path }
  return (errors.text { file = e.file, line = e.line, col = e.col, path = e.path, message = "" }:gsub(": $", ""))
end

-- The *.lua files of dir, sorted by name. -> paths | nil, message
function M.list_dir(dir)
  local cmd = "cd -- " .. shell.quote(dir) .. " 2>&1 || exit 3; LC_ALL=C; export LC_ALL; "
    .. "for f in *.lua; do [ -f \"$f\" ] && printf '%s\\0' \"$f\"; done; exit 0"
  local p = io.popen(cmd)
  local out = p and p:read("a") or ""
  local ok = p and p:close()
  if not ok then
    return nil, string.format("--phases %s: %s", dir, (out:match("[^\n]+") or "cannot list the directory")
      :gsub("^.-cd: ", ""))
  end
  local list = {}
  for name in out:gmatch("([^%z]+)%z") do list[#list + 1] = (dir:gsub("/+$", "")) .. "/" .. name end
  table.sort(list)
  return list
end

-- Loads every custom phase the run asks for. -> customs | nil, message (all problems)
-- o = {cluster = normalized cluster (its .phases), dir = --phases DIR or nil, log}
function M.load_all(o)
  local customs, problems = {}, {}
  for _, e in ipairs((o.cluster and o.cluster.phases) or {}) do
    local f = io.open(e.path, "rb")
    if not f then
      local _, why = io.open(e.path, "rb")
      problems[#problems + 1] = string.format("%s: cannot read %s: %s", where_text(e.source, e.source.file_at),
        e.path, (tostring(why):gsub("^[^:]*: ", "")))
    else
      f:close()
      -- the entry's placement wins over one the file declares (its default for --phases)
      local phase, err = M.load(e.path, { log = o.log })
      if not phase then
        problems[#problems + 1] = err
      else
        customs[#customs + 1] = { phase = phase, placement = e.placement, anchor = e.anchor, file = e.path,
          origin = where_text(e.source, e.source.anchor_at) }
      end
    end
  end
  if o.dir then
    local files, err = M.list_dir(o.dir)
    if not files then
      problems[#problems + 1] = err
    else
      for _, path in ipairs(files) do
        local phase, declared = M.load(path, { log = o.log })
        if not phase then
          problems[#problems + 1] = declared
        elseif not declared then
          problems[#problems + 1] = string.format("%s: says nowhere where it goes: a file of --phases DIR declares "
            .. "one of before, after or replace = \"<phase id>\" in its phase table", path)
        else
          customs[#customs + 1] = { phase = phase, placement = declared.placement, anchor = declared.anchor,
            file = path, origin = path }
        end
      end
    end
  end
  if #problems > 0 then return nil, table.concat(problems, "\n") end
  return customs
end

-- M.assemble(phases, pipeline, customs) -> phases, pipeline | nil, message
-- pipeline: {name, phases = {{number, module}, ...}, not_in_build}; the result is a new one
-- whose entries are {number, module name or custom phase table}: a custom phase gets the
-- number of the phase it replaces, else of the phase before it (0 first).
function M.assemble(phases, pipeline, customs)
  if #customs == 0 then return phases, pipeline end
  local ids, slots, by_id = {}, {}, {}
  for i, p in ipairs(phases) do
    ids[i] = p.id
    local entry = pipeline.phases and pipeline.phases[i]
    slots[i] = { before = {}, after = {}, phase = p, number = entry and entry[1] or i,
      module = entry and entry[2] or p }
    by_id[p.id] = slots[i]
  end
  local problems = {}
  for _, c in ipairs(customs) do
    local slot = by_id[c.anchor]
    if not slot then
      problems[#problems + 1] = string.format("%s: unknown phase %s%s; the %s pipeline's phases are %s", c.origin,
        errors.quote(c.anchor), errors.did_you_mean(c.anchor, ids), pipeline.name or "this", table.concat(ids, ", "))
    elseif c.placement == "replace" then
      if slot.replaced then
        problems[#problems + 1] = string.format("%s: phase %s is already replaced by %s", c.origin, c.anchor,
          slot.replaced.file)
      else
        slot.replaced = c
      end
    else
      table.insert(slot[c.placement], c)
    end
  end
  if #problems > 0 then return nil, table.concat(problems, "\n") end
  local out, entries = {}, {}
  local function add(phase, number, module)
    out[#out + 1] = phase
    entries[#entries + 1] = { number, module or phase }
  end
  for _, slot in ipairs(slots) do
    for _, c in ipairs(slot.before) do add(c.phase, entries[#entries] and entries[#entries][1] or 0) end
    if slot.replaced then add(slot.replaced.phase, slot.number) else add(slot.phase, slot.number, slot.module) end
    for _, c in ipairs(slot.after) do add(c.phase, slot.number) end
  end
  local ok, list = contract.check_all(out)
  if not ok then
    return nil, "the pipeline with custom phases breaks the phase contract:\n  " .. table.concat(list, "\n  ")
  end
  return out, { name = pipeline.name, phases = entries, not_in_build = pipeline.not_in_build,
    skipped = pipeline.skipped }
end

-- Everything a command does before its first pass: load the run's custom phases and place
-- them. -> phases, pipeline | nil, message. Touches no host.
function M.extend(phases, pipeline, o)
  local customs, err = M.load_all(o)
  if not customs then return nil, err end
  return M.assemble(phases, pipeline, customs)
end

return M
