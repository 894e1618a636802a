-- cargoship.pipeline.custom.sandbox: the environment a custom phase file runs in; errors naming its file and line.
--
-- Safe standard libraries, the libraries custom/api.lua lists (shell quoting, json, the
-- action record constructors), and print routed to the run's logger; no require, io,
-- os.execute, load, debug, coroutine or package: asking for one says why it is missing.
local action = require "cargoship.action"
local api = require "cargoship.pipeline.custom.api"
local json = require "cargoship.json"
local shell = require "cargoship.shell"

local M = {}

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

local SOURCES = { shell = shell, json = setmetatable({ decode = json_decode }, { __index = json }), action = action }

-- The libraries api.lua lists, each a fresh table of exactly those names.
local function libraries()
  local out = {}
  for lib, names in pairs(api.libraries) do
    local t = {}
    for _, name in ipairs(names) do
      t[name] = SOURCES[lib][name]
      if t[name] == nil then error("custom/api.lua lists " .. lib .. "." .. name .. ", which does not exist", 0) end
    end
    out[lib] = t
  end
  return out
end

-- M.new{log = logger, name = "phases/x.lua"} -> a fresh environment for one file.
function M.new(o)
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
    print = function(...)
      local parts = table.pack(...)
      for i = 1, parts.n do parts[i] = tostring(parts[i]) end
      if log then log:info("%s: %s", name, table.concat(parts, "\t", 1, parts.n)) end
    end,
  }
  for lib, t in pairs(libraries()) do env[lib] = t end
  return refusing(env, REFUSED, "")
end

-- ---- errors that name the file and line ------------------------------------------------------

function M.message_of(e)
  if type(e) == "table" and e.err then return tostring(e.err) end
  return tostring(e)
end

-- A message handler for code of `file`: a message without position gets the innermost
-- line of the file on the stack. Cancellation passes untouched: it is not the file's error.
function M.handler_for(file)
  local source = "@" .. file
  return function(e)
    if e == "cancelled" then return e end
    local msg = M.message_of(e)
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
function M.guarded(handler, fn, ...)
  local r = table.pack(xpcall(fn, handler, ...))
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

return M
