-- Specs of the logger: levels, host columns, colour rules, redaction and the log file.
local log = require "cargoship.log"
local util = require "cargoship.util"

local capture = require "unit.capture"

local function read_all(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end

local function mode_of(path)
  local p = assert(io.popen("stat -c %a " .. util.quote(path)))
  local m = p:read("l")
  p:close()
  return m
end

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. util.quote(path)))
  return path
end

local function env_of(t)
  return function(name) return t[name] end
end

local function clock() return 1700000000 end

describe("log", function()
  local dir
  before_each(function() dir = temp_dir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  it("prints at its level and above, with labels", function()
    local expect = {
      quiet = "",
      error = "error: e\n",
      warn = "error: e\nwarning: w\n",
      info = "error: e\nwarning: w\ni\n",
      verbose = "error: e\nwarning: w\ni\nv\n",
      debug = "error: e\nwarning: w\ni\nv\ndebug: d\n",
    }
    for level, text in pairs(expect) do
      local s = capture()
      local l = log.new({ level = level, stream = s })
      l:error("e"); l:warn("w"); l:info("i"); l:verbose("v"); l:debug("d")
      assert.are.equal(text, s.text(), "level " .. level)
    end
  end)

  it("formats like string.format, and leaves a lone message alone", function()
    local s = capture()
    local l = log.new({ stream = s })
    l:info("%d hosts, %s", 3, "ok")
    l:info("100% literal")
    assert.are.equal("3 hosts, ok\n100% literal\n", s.text())
  end)

  it("refuses an unknown level", function()
    assert.has_error(function() log.new({ level = "loud" }) end)
  end)

  it("prefixes host lines in one aligned column, every line of a message", function()
    local s = capture()
    local l = log.new({ stream = s })
    local a, b = l:for_host("h1"), l:for_host("controller-2")
    a:info("connected")
    b:warn("slow")
    a:info("two\nlines")
    assert.are.equal(
      "h1           | connected\n" ..
      "controller-2 | warning: slow\n" ..
      "h1           | two\n" ..
      "h1           | lines\n", s.text())
  end)

  it("colours each host its own way, and errors red, only when colour is on", function()
    local s = capture()
    local l = log.new({ stream = s, color = true })
    l:for_host("a"):info("x")
    l:for_host("b"):info("y")
    l:error("bad")
    local lines = {}
    for line in s.text():gmatch("[^\n]+") do lines[#lines + 1] = line end
    local ca, cb = lines[1]:match("^\27%[(%d+)m"), lines[2]:match("^\27%[(%d+)m")
    assert.is_not_nil(ca)
    assert.are_not.equal(ca, cb)
    assert.are.equal("\27[31merror: bad\27[0m", lines[3])
    local plain = capture()
    log.new({ stream = plain, color = false }):for_host("a"):error("bad")
    assert.are.equal("a | error: bad\n", plain.text())
  end)

  it("decides on colour from the terminal, NO_COLOR, --no-color and TERM", function()
    assert.is_true(log.want_color({ isatty = true, env = env_of({}) }))
    assert.is_false(log.want_color({ isatty = false, env = env_of({}) }))
    assert.is_false(log.want_color({ isatty = true, env = env_of({ NO_COLOR = "1" }) }))
    assert.is_true(log.want_color({ isatty = true, env = env_of({ NO_COLOR = "" }) }))
    assert.is_false(log.want_color({ isatty = true, env = env_of({}), no_color = true }))
    assert.is_false(log.want_color({ isatty = true, env = env_of({ TERM = "dumb" }) }))
  end)

  it("honours NO_COLOR through the command line", function()
    local cli = require "cargoship.cli"
    local function run(env)
      local err = capture()
      cli.main({ "-vv", "version" }, { env = env_of(env), stdout = capture(), stderr = err,
        isatty = { stdin = true, stdout = true, stderr = true }, now = clock, pid = 1 })
      return err.text()
    end
    assert.matches("\27[", run({}), 1, true)
    assert.not_matches("\27[", run({ NO_COLOR = "1" }), 1, true)
  end)

  it("never lets a secret out, on the console, in the file or through a writer", function()
    local s, out = capture(), capture()
    local path = dir .. "/run.log"
    local l = assert(log.new({ level = "debug", stream = s, file = path, now = clock }))
    local h = l:for_host("h1")
    h:redact("hunter2hunter2")
    l:redact("s3cr3t-token-longer")
    l:redact("s3cr3t-token")
    h:info("password is hunter2hunter2, twice: hunter2hunter2")
    l:debug("token %s and %s", "s3cr3t-token-longer", "s3cr3t-token")
    l:writer(out):write("echo ", "hunter2hunter2", "\n")
    l:close()
    local file = read_all(path)
    for _, text in ipairs({ s.text(), file, out.text() }) do
      assert.not_matches("hunter2", text, 1, true)
      assert.not_matches("s3cr3t", text, 1, true)
    end
    assert.matches("password is ******, twice: ******", s.text(), 1, true)
    assert.matches("token ****** and ******", file, 1, true)
    assert.are.equal("echo ******\n", out.text())
  end)

  it("does not mask a short secret by substring: that would blank unrelated text and show it", function()
    local s, out = capture(), capture()
    local l = log.new({ stream = s })
    l:redact("1")
    l:redact("admin")
    l:info("3 hosts, 1 failed; run as admin")
    l:writer(out):write("10 packages\n")
    assert.are.equal("3 hosts, 1 failed; run as admin\n", s.text())
    assert.are.equal("10 packages\n", out.text())
  end)

  it("pads a host column wider than string.format allows (host names are up to 253 long)", function()
    local s = capture()
    local l = log.new({ stream = s })
    local long = ("a"):rep(63) .. "." .. ("b"):rep(60)
    local a, b = l:for_host(long), l:for_host("h1")
    a:info("up")
    b:info("up")
    assert.are.equal(long .. " | up\nh1" .. (" "):rep(#long - 2) .. " | up\n", s.text())
  end)

  it("writes every level to the file with a timestamp, whatever the console shows", function()
    local s = capture()
    local path = dir .. "/sub/dir/run.log"
    local l = assert(log.new({ level = "quiet", stream = s, file = path, now = function() return 1700000000.25 end }))
    l:for_host("h1"):debug("deep %d", 1)
    l:info("hello")
    l:close()
    assert.are.equal("", s.text())
    local file = read_all(path)
    local stamp = (os.date("%Y-%m-%dT%H:%M:%S", 1700000000) .. ".250" .. os.date("%z", 1700000000)):gsub("%p", "%%%0")
    assert.matches("^" .. stamp .. " DEBUG h1 | deep 1\n" .. stamp .. " INFO  hello\n$", file)
    assert.are.equal("600", mode_of(path))
    assert.are.equal(path, l:file_path())
  end)

  it("creates its own log directory 0700, tightening one that exists", function()
    local cache = dir .. "/cache"
    local path = log.default_file(env_of({ XDG_CACHE_HOME = cache }), clock, 77)
    assert(os.execute("mkdir -m 755 -p " .. util.quote(cache .. "/cargoship")))
    local l = assert(log.new({ file = path, private_dir = true, stream = capture() }))
    l:close()
    assert.are.equal("700", mode_of(cache .. "/cargoship"))
    assert.are.equal("600", mode_of(path))
  end)

  it("appends to a file that exists", function()
    local path = dir .. "/a.log"
    local f = assert(io.open(path, "w")); f:write("before\n"); f:close()
    local l = assert(log.new({ file = path, stream = capture(), now = clock }))
    l:info("after")
    l:close()
    assert.matches("^before\n.* INFO  after\n$", read_all(path))
  end)

  it("returns an error for a file it cannot create", function()
    local l, err = log.new({ file = "/proc/nonexistent/x.log" })
    assert.is_nil(l)
    assert.matches("cannot create the log file /proc/nonexistent/x.log", err, 1, true)
  end)

  it("keeps a path with shell metacharacters literal", function()
    local path = dir .. "/it's $(touch pwned) `x`.log"
    local l = assert(log.new({ file = path, stream = capture() }))
    l:close()
    assert.is_not_nil(io.open(path))
    assert.is_nil(io.open(dir .. "/pwned"))
  end)

  describe("default_file", function()
    local stamp = os.date("%Y%m%d-%H%M%S", 1700000000)
    it("lives under $XDG_CACHE_HOME/cargoship", function()
      assert.are.equal("/x/cache/cargoship/" .. stamp .. "-42.log",
        log.default_file(env_of({ XDG_CACHE_HOME = "/x/cache", HOME = "/home/u" }), clock, 42))
    end)
    it("falls back to ~/.cache, also for a relative XDG_CACHE_HOME", function()
      assert.are.equal("/home/u/.cache/cargoship/" .. stamp .. "-42.log",
        log.default_file(env_of({ HOME = "/home/u" }), clock, 42))
      assert.are.equal("/home/u/.cache/cargoship/" .. stamp .. "-42.log",
        log.default_file(env_of({ XDG_CACHE_HOME = "rel", HOME = "/home/u" }), clock, 42))
    end)
    it("uses this process's id by default", function()
      local path = log.default_file(env_of({ HOME = "/h" }), clock)
      assert.matches("%-" .. util.getpid() .. "%.log$", path)
    end)
    it("says so when there is nowhere to put it", function()
      local path, err = log.default_file(env_of({}), clock)
      assert.is_nil(path)
      assert.matches("HOME", err, 1, true)
    end)
  end)
end)
