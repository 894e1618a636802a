-- Specs of the localhost session kind (`localhost: true` hosts): commands and files on this machine.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local transport = require "cargoship.transport"

local function run(fn)
  local ok, a, b, c, d = loop.run(fn)
  assert(ok, a)
  return a, b, c, d
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("localhost session kind", function()
  local dir, env
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. util.quote(dir .. "/home")))
    env = function(k) if k == "HOME" then return dir .. "/home" end return os.getenv(k) end
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  it("runs commands from $HOME with stdin, streams, exit status and the command's tag", function()
    local r, chunks = {}, {}
    run(function()
      local t = transport.new { env = env }
      local c = assert(t:connect({ kind = "localhost" }, "here"))
      r.user = c.user
      r[1] = table.pack(c:exec("pwd; cat; echo err >&2; exit 4", { stdin = "in\n" }))
      r[2] = table.pack(c:exec("echo $CARGOSHIP_CMD", { on_stdout = function(d) chunks[#chunks + 1] = d end }))
      r[3] = table.pack(c:exec("sleep 5", { timeout = 0.3 }))
      t:close_all()
    end)
    local root = read("/proc/self/status"):match("\nUid:%s*%d+%s+(%d+)") == "0"
    if root then assert.are.equal("root", r.user) end
    assert.are.same({ dir .. "/home\nin\n", "err\n", 4 }, { r[1][1], r[1][2], r[1][3] })
    assert.matches("^%d+%-%d+%.1%.%d+\n$", table.concat(chunks))
    assert.is_nil(r[3][1])
    assert.are.equal("timeout", r[3][3])
    assert.matches("here: exec: timed out after 0.3 s; its processes on the host were ended", r[3][2], 1, true)
  end)

  it("uploads through a temporary name, skips an identical file, downloads whole", function()
    local src = dir .. "/src"
    local f = assert(io.open(src, "wb"))
    f:write("content\n")
    f:close()
    local r = {}
    run(function()
      local t = transport.new { env = env }
      local c = assert(t:connect({ kind = "localhost" }, "here"))
      r[1] = assert(c:upload(src, dir .. "/dst file", { mode = "0640" }))
      r[2] = assert(c:upload(src, dir .. "/dst file", { mode = "0640" }))
      r[3] = c:download(dir .. "/dst file", dir .. "/back")
      r[4] = table.pack(c.session:get(dir .. "/missing", dir .. "/nothing"))
      t:close_all()
    end)
    assert.is_false(r[1].skipped)
    assert.is_true(r[2].skipped)
    assert.are.equal("content\n", read(dir .. "/dst file"))
    assert.are.equal(8, r[3])
    assert.are.equal("content\n", read(dir .. "/back"))
    assert.is_nil(r[4][1])
    assert.is_nil(read(dir .. "/nothing"))
    local p = io.popen("stat -c %a " .. util.quote(dir .. "/dst file"))
    assert.are.equal("640\n", p:read("a"))
    p:close()
  end)

  -- apply --confirm: the real run takes the plan's sessions instead of logging in again
  it("hands sessions kept after a pass to the next pass's hosts by name, once, counting afresh", function()
    run(function()
      local t = transport.new { env = env }
      local c1 = assert(t:connect({ kind = "localhost" }, "h1"))
      local c2 = assert(t:connect({ kind = "localhost" }, "h2"))
      assert(c1:exec("true"))
      assert.are.equal(1, c1.round_trips)
      c2:close()
      t:keep()
      local again = assert(t:connect({ kind = "localhost" }, "h1"))
      assert.are.equal(c1, again)
      assert.are.equal(0, again.round_trips, "the next pass counts its own round trips")
      assert.are_not.equal(c1, assert(t:connect({ kind = "localhost" }, "h1")), "a kept session is taken once")
      assert.are_not.equal(c2, assert(t:connect({ kind = "localhost" }, "h2")), "a closed one is not handed over")
      t:close_all()
      assert.are.equal("closed", c1.session:state())
    end)
  end)
end)
