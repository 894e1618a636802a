-- Specs of cargoship.fetch against a stand-in curl (a shell script): how curl is run, not HTTP (see sha256sum).
local fetch = require "cargoship.fetch"
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local files = require "unit.files"

local q = util.quote

local function run(fn)
  local r = table.pack(loop.run(fn))
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

describe("fetch.stream", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir)))
  end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  -- a curl that records its argv and stdin, then answers as told
  local function fake_curl(body)
    local path = dir .. "/curl"
    files.write(path, "#!/bin/sh\nprintf '%s\\n' \"$@\" > " .. q(dir .. "/argv") .. "\ncat > " .. q(dir .. "/stdin")
      .. "\n" .. body .. "\n")
    assert(os.execute("chmod +x " .. q(path)))
    return path
  end

  it("hands curl the URL on its stdin, never in argv, and yields while curl runs", function()
    local curl = fake_curl("sleep 0.3; printf 'the body'; echo 'cargoship-http 200' >&2")
    local url = "http://ops:s3cret@127.0.0.1:1/blob"
    local ticks, ok, info, chunks = run(function()
      local n, done = 0, false
      local ticker = loop.spawn(function()
        while not done do loop.sleep(0.01); n = n + 1 end
      end)
      local got = {}
      local r1, r2 = fetch.stream(url, function(c) got[#got + 1] = c end, { curl = curl })
      done = true
      ticker:join()
      return n, r1, r2, table.concat(got)
    end)
    assert.is_true(ok, tostring(info))
    assert.equal(200, info.status)
    assert.equal("the body", chunks)
    assert.is_true(ticks >= 10, "the loop was blocked: " .. ticks .. " ticks in 0.3 s")
    assert.equal("--config\n-\n", files.read(dir .. "/argv"))
    assert.matches('url = "' .. url .. '"', files.read(dir .. "/stdin"), 1, true)
  end)

  it("maps curl's exit status and stderr to a reason naming the redacted URL", function()
    local curl = fake_curl("echo 'cargoship-http 404' >&2; exit 22")
    local ok, why, code = run(function()
      return fetch.stream("http://ops:s3cret@127.0.0.1:1/x", function() end, { curl = curl })
    end)
    assert.is_nil(ok)
    assert.equal("http", code)
    assert.equal("http://***@127.0.0.1:1/x: HTTP 404", why)
  end)

  it("says curl is missing when it is", function()
    local ok, why, code = run(function()
      return fetch.stream("http://127.0.0.1:1/x", function() end, { curl = dir .. "/no-curl" })
    end)
    assert.is_nil(ok)
    assert.equal("missing", code)
    assert.matches("curl is needed to fetch URLs and was not found", why, 1, true)
  end)

  it("kills curl when the callback raises, and raises its error", function()
    local curl = fake_curl("echo $$ > " .. q(dir .. "/pid") .. "; printf 'x'; exec sleep 30")
    local ok, err = loop.run(function()
      return fetch.stream("http://127.0.0.1:1/x", function() error("disk full") end, { curl = curl })
    end)
    assert.is_false(ok)
    assert.matches("disk full", err, 1, true)
    local pid = files.read(dir .. "/pid"):match("%d+")
    local stat = files.read("/proc/" .. pid .. "/stat")
    assert.is_true(stat == nil or stat:match("%) [ZX]") ~= nil, "curl outlived the failed callback")
  end)
end)
