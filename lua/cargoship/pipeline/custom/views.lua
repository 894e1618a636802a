-- cargoship.pipeline.custom.views: what a custom phase sees of hosts and the context, and its phase behind them.
--
-- A custom phase's functions get views, not the runner's objects: a host view answers the
-- fields and methods custom/api.lua lists and nothing else (no session, no transport), a
-- context view likewise, with hosts viewed wherever they go in or come out. A custom phase
-- thus reaches a machine only through the host methods, whose writes a dry run refuses.
local api = require "cargoship.pipeline.custom.api"
local sandbox = require "cargoship.pipeline.custom.sandbox"

local M = {}

local guarded = sandbox.guarded

local real_host = setmetatable({}, { __mode = "k" })   -- view -> Host
local host_view = setmetatable({}, { __mode = "k" })   -- Host -> view
local real_ctx = setmetatable({}, { __mode = "k" })   -- view -> Context
local ctx_handler = setmetatable({}, { __mode = "k" }) -- view -> the file's error handler

local HOST_FIELDS = api.set(api.host.fields)
local host_methods = {}
for _, name in ipairs(api.host_methods()) do
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

-- M.host(h) -> the view of Host h (one per host, so views compare as their hosts do)
function M.host(h)
  local v = host_view[h]
  if not v then
    v = setmetatable({}, HostView)
    real_host[v], host_view[h] = h, v
  end
  return v
end

-- The Host behind a view, or nil when v is not a host view.
function M.real(v) return real_host[v] end

local function unview_host(v, what)
  local h = real_host[v]
  if not h then error(what .. " is not one of ctx.hosts", 3) end
  return h
end

local function view_list(hosts)
  local out = {}
  for i, h in ipairs(hosts or {}) do out[i] = M.host(h) end
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

-- The context's methods over views; api.ctx.methods names them, and each is defined here.
local ctx_methods = {}

-- ctx:each(hosts, fn, opts): as Context:each, over views.
function ctx_methods.each(self, hosts, fn, opts)
  local ctx, handler = real_ctx[self], ctx_handler[self]
  -- fn fails in a task of its own: name the file there, where the stack still shows it
  local ok, a, b = ctx:each(unview_list(hosts, "hosts"), function(h)
    return guarded(handler, fn, M.host(h))
  end, opts)
  local function values(map)
    local out = {}
    for h, v in pairs(map or {}) do out[M.host(h)] = v end
    return out
  end
  if ok then return true, values(a) end
  local failures = {}
  for i, f in ipairs(a) do failures[i] = { host = M.host(f.host), err = f.err } end
  return nil, failures, values(b)
end

function ctx_methods.fail(self, host, msg)
  return real_ctx[self]:fail(unview_host(host, "host"), msg)
end

function ctx_methods.leave(self, host, why)
  return real_ctx[self]:leave(unview_host(host, "host"), why)
end

-- ctx:planned(host) and ctx:apply(host, actions): as Context's, over views.
function ctx_methods.planned(self, host)
  return real_ctx[self]:planned(unview_host(host, "host"))
end

function ctx_methods.apply(self, host, actions)
  return real_ctx[self]:apply(unview_host(host, "host"), actions)
end

-- Waiting, randomness and the leader's node listing: as Context's (they hand out no host).
function ctx_methods.wait_until(self, check, opts)
  return real_ctx[self]:wait_until(check, opts)
end

function ctx_methods.sleep(self, seconds)
  return real_ctx[self]:sleep(seconds)
end

function ctx_methods.random(self, n)
  return real_ctx[self]:random(n)
end

function ctx_methods.leader_nodes(self)
  return real_ctx[self]:leader_nodes()
end

for _, name in ipairs(api.ctx.methods) do
  assert(ctx_methods[name], "custom/api.lua lists ctx:" .. name .. ", which views.lua does not define")
end
for name in pairs(ctx_methods) do
  assert(api.set(api.ctx.methods)[name], "views.lua defines ctx:" .. name .. ", which custom/api.lua does not list")
end

local CTX_FIELDS = api.set(api.ctx.fields)
local CtxView = {
  __metatable = "cargoship context view",
  __index = function(v, k)
    if ctx_methods[k] then return ctx_methods[k] end
    if CTX_FIELDS[k] then return real_ctx[v][k] end
    if k == "leader" then
      local h = real_ctx[v].leader
      return h and M.host(h) or nil
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

-- M.wrap(phase, file) -> the phase the runner walks: the file's functions behind views and
-- the error handler that names the file.
function M.wrap(phase, file)
  local h = sandbox.handler_for(file)
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
    w.assess = function(ctx, host) return guarded(h, phase.assess, view_ctx(ctx), M.host(host)) end
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
        return guarded(h, fn, view_ctx(ctx), M.host(host), a)
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

return M
