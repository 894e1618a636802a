-- Specs of cargoship.pipeline.progress: a live line on a terminal, plain lines elsewhere, logs kept apart.
local log = require "cargoship.log"
local progress = require "cargoship.pipeline.progress"
local S = require "unit.pipeline.support"

describe("progress", function()
  it("prints one plain line per finished phase when not on a terminal", function()
    local out = S.capture()
    local p = progress.new { stream = out, tty = false }
    p:start(3, 9, "Gather host facts")
    p:hosts(12, 50)
    p:finish(3, 9, "Gather host facts", "ran (50 hosts, 0.42 s)")
    p:close()
    assert.are.equal("phase 3/9 Gather host facts: ran (50 hosts, 0.42 s)\n", out.text())
  end)

  it("keeps one live line on a terminal and replaces it with the verdict", function()
    local out = S.capture()
    local p = progress.new { stream = out, tty = true, now = function() return 0 end }
    p:start(3, 9, "Gather host facts")
    p:hosts(50, 50)
    p:finish(3, 9, "Gather host facts", "ran (50 hosts, 0.42 s)")
    p:close()
    assert.are.equal("\r\27[K[3/9] Gather host facts ..."
      .. "\r\27[K[3/9] Gather host facts ... 50/50 hosts"
      .. "\r\27[K[3/9] Gather host facts: ran (50 hosts, 0.42 s)\n", out.text())
  end)

  it("clears the live line for a log line and draws it again after", function()
    local term = S.capture()
    local logger = log.new { level = "info", stream = term }
    local p = progress.new { stream = term, tty = true, logger = logger, now = function() return 0 end }
    p:start(1, 2, "Connect to hosts")
    logger:for_host("h1"):info("connected")
    p:close()
    assert.are.equal("\r\27[K[1/2] Connect to hosts ..."
      .. "\r\27[Kh1 | connected\n"
      .. "\r\27[K[1/2] Connect to hosts ..."
      .. "\r\27[K", term.text())
    -- closed: the logger writes straight to its stream again
    logger:info("after")
    assert.matches("\r\27%[Kafter\n$", term.text())
  end)

  it("says nothing when disabled (--quiet)", function()
    local out = S.capture()
    local p = progress.new { stream = out, tty = true, enabled = false }
    p:start(1, 1, "X")
    p:finish(1, 1, "X", "ran")
    p:close()
    assert.are.equal("", out.text())
  end)
end)
