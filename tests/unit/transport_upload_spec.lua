-- Specs of the upload path's costs: the local hash taken once per file, the host's hash helper, one fsync per upload.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local transport = require "cargoship.transport"

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function sh(script)
  local p = assert(io.popen("sh -c " .. util.quote(script) .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

-- A session that records put's arguments and every wire; every command exits 0, after
-- `delay` seconds (a link's round trip)
local function fake_session(delay)
  local s = { wires = {}, puts = {} }
  function s.exec(_, wire)
    if delay then loop.sleep(delay) end
    s.wires[#s.wires + 1] = wire
    return "", "\30cs-exit:0\n", 0
  end
  function s.put(_, local_path, remote, opts)
    s.puts[#s.puts + 1] = { local_path = local_path, remote = remote, opts = opts }
    return 42
  end
  function s.state() return "ready" end
  return s
end

local function connection(session, root)
  local c = transport.connection(session, { name = "h1", user = root and "root" or "tb", run_id = "r1", seq = 1 })
  c.sudo_ok = true
  return c
end

describe("the upload path", function()
  local dir
  before_each(function() dir = os.tmpname(); os.remove(dir); assert(os.execute("mkdir -p " .. dir)) end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("hashes a local file once per identity, and again once it changed", function()
    local f = dir .. "/blob"
    write(f, "first content")
    local sum, size = util.sha256_file(f)
    assert.are.equal(util.sha256("first content"), sum)
    assert.are.equal(13, size)
    assert.are.equal(sum, (util.sha256_file(f)))
    write(f, "second, longer content")
    assert.are.equal(util.sha256("second, longer content"), (util.sha256_file(f)))
    local none, err, code = util.sha256_file(dir .. "/missing")
    assert.is_nil(none)
    assert.are.equal("io", code)
    assert.matches("missing", err, 1, true)
  end)

  it("hashes on the host with openssl, else python3, else sha256sum, the same digest each way", function()
    local f = dir .. "/blob"
    write(f, string.rep("cargoship ", 100000))
    local want = util.sha256(string.rep("cargoship ", 100000))
    local call = transport.HOST_SHA256 .. "\ncs_sha256 " .. util.quote(f) .. " | cut -d' ' -f1"
    assert.are.equal(want .. "\n", sh(call))
    assert.are.equal(want .. "\n", sh("openssl() { return 127; }\n" .. call))
    assert.are.equal(want .. "\n", sh("openssl() { return 127; }\npython3() { return 127; }\n" .. call))
  end)

  it("trusts the plan's sha256 instead of hashing per host, checks it on the host and fsyncs once", function()
    local s = fake_session()
    local r
    loop.run(function()
      r = assert(connection(s, true):upload(dir .. "/not-read", "/opt/x/blob", { sha256 = string.rep("a", 64) }))
    end)
    assert.are.equal(42, r.bytes)
    assert.is_false(r.skipped)
    assert.are.equal(1, #s.puts)
    assert.is_false(s.puts[1].opts.fsync, "not over SFTP: a round trip of its own")
    assert.are.equal("/opt/x/.blob.cargoship-r1.tmp", s.puts[1].remote)
    local script = s.wires[#s.wires]
    assert.matches("cs_sha256", script, 1, true)
    assert.matches(string.rep("a", 64), script, 1, true)
    assert.matches("mv -f", script, 1, true)
    local _, syncs = script:gsub("sync %-%-", "")
    assert.are.equal(1, syncs, "the finishing script syncs the temp file, once")
    assert.is_true(script:find("sync -- \"$tmp\"", 1, true) < script:find("cs_sha256 \"$tmp\"", 1, true),
      "synced before it is checked and renamed")
  end)

  -- round trips: an upload is the check of the target, the put and the finishing script;
  -- one whose phase already read the target (opts.assessed) skips the check: two
  it("sends an upload its phase assessed in two round trips (put, finish), skipping the target's re-check",
    function()
    local s = fake_session()
    local c = connection(s, true)
    loop.run(function()
      assert(c:upload(dir .. "/not-read", "/opt/x/blob", { sha256 = string.rep("a", 64), assessed = true }))
    end)
    assert.are.equal(2, c.round_trips)
    assert.are.equal(1, #s.wires, "only the finishing script runs as a command")
    assert.is_nil(s.wires[1]:find("avail", 1, true), "no re-check of the target (hash, mode, free space)")
    local plain = fake_session()
    local c2 = connection(plain, true)
    loop.run(function() assert(c2:upload(dir .. "/not-read", "/opt/x/blob", { sha256 = string.rep("a", 64) })) end)
    assert.are.equal(3, c2.round_trips, "without the phase's assessment the transport checks first")
  end)

  it("keeps more in flight on a host whose commands come back slowly (a long round trip)", function()
    local f = dir .. "/blob"
    write(f, "payload")
    local offers = {}
    for _, delay in ipairs({ 0, 0.03, 0.2 }) do
      local s = fake_session(delay)
      local c = connection(s, true)
      loop.run(function()
        assert(c:check("true"))   -- a command before, as phases always send
        assert(c:upload(f, "/opt/x/blob", {}))
      end)
      offers[#offers + 1] = s.puts[1].opts.offer
    end
    -- 0 ms: the 256 KiB that fills a fast link; 30 ms: ~480 KiB; 200 ms: the cap below 2 MiB
    assert.are.equal(256 * 1024, offers[1])
    assert.is_true(offers[2] > 400 * 1024 and offers[2] < 700 * 1024, tostring(offers[2]))
    assert.are.equal(1536 * 1024, offers[3])
  end)

  it("stages a non-root upload without fsync and syncs the copy beside the target", function()
    local s = fake_session()
    local f = dir .. "/blob"
    write(f, "payload")
    loop.run(function() assert(connection(s, false):upload(f, "/opt/x/blob", {})) end)
    assert.is_false(s.puts[1].opts.fsync)
    assert.matches(util.sha256("payload"), s.wires[#s.wires], 1, true)
    assert.matches('cp -- "$src" "$tmp"; rm -f -- "$src"; }\nsync -- "$tmp"', s.wires[#s.wires], 1, true)
  end)
end)
