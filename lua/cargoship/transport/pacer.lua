-- cargoship.transport.pacer: paces new SSH handshakes per endpoint and overall; retries those sshd drops under load.
--
-- sshd counts the connections that have not authenticated yet and, past MaxStartups (10 by
-- default; "10:30:100" drops 30 % of new ones beyond 10, all beyond 100), closes new ones
-- before its banner. A run opening hundreds of sessions at once would meet that on any host
-- or bastion that many of them go through, so every session kind opens its sessions here:
--   - at most `per_endpoint` handshakes (default 10, --max-startups) at once to one endpoint:
--     a host's address (every port of it: one sshd may listen on several), or the
--     bastion/jump host a host is reached through (it sees every handshake it relays); an
--     endpoint that drops a handshake gets fewer at once for a while (halved, then +1 per
--     success);
--   - at most `total` at once overall (default 16: each costs the client a key exchange);
--   - a slot is held from the TCP connect until the session is authenticated (or failed);
--   - a handshake the server dropped (closed or reset before or during the key exchange),
--     or a connection refused, is tried again after a jittered exponential backoff, within
--     `attempts` tries; other failures (auth, host key, timeout) are final at once.
-- A host whose sshd allows fewer startups than we pace for (MaxStartups 3) or that other
-- clients crowd therefore still gets its session, later, instead of failing.
local loop = require "cargoship.loop"

local M = {}

M.MAX_STARTUPS = 10    -- sshd's default MaxStartups: handshakes at once per endpoint
M.MAX_HANDSHAKES = 16  -- handshakes at once, all endpoints together
M.ATTEMPTS = 8         -- tries of one session, the first included
M.BACKOFF = 0.1        -- seconds before the 2nd try; doubled each time, jittered x0.5-1.5
M.BACKOFF_MAX = 3      -- a single wait never exceeds this (before jitter)
M.REFUSED_ATTEMPTS = 3 -- a refused connection is a down sshd more often than a busy one

-- M.retryable(code, msg) -> true when a failed open is the server shedding load (try again),
-- "refused" for a refused TCP connection (tried fewer times), false otherwise.
function M.retryable(code, msg)
  if code == "closed" then return true end
  if code == "refused" then
    -- a name that does not resolve is refused too, and final
    return not (msg and msg:find("resolve", 1, true)) and "refused"
  end
  if code == "io" and msg then
    local m = msg:lower()
    return (m:find("reset by peer", 1, true) or m:find("connection reset", 1, true)
      or m:find("kex_exchange_identification", 1, true) or m:find("banner exchange", 1, true)) ~= nil
  end
  return false
end

-- M.delay(attempt, base, max, random) -> seconds to wait after failed try number `attempt`.
function M.delay(attempt, base, max, random)
  local d = math.min((base or M.BACKOFF) * 2 ^ (attempt - 1), max or M.BACKOFF_MAX)
  return d * (0.5 + (random or math.random)())
end

local Pacer = {}
Pacer.__index = Pacer

-- M.new{per_endpoint = 10, total = 16, attempts = 8, backoff = 0.1, backoff_max = 3,
--       sleep = loop.sleep, random = math.random, log = function(line)} -> pacer
function M.new(o)
  o = o or {}
  local per = o.per_endpoint or M.MAX_STARTUPS
  local total = o.total or M.MAX_HANDSHAKES
  if math.type(per) ~= "integer" or per < 1 then error("pacer: per_endpoint must be a positive integer", 2) end
  if math.type(total) ~= "integer" or total < 1 then error("pacer: total must be a positive integer", 2) end
  return setmetatable({
    per_endpoint = per, total = total,
    attempts = o.attempts or M.ATTEMPTS, backoff = o.backoff or M.BACKOFF, backoff_max = o.backoff_max or M.BACKOFF_MAX,
    sleep = o.sleep or loop.sleep, random = o.random or math.random, log = o.log or function() end,
    all = loop.semaphore(total), endpoints = {},
    -- what happened, for reports and specs: handshakes now and at most, per endpoint and overall
    most = {}, in_flight = 0, most_in_flight = 0, retries = 0, opened = 0,
  }, Pacer)
