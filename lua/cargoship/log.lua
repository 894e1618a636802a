-- cargoship.log: levelled, host-prefixed, redacting logger for the console and the run's log file.
--
-- A logger writes to a console stream at its level and, when it has a file, every line at
-- debug level with a timestamp, so a quiet run still leaves the whole story behind. Child
-- loggers (`for_host`) share the parent's stream, file, level and secrets; they only add a
-- host column. Secrets registered on any of them are masked everywhere, including the file.
local lines = require "cargoship.lines"

local M = {}

M.LEVELS = { quiet = 0, error = 1, warn = 2, info = 3, verbose = 4, debug = 5 }

local LABEL = { error = "error: ", warn = "warning: ", debug = "debug: " }
local FILE_LABEL = { error = "ERROR", warn = "WARN ", info = "INFO ", verbose = "VERB ", debug = "DEBUG" }
local LEVEL_COLOR = { error = "31", warn = "33", debug = "2" }
-- red and yellow stay reserved for errors and warnings, so hosts never borrow them
local HOST_COLORS = { "36", "32", "35", "34", "96", "92", "95", "94" }

local function paint(on, code, s)
  if not on or not code or s == "" then return s end
  return "\27[" .. code .. "m" .. s .. "\27[0m"
end

-- Replaces every registered secret in s; longest first, so a secret containing another
-- shorter one is not left half-masked. Masking by substring is a safety net, not the rule:
-- values of secret fields are kept out of messages by field (the loader never quotes them,
-- commands never format them). A short secret is not masked by substring at all: "1" or "admin" masked
-- wherever it occurs would blank unrelated text ("3 hosts, ****** failed") and so show
-- everyone what the secret is.
M.MIN_MASKED = 8

