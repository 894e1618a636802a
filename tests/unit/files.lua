-- tests/unit/files.lua: the local-file helpers the specs share (read a whole file, write one); integration.lab too.
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

return M
