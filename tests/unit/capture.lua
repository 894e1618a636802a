-- tests/unit/capture.lua: a writer that keeps what is written (stdout/stderr/log streams in specs).
return function()
  local buf = {}
  return {
    write = function(self, ...)
      for _, s in ipairs({ ... }) do buf[#buf + 1] = tostring(s) end
      return self
    end,
    text = function() return table.concat(buf) end,
  }
end
