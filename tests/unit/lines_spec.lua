-- Specs of cargoship.lines: chunks in, whole prefixed lines out.
local lines = require "cargoship.lines"

local function sink()
  local s = { text = "" }
  function s.write(self, ...) for _, v in ipairs { ... } do self.text = self.text .. v end end
  return s
end

describe("lines.writer", function()
  it("writes only whole lines, whatever the chunking", function()
    local out = sink()
    local w = lines.writer(out, "h1 | ")
    w.feed("ab")
    assert.are.equal("", out.text)
    w.feed("c\nde")
    assert.are.equal("h1 | abc\n", out.text)
    w.feed("f\n\ng")
    assert.are.equal("h1 | abc\nh1 | def\nh1 | \n", out.text)
    w.flush()
    assert.are.equal("h1 | abc\nh1 | def\nh1 | \nh1 | g\n", out.text)
  end)

  it("writes nothing on flush when the stream ended with a newline", function()
    local out = sink()
    local w = lines.writer(out, "> ")
    w.feed("x\n")
    w.flush()
    assert.are.equal("> x\n", out.text)
  end)
end)

describe("lines.pad and lines.prefix", function()
  it("pad to any width, beyond the 99 string.format allows", function()
    assert.are.equal("ab   ", lines.pad("ab", 5))
    assert.are.equal("abcdef", lines.pad("abcdef", 3))
    local long = ("x"):rep(150)
    assert.are.equal(long .. " | ", lines.prefix(long, 120))
    assert.are.equal("h1" .. (" "):rep(148) .. " | ", lines.prefix("h1", 150))
  end)
end)
