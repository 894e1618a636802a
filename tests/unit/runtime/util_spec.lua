-- Specs of runtime/util.c: the shell-quoting property against real shells, sha256 vectors and files.
local util = require "cargoship.util"

local SEED = 20240611
local CASES = 10000

-- Bytes a shell cares about, drawn more often than their share of 1..255.
local NASTY = { "'", '"', "$", "(", ")", "`", "\\", "\n", "\r", "\t", " ", "!", "*", "?", "[", "]",
  "{", "}", ";", "&", "|", "<", ">", "~", "#", "%", "=", "-", "\255", "\128", "\192" }

local function random_bytes(len)
  local t = {}
  for i = 1, len do
    t[i] = math.random() < 0.5 and NASTY[math.random(#NASTY)] or string.char(math.random(1, 255))
  end
  return table.concat(t)
end

local function cases()
  math.randomseed(SEED)
  local list = { "", "'", "''", "\\'", "a'b'c", "$(id)", "`id`", "-n", "-e", "\n", "%s", "%%" }
  while #list < CASES do list[#list + 1] = random_bytes(math.random(0, 64)) end
  return list
end

local function read_all(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("a")
  f:close()
  return data
end

-- Runs every quoted word through `shell` in one script: `p WORD` hands the word to printf
-- as "$1", exactly as `sh -c 'printf %s "$1"' _ WORD` would, and NUL ends each output
-- (no input holds one, so splitting on it is safe). Should quoting ever break, the random
-- words run as commands: they do so in a scratch directory with no stdin.
local function through_shell(shell, words)
  local script, out = os.tmpname(), os.tmpname()
  local lines = {
    [[d=$(mktemp -d) && cd "$d" || exit 1; trap 'cd / && rm -rf "$d"' EXIT]],
    "p() { printf '%s\\0' \"$1\"; }",
  }
  for _, w in ipairs(words) do lines[#lines + 1] = "p " .. util.quote(w) end
  local f = assert(io.open(script, "wb"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local ok = os.execute(shell .. " " .. util.quote(script) .. " > " .. util.quote(out) .. " < /dev/null")
  local data = read_all(out)
  os.remove(script)
  os.remove(out)
  assert(ok, shell .. " failed")
  local got = {}
  for piece in data:gmatch("([^\0]*)\0") do got[#got + 1] = piece end
  return got
end

local function have(shell)
  return os.execute("command -v " .. shell .. " >/dev/null 2>&1")
end

describe("util.quote", function()
  local words = cases()

  for _, shell in ipairs({ "/bin/sh", "bash" }) do
    local test = have(shell) and it or pending
    test(("round-trips %d random byte strings through %s byte for byte"):format(CASES, shell), function()
      local got = through_shell(shell, words)
      assert.are.equal(#words, #got)
      for i, w in ipairs(words) do
        if got[i] ~= w then
          error(("case %d (seed %d): %q came back as %q via %s"):format(i, SEED, w, got[i], util.quote(w)))
        end
      end
    end)
  end

  it("survives sh -c 'printf %s \"$1\"' _ QUOTED, one process per word, for a sample", function()
    for i = 1, 200 do
      local w = words[i]
      local p = assert(io.popen("sh -c 'printf %s \"$1\"' _ " .. util.quote(w), "r"))
      local got = p:read("a")
      p:close()
      assert.are.equal(w, got, ("case %d: %q"):format(i, w))
    end
  end)

  it("quotes known cases", function()
    assert.are.equal("''", util.quote(""))
    assert.are.equal("'abc'", util.quote("abc"))
    assert.are.equal("'it'\\''s'", util.quote("it's"))
  end)

  it("raises on a NUL byte, which no shell word can carry", function()
    assert.has_error(function() util.quote("a\0b") end)
    assert.has_error(function() util.quote("\0") end)
  end)
end)

describe("util.sha256", function()
  it("matches the known vectors", function()
    assert.are.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", util.sha256(""))
    assert.are.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", util.sha256("abc"))
    assert.are.equal("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
      util.sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
  end)

  it("hashes a file as it hashes its contents, and gives its size", function()
    local path = os.tmpname()
    local data = random_bytes(200000)
    local f = assert(io.open(path, "wb"))
    f:write(data)
    f:close()
    local digest, size = util.sha256_file(path)
    os.remove(path)
    assert.are.equal(util.sha256(data), digest)
    assert.are.equal(#data, size)
  end)

  it("gives nil, a message naming the path, and \"io\" for a missing file", function()
    local path = os.tmpname()
    os.remove(path)
    local digest, err, code = util.sha256_file(path)
    assert.is_nil(digest)
    assert.are.equal(path .. ": sha256: No such file or directory", err)
    assert.are.equal("io", code)
  end)
end)

describe("util.wall", function()
  it("is the time of day to a fraction of a second, where util.now is a monotonic clock", function()
    -- os.time() reads the kernel's coarse clock, which lags the fine one by up to a tick (CI
    -- under ASan saw wall 1796529713.004 against a later os.time() of ...712): 50 ms of slack
    local before, w, after = os.time(), util.wall(), os.time()
    assert.is_true(w >= before - 0.05 and w < after + 1.05, string.format("%f not in [%d, %d]", w, before, after + 1))
    -- a sleep of 0.2 s shows in the fraction, not only in whole seconds
    local a = util.wall()
    os.execute("sleep 0.2")
    local d = util.wall() - a
    assert.is_true(d > 0.15 and d < 2, tostring(d))
  end)
end)
