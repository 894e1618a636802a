-- Specs of cargoship.ssh.keys: reading a key file safely (regular files of at most 1 MiB).
local keys = require "cargoship.ssh.keys"
local libssh2 = require "cargoship.transport.libssh2"
local util = require "cargoship.util"
local support = require "unit.commands.support"

local ED25519 = table.concat({
  "-----BEGIN OPENSSH PRIVATE KEY-----",
  "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
  "QyNTUxOQAAACBq2bQbQ0mJzq7w0x5sLx1w3zS9m6k8hYQy0oQ2b5kX1gAAAJhF2q3YRdqt",
  "2AAAAAtzc2gtZWQyNTUxOQAAACBq2bQbQ0mJzq7w0x5sLx1w3zS9m6k8hYQy0oQ2b5kX1g",
  "AAAEA=",
  "-----END OPENSSH PRIVATE KEY-----", "" }, "\n")

describe("keys.read", function()
  local dir
  setup(function() dir = support.temp_dir() end)
  teardown(function() support.remove_tree(dir) end)

  local function timed(fn)
    local t0 = util.now()
    local a, b = fn()
    return util.now() - t0, a, b
  end

  it("reads a regular key file", function()
    local path = dir .. "/id"
    local f = assert(io.open(path, "wb")); f:write(ED25519); f:close()
    assert.are.equal(ED25519, keys.read(path))
    assert.are.equal("ed25519", keys.inspect(keys.read(path)).type)
  end)

  it("refuses a directory with a reason, not a Lua error", function()
    local text, err = keys.read(dir)
    assert.is_nil(text)
    assert.are.equal("cannot read key " .. dir .. ": a directory, not a regular file", err)
  end)

  it("refuses a FIFO at once instead of waiting for a writer", function()
    local fifo = dir .. "/fifo"
    assert(os.execute("mkfifo " .. util.quote(fifo)))
    local dt, text, err = timed(function() return keys.read(fifo) end)
    assert.is_nil(text)
    assert.are.equal("cannot read key " .. fifo .. ": a FIFO, not a regular file", err)
    assert.is_true(dt < 1)
  end)

  it("refuses /dev/zero before reading a byte", function()
    local dt, text, err = timed(function() return keys.read("/dev/zero") end)
    assert.is_nil(text)
    assert.are.equal("cannot read key /dev/zero: a character device, not a regular file", err)
    assert.is_true(dt < 1)
  end)

  it("refuses a file over OpenSSH's 1 MiB limit, and takes one of exactly 1 MiB", function()
    local path = dir .. "/big"
    local f = assert(io.open(path, "wb")); f:write(("A"):rep(keys.MAX_FILE + 1)); f:close()
    local text, err = keys.read(path)
    assert.is_nil(text)
    assert.are.equal("cannot read key " .. path .. ": larger than 1048576 bytes", err)
    f = assert(io.open(path, "wb")); f:write(("A"):rep(keys.MAX_FILE)); f:close()
    assert.are.equal(keys.MAX_FILE, #keys.read(path))
  end)

  it("says when the file is missing", function()
    local _, err = keys.read(dir .. "/none")
    assert.are.equal("cannot read key " .. dir .. "/none: No such file or directory", err)
  end)
end)

describe("keys.inspect", function()
  it("reads a 1 MiB file of BEGIN lines in linear time", function()
    local t0 = os.clock()
    local k, why = keys.inspect(("-----BEGIN A-----"):rep(keys.MAX_FILE // 17))
    assert.is_nil(k)
    assert.are.equal("not a PEM or OpenSSH private key", why)
    assert.is_true(os.clock() - t0 < 1, "took " .. (os.clock() - t0) .. " s")
  end)

  it("still tells the key types apart", function()
    assert.are.equal("ed25519", keys.inspect(ED25519).type)
    assert.are.same({ type = "rsa", encrypted = false },
      keys.inspect("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n"))
    assert.are.same({ type = "unknown", encrypted = true },
      keys.inspect("x\n-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n-----END ENCRYPTED PRIVATE KEY-----\n"))
    assert.are.equal("unsupported key format CERTIFICATE",
      select(2, keys.inspect("-----BEGIN CERTIFICATE-----\nMIIE\n-----END CERTIFICATE-----\n")))
  end)
end)

describe("the key's public file", function()
  local dir
  setup(function() dir = support.temp_dir() end)
  teardown(function() support.remove_tree(dir) end)

  -- libssh2 given no public key file derives it from the private key on every login (OpenSSL
  -- trying its decoders on the file); the kind hands it the .pub, but only this key's
  it("is used when it holds the key's own public key, plain or encrypted, and not otherwise", function()
    local q = util.quote
    for _, k in ipairs { { "plain", "''" }, { "locked", "'a phrase'" } } do
      local key = dir .. "/" .. k[1]
      assert(os.execute("ssh-keygen -q -t ed25519 -N " .. k[2] .. " -C spec -f " .. q(key)))
      local info = assert(keys.inspect(keys.read(key)))
      assert.are.equal(key .. ".pub", keys.public_file(key, info.public))
      local t = libssh2.new({ env = function() return nil end, passphrase = function() return nil end })
      if k[1] == "plain" then assert.are.equal(key .. ".pub", t:key(key).pub_path) end
    end
    -- another key's .pub beside it, a damaged one, none: libssh2 derives the key itself
    os.execute("cp " .. q(dir .. "/locked.pub") .. " " .. q(dir .. "/plain.pub"))
    local info = keys.inspect(keys.read(dir .. "/plain"))
    assert.is_nil(keys.public_file(dir .. "/plain", info.public))
    assert.is_nil(libssh2.new({ env = function() return nil end }):key(dir .. "/plain").pub_path)
    local f = assert(io.open(dir .. "/plain.pub", "wb")); f:write("ssh-ed25519 !!!\n"); f:close()
    assert.is_nil(keys.public_file(dir .. "/plain", info.public))
    os.remove(dir .. "/plain.pub")
    assert.is_nil(keys.public_file(dir .. "/plain", info.public))
    -- a PEM key carries no public blob to compare with
    assert.is_nil(keys.public_file(dir .. "/plain", nil))
  end)
end)

describe("the libssh2 session kind with a hostile keyPath", function()
  local dir
  setup(function() dir = support.temp_dir() end)
  teardown(function() support.remove_tree(dir) end)

  -- The kind's key is what every host's connect goes through; before, a directory raised
  -- "attempt to index a nil value", a FIFO blocked the whole process, /dev/zero ate memory.
  for _, case in ipairs({ { "a directory", function() return dir end, "a directory" },
                          { "a FIFO", function()
                              local p = dir .. "/fifo2"
                              os.execute("mkfifo " .. util.quote(p))
                              return p
                            end, "a FIFO" },
                          { "/dev/zero", function() return "/dev/zero" end, "a character device" } }) do
    it("gives an auth error for " .. case[1], function()
      local t = libssh2.new({ env = function() return nil end })
      local path = case[2]()
      local info = t:key(path)
      assert.are.equal("cannot read key " .. path .. ": " .. case[3] .. ", not a regular file", info.err)
    end)
  end
end)
