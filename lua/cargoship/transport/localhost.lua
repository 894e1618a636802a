-- cargoship.transport.localhost: the session kind of `localhost: true` hosts: commands run here through proc.
--
-- exec runs `sh -c <cmd>` from the operator's home directory, a child on the loop (its pipes
-- polled, its exit reaped); the command protocol above adds sudo when we are not root, the
-- environment tag and the ending of cancelled commands, as on any host. put and get copy
-- files with the same whole-or-nothing rules.
local subprocess = require "cargoship.subprocess"
local util = require "cargoship.util"

local M = {}

local Session = {}
Session.__index = Session

local function home(self)
  return self.env("HOME") or "/"
end

function Session:exec(cmd, opts)
  opts = opts or {}
  if self.closed then return nil, self.name .. ": exec: session closed", "closed" end
  local out, err, status, signal = subprocess.run({ "sh", "-c", cmd }, {
    stdin = opts.stdin, timeout = opts.timeout ~= 0 and opts.timeout or nil, cwd = home(self),
    on_stdout = opts.on_stdout, on_stderr = opts.on_stderr,
  })
  if not out then
    if status == "timeout" then
      return nil, string.format("%s: exec: timed out after %s s", self.name, opts.timeout), "timeout"
    end
    return nil, self.name .. ": exec: " .. tostring(err), status
  end
  return out, err, status, signal
end

-- The copy, created with mode (or truncated), fsync'd unless asked not to.
M.PUT = [[
umask 077
cat -- "$1" >"$2" && chmod "$3" -- "$2" || exit 1
[ "$4" = 0 ] || sync -- "$2" 2>/dev/null || sync
]]

function Session:put(local_path, remote, opts)
  opts = opts or {}
  if self.closed then return nil, self.name .. ": put: session closed", "closed" end
  local _, err, status = subprocess.run({ "sh", "-c", M.PUT, "sh", local_path, remote,
    string.format("%o", opts.mode or 384), opts.fsync == false and "0" or "1" },
    { timeout = opts.timeout ~= 0 and opts.timeout or nil, cwd = home(self) })
  if status ~= 0 then
    return nil, string.format("%s: put %s: %s", self.name, remote, tostring(err):gsub("%s+$", "")), "io"
  end
  local f = io.open(local_path, "rb")
  if not f then return nil, self.name .. ": put: " .. local_path .. " vanished", "io" end
  local n = f:seek("end")
  f:close()
  return n
end

function Session:get(remote, local_path, opts)
  opts = opts or {}
  local tmp = local_path .. ".cs-" .. util.getpid() .. ".tmp"
  local _, err, status = subprocess.run({ "sh", "-c", 'cat -- "$1" >"$2"', "sh", remote, tmp },
    { timeout = opts.timeout ~= 0 and opts.timeout or nil, cwd = home(self) })
  if status ~= 0 then
    os.remove(tmp)
    return nil, string.format("%s: get %s: %s", self.name, remote, tostring(err):gsub("%s+$", "")), "io"
  end
  local ok, rerr = os.rename(tmp, local_path)
  if not ok then os.remove(tmp) return nil, "localhost: " .. tostring(rerr), "io" end
  local f = io.open(local_path, "rb")
  local n = f and f:seek("end") or 0
  if f then f:close() end
  return n
end

function Session:state() return self.closed and "closed" or "ready" end
function Session:close() self.closed = true end
function Session:info() return { kind = "localhost", state = self:state() } end

local Kind = {}
Kind.__index = Kind

function M.new(opts)
  opts = opts or {}
  return setmetatable({ env = opts.env or os.getenv }, Kind)
end

-- The user we run as ("root" when uid 0: then no sudo), found once.
function Kind:user()
  if not self.login then
    local status = io.open("/proc/self/status", "rb")
    local text = status and status:read("a") or ""
    if status then status:close() end
    local euid = text:match("\nUid:%s*%d+%s+(%d+)")
    if euid == "0" then
      self.login = "root"
    else
      local out, _, code = subprocess.run({ "id", "-un" }, { timeout = 10 })
      self.login = (code == 0 and out:match("^(%S+)")) or self.env("USER") or ("uid" .. tostring(euid))
    end
  end
  return self.login
end

function Kind:open(_c, name)
  return setmetatable({ name = name or "localhost", env = self.env, user = self:user() }, Session)
end

function Kind.close_all() end

return M
