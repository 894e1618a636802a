-- cargoship.lines: turns a stream of output chunks into whole prefixed lines, so hosts never interleave mid-line.
local M = {}

-- M.writer(out, prefix) -> { feed = function(chunk), flush = function() }
-- out: anything with :write(...). A last line without "\n" is written by flush().
function M.writer(out, prefix)
  local pending = ""
  local w = {}
  function w.feed(chunk)
    pending = pending .. chunk
    local last = 1
    for line, stop in pending:gmatch("([^\n]*)\n()") do
      out:write(prefix, line, "\n")
      last = stop
    end
    pending = pending:sub(last)
  end
  function w.flush()
    if pending ~= "" then out:write(prefix, pending, "\n") end
    pending = ""
  end
  return w
end

return M
