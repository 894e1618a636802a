-- cargoship.pipeline.progress: one line per phase on stderr, live on a terminal, plain otherwise.
--
-- On a terminal the line of the running phase is redrawn in place ("[3/9] Gather host facts
-- ... 12/50 hosts") and replaced by its verdict when the phase ends. Elsewhere one plain
-- line per finished phase ("phase 3/9 Gather host facts: ran (50 hosts, 0.42 s)"), so a CI
-- log reads top to bottom. Progress never goes to stdout: that is the report's.
local M = {}

local CLEAR = "\r\27[K"
local REDRAW_EVERY = 0.05 -- seconds: 5,000 hosts finishing must not mean 5,000 redraws

local Progress = {}
Progress.__index = Progress

-- While a live line is on screen, the logger's lines must not land after it: this wraps the
-- logger's console stream to clear the line first and draw it again after a full line.
local function wrap_logger(self, logger)
  local shared = type(logger) == "table" and rawget(logger, "shared")
  if type(shared) ~= "table" or not shared.stream then return end
  local inner = shared.stream
  self.restore = function() shared.stream = inner end
  shared.stream = {
    write = function(w, ...)
      local shown = self.shown
      if shown then
        inner:write(CLEAR)
        self.shown = false
      end
      inner:write(...)
      local last = select(select("#", ...), ...)
      if shown and type(last) == "string" and last:sub(-1) == "\n" then self:draw() end
      return w
    end,
    flush = function(w)
      if inner.flush then inner:flush() end
      return w
    end,
  }
end

-- M.new{stream = writer, tty = bool, enabled = bool, logger = logger, now = clock}
-- enabled = false (--quiet) makes every method a no-op.
function M.new(o)
  local self = setmetatable({
    stream = o.stream,
    tty = o.tty and true or false,
    enabled = o.enabled ~= false and o.stream ~= nil,
    now = o.now or os.clock,
    shown = false,
    text = nil,
    last_draw = -math.huge,
  }, Progress)
  if self.enabled and self.tty then wrap_logger(self, o.logger) end
  return self
end

function Progress:draw()
  if not self.text then return end
  self.stream:write(CLEAR, self.text)
  if self.stream.flush then self.stream:flush() end
  self.shown = true
  self.last_draw = self.now()
end

-- A phase starts: index of total, its title.
function Progress:start(index, total, title)
  if not self.enabled then return end
  self.prefix = string.format("[%d/%d] %s", index, total, title)
  if self.tty then
    self.text = self.prefix .. " ..."
    self:draw()
  end
end

-- done of n hosts have finished the current step of the phase; detail (bytes sent, say)
-- stays on the line until the phase gives another or ends.
function Progress:hosts(done, n, detail)
  if not self.enabled or not self.tty or not self.prefix then return end
  if detail then self.detail = detail end
  self.text = string.format("%s ... %d/%d hosts%s", self.prefix, done, n, self.detail and (", " .. self.detail) or "")
  if done == n or self.now() - self.last_draw >= REDRAW_EVERY then self:draw() end
end

-- A phase ends with `summary` ("ran (50 hosts, 0.42 s)").
function Progress:finish(index, total, title, summary)
  if not self.enabled then return end
  if self.tty then
    self.stream:write(CLEAR, string.format("[%d/%d] %s: %s\n", index, total, title, summary))
    self.shown, self.text, self.prefix, self.detail = false, nil, nil, nil
  else
    self.stream:write(string.format("phase %d/%d %s: %s\n", index, total, title, summary))
  end
  if self.stream.flush then self.stream:flush() end
end

-- Takes the live line off the screen and gives the logger its stream back.
function Progress:close()
  if self.shown then self.stream:write(CLEAR) end
  self.shown, self.text, self.prefix = false, nil, nil
  if self.restore then
    self.restore()
    self.restore = nil
  end
end

return M
