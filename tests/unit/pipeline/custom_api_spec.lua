-- Specs that the custom-phase API is listed once: the sandbox, the views and docs/phases.md agree with custom/api.lua.
local api = require "cargoship.pipeline.custom.api"
local custom = require "cargoship.pipeline.custom"
local util = require "cargoship.util"
local S = require "unit.pipeline.support"

local SRC = debug.getinfo(1, "S").source:match("^@(.*)/tests/unit/pipeline/[^/]*$") or "."

local function sorted(set)
  local out = {}
  for k in pairs(set) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function sorted_list(list)
  local out = { table.unpack(list) }
  table.sort(out)
  return out
end

-- The names docs/phases.md documents in its "The context" and "A host" tables (first
-- column only): {ctx_fields, ctx_methods, host_fields, host_reads, host_writes} as sets.
local function documented()
  local f = assert(io.open(SRC .. "/docs/phases.md", "rb"))
  local text = f:read("a")
  f:close()
  local got = { ctx_fields = {}, ctx_methods = {}, host_fields = {}, host_reads = {}, host_writes = {} }
  local section, host_part
  for line in text:gmatch("[^\n]*") do
    if line:match("^#") then
      section = line:match("^### The context") and "ctx" or line:match("^### A host") and "host" or nil
      host_part = "fields"
    elseif section and line:match("^| ") then
      local first = line:match("^|([^|]*)|")
      if first:find("**reads**", 1, true) then host_part = "reads"
      elseif first:find("**writes**", 1, true) then host_part = "writes" end
      for obj, sep, name in first:gmatch("`(%a+)([.:])([%w_]+)") do
        if obj == "ctx" and section == "ctx" then
          got[sep == "." and "ctx_fields" or "ctx_methods"][name] = true
        elseif obj == "host" and section == "host" then
          if sep == "." then got.host_fields[name] = true
          else got["host_" .. host_part][name] = true end
        end
      end
    end
  end
  return got
end

describe("the custom-phase API", function()
  it("is what docs/phases.md documents, name for name", function()
    local d = documented()
    local ctx_fields = { table.unpack(api.ctx.fields) }
    for _, k in ipairs(api.ctx.host_fields) do ctx_fields[#ctx_fields + 1] = k end
    assert.are.same(sorted_list(ctx_fields), sorted(d.ctx_fields))
    assert.are.same(sorted_list(api.ctx.methods), sorted(d.ctx_methods))
    assert.are.same(sorted_list(api.host.fields), sorted(d.host_fields))
    assert.are.same(sorted_list(api.host.reads), sorted(d.host_reads))
    assert.are.same(sorted_list(api.host.writes), sorted(d.host_writes))
  end)

  it("is exactly what the sandbox's libraries hold", function()
    local env = custom.sandbox {}
    for lib, names in pairs(api.libraries) do
      local have = {}
      for k in pairs(env[lib]) do have[k] = true end
      assert.are.same(sorted_list(names), sorted(have), lib)
    end
  end)

  it("is exactly what a host view and a context view answer", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. util.quote(dir)))
    local path = dir .. "/look.lua"
    local f = assert(io.open(path, "wb"))
    -- probes every name a view could answer: the API's, and some the runner's objects have
    f:write([[
local PROBE = { "name", "role", "index", "facts", "config", "os", "log", "dry_run", "conn", "attach", "connect",
  "probe", "probes", "read_file", "exists", "is_controller", "run", "check", "write_file", "upload", "remove",
  "apply", "refused", "probes_sent", "session", "transport" }
local CPROBE = { "hosts", "leader", "cluster", "options", "dry_run", "state", "engine_type", "engine_running",
  "run_id", "log", "env", "distro", "each", "fail", "leave", "planned", "apply", "transport", "host_lost", "_lost",
  "locks", "lock_conflicts", "sleep", "wait_until", "random", "leader_nodes", "leader_listing", "now", "_left" }
return { id = "look", title = "Look", dry_run = "read_only", run = function(ctx, hosts)
  local seen = { host = {}, ctx = {} }
  for _, k in ipairs(PROBE) do if hosts[1][k] ~= nil then seen.host[#seen.host + 1] = k end end
  for _, k in ipairs(CPROBE) do if ctx[k] ~= nil then seen.ctx[#seen.ctx + 1] = k end end
  ctx.state.seen = seen
  return true
end }
]])
    f:close()
    local ctx = S.ctx { dry_run = true }
    ctx.distro, ctx.engine_type, ctx.engine_running = {}, "rke2", false
    -- fields the first phases fill in: every one set, so a view that drops one is seen
    for _, h in ipairs(ctx.hosts) do h.os = h.os or {} end
    local rep = S.run(ctx, { assert(custom.load(path)) })
    os.execute("rm -rf " .. util.quote(dir))
    assert.are.equal("ran", rep.phases[1].verdict, rep.phases[1].error)
    local host_api = { table.unpack(api.host.fields) }
    for _, k in ipairs(api.host_methods()) do host_api[#host_api + 1] = k end
    assert.are.same(sorted_list(host_api), sorted_list(ctx.state.seen.host))
    local ctx_api = { table.unpack(api.ctx.fields) }
    for _, list in ipairs { api.ctx.host_fields, api.ctx.methods } do
      for _, k in ipairs(list) do ctx_api[#ctx_api + 1] = k end
    end
    assert.are.same(sorted_list(ctx_api), sorted_list(ctx.state.seen.ctx))
  end)

  it("lets a custom phase leave a host alone with ctx:leave, as docs/phases.md says", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. util.quote(dir)))
    local path = dir .. "/leave.lua"
    local f = assert(io.open(path, "wb"))
    f:write([[
return { id = "leave", title = "Leave", assess = function(ctx, host)
  if host.name == "worker-1" then ctx:leave(host, "no engine here") return nil end
  return { action.note { say = "do it" } }
end }
]])
    f:close()
    local rep = S.run(S.ctx { dry_run = true }, { assert(custom.load(path)) })
    os.execute("rm -rf " .. util.quote(dir))
    assert.are.equal("would_act", rep.phases[1].verdict, rep.phases[1].error)
    assert.are.equal("no engine here", S.host_of(rep.phases[1], "worker-1").left_alone)
  end)
end)