end

-- An endpoint's gate: at most `limit` handshakes at once, the others waiting in FIFO order.
-- limit starts at per_endpoint; a dropped handshake halves it (that sshd allows fewer
-- startups than we thought, or others crowd it), each success raises it by one again, up to
-- per_endpoint: a host with MaxStartups 3 soon sees about 3 of ours at once, not 10.
local function endpoint(self, key)
  local e = self.endpoints[key]
  if not e then
    e = { limit = self.per_endpoint, active = 0, queue = {} }
    self.endpoints[key] = e
  end
  return e
end

local function wake(e)
  while e.active < e.limit and #e.queue > 0 do
    local w = table.remove(e.queue, 1)
    e.active = e.active + 1   -- the slot is handed over, counted for the waiter
    w:release()
  end
end

local function leave(e)
  e.active = e.active - 1
  wake(e)
end

local function enter(e)
  if e.active < e.limit and #e.queue == 0 then
    e.active = e.active + 1
    return
  end
  local w = loop.semaphore(0)
  e.queue[#e.queue + 1] = w
  local ok, err = pcall(w.acquire, w)
  if ok then return end
  -- cancelled while waiting: out of the queue, or, when the slot was already handed over, give it on
  for i, x in ipairs(e.queue) do
    if x == w then
      table.remove(e.queue, i)
      error(err, 0)
    end
  end
  leave(e)
  error(err, 0)
end

-- One try inside both slots; the slots are given back however fn ends (an error, a cancel),
-- or earlier when fn calls release (its handshake is done but its work goes on).
local function attempt(self, key, fn, n)
  local e = endpoint(self, key)
  enter(e)
  local ok, err = pcall(self.all.acquire, self.all)
  if not ok then leave(e) error(err, 0) end
  self.most[key] = math.max(self.most[key] or 0, e.active)
  self.in_flight = self.in_flight + 1
  self.most_in_flight = math.max(self.most_in_flight, self.in_flight)
  local held = true
  local function release()
    if not held then return end
    held = false
    self.in_flight = self.in_flight - 1
    self.all:release()
    leave(e)
  end
  local r = table.pack(pcall(fn, n, release))
  release()
  if not r[1] then error(r[2], 0) end
  return table.pack(table.unpack(r, 2, r.n)), e
end

-- pacer:open(key, fn [, retryable]) -> what fn returned
-- fn(try, release) opens one session to endpoint key (try = 1, 2, ...) and returns it, or
-- nil, msg, code (it cleans up its own half-open state). fn may call release() once its
-- handshake is over, to give the slots back while it goes on (a command on a connection of
-- its own). Failures retryable(code, msg) accepts (default M.retryable) are tried again
-- after a backoff, outside the slots; the last failure is returned with the tries named.
function Pacer:open(key, fn, retryable)
  retryable = retryable or M.retryable
  local n, limit = 0, self.attempts
  while true do
    n = n + 1
    local r, e = attempt(self, key, fn, n)
    if r[1] then
      self.opened = self.opened + 1
      if e.limit < self.per_endpoint then
        e.limit = e.limit + 1
        wake(e)
      end
      return table.unpack(r, 1, r.n)
    end
    local again = retryable(r[3], r[2])
    if again then e.limit = math.max(1, e.limit // 2) end
    if again == "refused" then limit = math.min(limit, M.REFUSED_ATTEMPTS) end
    if not again or n >= limit then
      if n > 1 then r[2] = tostring(r[2]) .. string.format(" (after %d tries)", n) end
      return table.unpack(r, 1, r.n)
    end
    self.retries = self.retries + 1
    local d = M.delay(n, self.backoff, self.backoff_max, self.random)
    self.log(string.format("%s: handshake dropped (%s), try %d of %d in %.2f s", key, tostring(r[2]), n + 1, limit, d))
    self.sleep(d)
  end
end

-- What the pacer saw: {opened, retries, most_in_flight, most = {[key] = n}}.
function Pacer:stats()
  local most = {}
  for k, v in pairs(self.most) do most[k] = v end
  return { opened = self.opened, retries = self.retries, most_in_flight = self.most_in_flight, most = most }
end

return M