local function redact(shared, s)
  for _, secret in ipairs(shared.secrets) do
    local out, pos = {}, 1
    while true do
      local a, b = s:find(secret, pos, true)
      if not a then break end
      out[#out + 1] = s:sub(pos, a - 1)
      out[#out + 1] = "******"
      pos = b + 1
    end
    if pos > 1 then
      out[#out + 1] = s:sub(pos)
      s = table.concat(out)
    end
  end
  return s
end

-- To the millisecond: what a run spends between two lines of one host is often less than a second.
local function timestamp(now)
  local t = now()
  local s = math.floor(t)
  return string.format("%s.%03d%s", os.date("%Y-%m-%dT%H:%M:%S", s), math.floor((t - s) * 1000), os.date("%z", s))
end

local Logger = {}
Logger.__index = Logger

local function emit(self, level, fmt, ...)
  local shared = self.shared
  local console = M.LEVELS[level] <= shared.level
  if not console and not shared.file then return end
  local msg = select("#", ...) > 0 and string.format(fmt, ...) or tostring(fmt)
  msg = redact(shared, msg)
  local column = ""
  if self.host then
    column = lines.prefix(redact(shared, self.host), shared.width)
  end
  if console and shared.format == "json" then
    -- one object per message, for log shippers: a multi-line message stays one record
    shared.stream:write(require("cargoship.json").encode({ time = timestamp(shared.now), level = level,
      host = self.host and redact(shared, self.host) or nil, msg = msg }), "\n")
    console = false
  end
  for line in (msg .. "\n"):gmatch("(.-)\n") do
    if console then
      local text = paint(shared.color, LEVEL_COLOR[level], (LABEL[level] or "") .. line)
      shared.stream:write(paint(shared.color, self.color, column), text, "\n")
    end
    if shared.file then
      shared.file:write(timestamp(shared.now), " ", FILE_LABEL[level], " ", column, line, "\n")
    end
  end
end

function Logger:error(fmt, ...) emit(self, "error", fmt, ...) end
function Logger:warn(fmt, ...) emit(self, "warn", fmt, ...) end
function Logger:info(fmt, ...) emit(self, "info", fmt, ...) end
function Logger:verbose(fmt, ...) emit(self, "verbose", fmt, ...) end
function Logger:debug(fmt, ...) emit(self, "debug", fmt, ...) end

-- True when a message at `level` would reach the console (to skip costly formatting).
function Logger:enabled(level)
  return M.LEVELS[level] <= self.shared.level
end

-- A child logger for one host. Create every host's child before logging: the column is as
-- wide as the longest name registered, and it only stays put if it does not grow mid-run.
function Logger:for_host(name)
  local shared = self.shared
  name = tostring(name)
  local color = shared.host_colors[name]
  if not color then
    shared.host_count = shared.host_count + 1
    color = HOST_COLORS[(shared.host_count - 1) % #HOST_COLORS + 1]
    shared.host_colors[name] = color
  end
  shared.width = math.max(shared.width, #name)
  return setmetatable({ shared = shared, host = name, color = color }, Logger)
end

-- Registers a string that must never be printed or written to the log file. Only secrets of
-- at least M.MIN_MASKED bytes are masked by substring (see redact); shorter ones must be
-- kept out by field.
function Logger:redact(secret)
  if type(secret) ~= "string" or #secret < M.MIN_MASKED then return end
  local secrets = self.shared.secrets
  for _, s in ipairs(secrets) do
    if s == secret then return end
  end
  secrets[#secrets + 1] = secret
  table.sort(secrets, function(a, b) return #a > #b end)
end

-- Wraps a writer (anything with :write) so that what commands print is masked as well.
function Logger:writer(stream)
  local shared = self.shared
  return {
    write = function(w, ...)
      local parts = table.pack(...)
      for i = 1, parts.n do parts[i] = tostring(parts[i]) end
      -- a failed write (EPIPE: the reader went away) is the caller's to see
      local ok, err = stream:write(redact(shared, table.concat(parts, "", 1, parts.n)))
      if not ok then return nil, err end
      return w
    end,
    flush = function(w)
      if stream.flush then
        local ok, err = stream:flush()
        if not ok then return nil, err end
      end
      return w
    end,
  }
end

-- The log file's path, or nil when this logger writes no file.
function Logger:file_path()
  return self.shared.path
end

function Logger:close()
  local shared = self.shared
  if shared.file then
    shared.file:close()
    shared.file = nil
  end
end

-- Opens path for appending, creating its directory (0700) and the file (0600) first. The
-- shell's umask is the only way plain Lua has to create a file that is never, even for an
-- instant, readable by others; the path reaches the shell through util.quote only.
-- `private_dir` also tightens an existing directory (ours, under the cache directory).
function M.open_file(path, private_dir)
  local quote = require("cargoship.util").quote
  local dir = path:match("^(.*)/[^/]*$")
  local script = "umask 077"
  if dir and dir ~= "" then
    script = script .. " && mkdir -p -- " .. quote(dir)
    if private_dir then script = script .. " && chmod 700 -- " .. quote(dir) end
  end
  script = script .. " && : >> " .. quote(path)
  local sh = io.popen("{ " .. script .. "; } 2>&1")
  local said = sh and sh:read("a") or ""
  if not sh or not sh:close() then
    return nil, "cannot create the log file " .. path .. ": " .. (said:match("[^\n]+") or "the shell failed")
  end
  local f, err = io.open(path, "a")
  if not f then return nil, "cannot open the log file " .. err end
  f:setvbuf("line")  -- a run killed mid-way still leaves every line it logged
  return f
end

-- $XDG_CACHE_HOME/cargoship/<YYYYmmdd-HHMMSS>-<pid>.log, falling back to ~/.cache.
-- env is a function(name) -> value; now a clock returning epoch seconds.
function M.default_file(env, now, pid)
  local base = env("XDG_CACHE_HOME")
  -- the XDG spec says relative values are to be ignored
  if not base or base:sub(1, 1) ~= "/" then
    local home = env("HOME")
    if not home or home == "" then return nil, "neither XDG_CACHE_HOME nor HOME is set" end
    base = home .. "/.cache"
  end
  pid = pid or require("cargoship.util").getpid()
  return string.format("%s/cargoship/%s-%d.log", base, os.date("%Y%m%d-%H%M%S", math.floor(now())), pid)
end

-- Whether to colour a stream: a terminal, no NO_COLOR (https://no-color.org: set and not
-- empty), no --no-color, and not a dumb terminal.
function M.want_color(o)
  local env = o.env or os.getenv
  if o.no_color or not o.isatty then return false end
  local no_color = env("NO_COLOR")
  if no_color and no_color ~= "" then return false end
  return env("TERM") ~= "dumb"
end

-- log.new{level=, color=, stream=, file=, now=, format = "text"|"json"} -> logger | nil, err
-- (the file failed). format "json" writes each console message as one JSON object a line.
function M.new(o)
  o = o or {}
  local level = o.level or "info"
  assert(M.LEVELS[level], "unknown log level " .. tostring(level))
  local shared = {
    level = M.LEVELS[level],
    color = o.color and o.format ~= "json" and true or false,
    format = o.format or "text",
    stream = o.stream or io.stderr,
    now = o.now or os.time,
    secrets = {},
    host_colors = {},
    host_count = 0,
    width = 0,
  }
  if o.file then
    local f, err = M.open_file(o.file, o.private_dir)
    if not f then return nil, err end
    shared.file, shared.path = f, o.file
  end
  return setmetatable({ shared = shared }, Logger)
end

return M
