-- Specs of cargoship.transport.pacer: handshakes at once per endpoint and overall, dropped ones retried with backoff.
local loop = require "cargoship.loop"
local pacer = require "cargoship.transport.pacer"
local openssh = require "cargoship.transport.openssh"

-- n tasks opening sessions to the endpoints keys[i] at once; fn(i, try) is one try.
local function open_all(p, keys, fn)
  local _, results = loop.run(function()
    local tasks, out = {}, {}
    for i, key in ipairs(keys) do
      tasks[i] = loop.spawn(function() return p:open(key, function(try) return fn(i, try) end) end)
    end
    for i, t in ipairs(tasks) do out[i] = table.pack(t:join()) end
    return out
  end)
  return results
end

describe("transport.pacer", function()
  it("keeps at most per_endpoint handshakes at once to one endpoint and total overall", function()
    local p = pacer.new { per_endpoint = 3, total = 5 }
    local now, most, per, most_per = 0, 0, {}, {}
    local keys = {}
    for i = 1, 40 do keys[i] = i <= 20 and "h0" or "h1" end   -- 20 sessions to each of two hosts
    local results = open_all(p, keys, function(i)
      local k = keys[i]
      now, per[k] = now + 1, (per[k] or 0) + 1
      most, most_per[k] = math.max(most, now), math.max(most_per[k] or 0, per[k])
      loop.sleep(0.002)
      now, per[k] = now - 1, per[k] - 1
      return "session " .. i
    end)
    for i = 1, 40 do assert.are.same({ true, "session " .. i, n = 2 }, results[i]) end
    assert.are.equal(3, most_per.h0)
    assert.are.equal(3, most_per.h1)
    assert.are.equal(5, most)   -- two endpoints x 3 would be 6: the total caps it
    local st = p:stats()
    assert.are.same({ opened = 40, retries = 0, most_in_flight = 5, most = { h0 = 3, h1 = 3 } }, st)
  end)

  it("defaults to sshd's MaxStartups (10) per endpoint and 16 overall", function()
    local p = pacer.new()
    assert.are.equal(10, p.per_endpoint)
    assert.are.equal(16, p.total)
    local keys = {}
    for i = 1, 30 do keys[i] = "one-host:22" end
    open_all(p, keys, function() loop.sleep(0.002) return true end)
    assert.are.equal(10, p:stats().most["one-host:22"])
  end)

  it("tries a dropped handshake again after a growing, jittered backoff, outside the slots", function()
    local waits = {}
    local p = pacer.new { per_endpoint = 1, backoff = 0.1, backoff_max = 0.3, random = function() return 0.5 end,
      sleep = function(d) waits[#waits + 1] = d end }
    local tries = 0
    local results = open_all(p, { "h:22" }, function(_, try)
      tries = tries + 1
      assert.are.equal(tries, try)
      if try < 5 then return nil, "h: handshake (server closed the connection before its banner)", "closed" end
      return "session"
    end)
    assert.are.same({ true, "session", n = 2 }, results[1])
    assert.are.same({ 0.1, 0.2, 0.3, 0.3 }, waits)   -- doubled, capped, jitter x(0.5 + 0.5)
    assert.are.equal(4, p:stats().retries)
    -- jitter spreads the waits between 0.5x and 1.5x
    assert.are.equal(0.05, pacer.delay(1, 0.1, 3, function() return 0 end))
    assert.is_true(math.abs(pacer.delay(1, 0.1, 3, function() return 1 end) - 0.15) < 1e-9)
  end)

  it("gets 50 sessions through an sshd that drops all beyond 3 unauthenticated, sending it fewer at once", function()
    local p = pacer.new { backoff = 0.005, backoff_max = 0.05 }
    local keys, now, most, dropped = {}, 0, 0, 0
    for i = 1, 50 do keys[i] = "10.0.0.5" end
    local results = open_all(p, keys, function()
      if now >= 3 then   -- MaxStartups 3: closed before the banner
        dropped = dropped + 1
        loop.sleep(0.001)
        return nil, "h: handshake (server closed the connection before its banner)", "closed"
      end
      now = now + 1
      most = math.max(most, now)
      loop.sleep(0.003)   -- key exchange and auth
      now = now - 1
      return true
    end)
    for i = 1, 50 do assert.are.same({ true, true, n = 2 }, results[i]) end
    assert.are.equal(3, most)
    assert.is_true(dropped > 0)
    local st = p:stats()
    assert.are.equal(dropped, st.retries)
    assert.is_true(st.most["10.0.0.5"] <= 10)   -- never more than MaxStartups' default at once
    -- fewer drops than a fixed 10 at once would meet: the window came down to what the host takes
    assert.is_true(dropped < 50, "dropped " .. dropped)
  end)

  it("lets another host's handshake take the slot while a dropped one waits to try again", function()
    local p = pacer.new { per_endpoint = 1, backoff = 0.02 }
    local order = {}
    open_all(p, { "h:22", "h:22" }, function(i, try)
      order[#order + 1] = i .. "." .. try
      if i == 1 and try == 1 then return nil, "reset", "closed" end
      return true
    end)
    assert.are.same({ "1.1", "2.1", "1.2" }, order)
  end)

  it("gives up after `attempts` tries and says so; final failures are not tried again", function()
    local p = pacer.new { attempts = 4, backoff = 0.001 }
    local n = { 0, 0, 0, 0 }
    local results = open_all(p, { "a:22", "b:22", "c:22", "d:22" }, function(i)
      n[i] = n[i] + 1
      if i == 1 then return nil, "a: handshake dropped", "closed" end
      if i == 2 then return nil, "b: auth: the server refused key k for user root", "auth" end
      if i == 3 then return nil, "c: connect: Connection refused", "refused" end
      return nil, "d: connect: timed out", "timeout"
    end)
    assert.are.same({ 4, 1, 3, 1 }, n)   -- refused: at most REFUSED_ATTEMPTS (3)
    assert.are.same({ true, nil, "a: handshake dropped (after 4 tries)", "closed", n = 4 }, results[1])
    assert.are.same({ true, nil, "b: auth: the server refused key k for user root", "auth", n = 4 }, results[2])
    assert.are.same({ true, nil, "c: connect: Connection refused (after 3 tries)", "refused", n = 4 }, results[3])
    assert.are.equal("timeout", results[4][4])
  end)

  it("gives the slots back when a try raises or is cancelled", function()
    local p = pacer.new { per_endpoint = 1, total = 1 }
    local ok, got = loop.run(function()
      local bad = pcall(p.open, p, "h:22", function() error("boom", 0) end)
      assert.is_false(bad)
      local t = loop.spawn(function() return p:open("h:22", function() loop.sleep(10) end) end)
      loop.sleep(0.01)
      t:cancel()
      t:join()
      return p:open("h:22", function() return "after" end)
    end)
    assert.is_true(ok)
    assert.are.equal("after", got)
  end)

  it("knows which failures are the server shedding load", function()
    assert.is_true(pacer.retryable("closed", "h: handshake (server closed the connection before its banner)"))
    assert.is_true(pacer.retryable("io", "h: connect: Connection reset by peer"))
    assert.are.equal("refused", pacer.retryable("refused", "h: connect: Connection refused"))
    assert.is_false(pacer.retryable("refused", "h: resolve: nohost: Name or service not known"))
    assert.is_false(pacer.retryable("auth", "h: auth"))
    assert.is_false(pacer.retryable("hostkey", "h: host key"))
    assert.is_false(pacer.retryable("timeout", "h: timed out"))
    assert.is_false(pacer.retryable("io", "h: handshake"))
    -- what the system's ssh says when sshd drops it
    assert.is_true(openssh.dropped("closed", "h: connect: kex_exchange_identification: read: Connection reset by peer"))
    assert.is_true(openssh.dropped("closed",
      "h: connect: kex_exchange_identification: Connection closed by remote host"))
    assert.are.equal("refused", openssh.dropped("refused", "h: connect: connect to host h port 22: Connection refused"))
    assert.is_false(openssh.dropped("closed", "h: connect: ssh: Could not resolve hostname nohost"))
    assert.is_false(openssh.dropped("auth", "h: connect: root@h: Permission denied (publickey)."))
  end)

  it("paces an openSSH host behind a jump host as the jump host", function()
    assert.are.equal("10.0.0.5", openssh.endpoint { address = "10.0.0.5" })
    assert.are.equal("10.0.0.5", openssh.endpoint { address = "10.0.0.5", port = 2222 })
    assert.are.equal("via bastion.example", openssh.endpoint { address = "10.0.0.5",
      options = { ProxyJump = "bastion.example" } })
    assert.are.equal("10.0.0.5", openssh.endpoint { address = "10.0.0.5", options = { proxyjump = "none" } })
  end)

  it("refuses a limit that is not a positive integer", function()
    assert.has_error(function() pacer.new { per_endpoint = 0 } end, "pacer: per_endpoint must be a positive integer")
    assert.has_error(function() pacer.new { total = 1.5 } end, "pacer: total must be a positive integer")
  end)
end)
