-- tests/unit/files.lua: the local helpers the specs share (read, write, run a shell command); integration.lab too.
local M = {}

-- M.read(path) -> the file's bytes | nil when it cannot be opened
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- M.write(path, text) -> path: the whole file, replaced
function M.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

-- M.sh(cmd) -> its stdout and stderr together, and its exit status: a command of this machine
function M.sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

return M
