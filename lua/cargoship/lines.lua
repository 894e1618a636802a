-- cargoship.lines: turns a stream of output chunks into whole prefixed lines, so hosts never interleave mid-line.
local M = {}

-- s padded with spaces to `width` bytes. string.format refuses a width over 99 ("%-100s" is
-- "invalid conversion"), and widths here come from host names, which may be 253 long.
function M.pad(s, width)
  s = tostring(s)
  if #s >= width then return s end
  return s .. (" "):rep(width - #s)
end

-- The column that starts each line of a host's output: its name padded to width, then " | ".
function M.prefix(name, width)
  return M.pad(name, width) .. " | "
end

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
