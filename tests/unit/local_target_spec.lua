-- Specs of cargoship.local_target (the operator's machine as a target) and of host:download's dry-run refusal.
local action = require "cargoship.action"
local files = require "unit.files"
local fs = require "cargoship.fs"
local host_mod = require "cargoship.host"
local local_target = require "cargoship.local_target"

local function tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  return dir
end

local function statuses(outcomes)
  local out = {}
  for i, o in ipairs(outcomes) do out[i] = o.status end
  return out
end

describe("local target", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("writes a new file 0600 unless told, atomically, leaving no temp file", function()
    local t = local_target.new {}
    assert.is_true(t:write_file(dir .. "/kubeconfig", "token: s3cr3t\n"))
    assert.are.equal("token: s3cr3t\n", files.read(dir .. "/kubeconfig"))
    assert.are.equal(tonumber("600", 8), fs.mode(dir .. "/kubeconfig"))
    assert.is_true(t:write_file(dir .. "/pub", "x", { mode = "0644" }))
    assert.are.equal(tonumber("644", 8), fs.mode(dir .. "/pub"))
    -- an existing file keeps its mode without one, and takes the one given
    assert(os.execute("chmod 0640 " .. dir .. "/pub"))
    assert.is_true(t:write_file(dir .. "/pub", "y"))
    assert.are.same({ "y", tonumber("640", 8) }, { files.read(dir .. "/pub"), fs.mode(dir .. "/pub") })
    assert.is_true(t:write_file(dir .. "/pub", "z", { mode = "0600" }))
    assert.are.same({ "z", tonumber("600", 8) }, { files.read(dir .. "/pub"), fs.mode(dir .. "/pub") })
    local p = io.popen("ls -A " .. dir)
    assert.are.equal("kubeconfig\npub\n", p:read("a"))
    p:close()
    assert.are.equal(4, t.writes_sent)
  end)

  it("reads a file with its mode, in a dry run too, and names a missing one", function()
    local t = local_target.new { dry_run = true }
    files.write(dir .. "/config", "a: 1\n")
    assert(os.execute("chmod 0640 " .. dir .. "/config"))
    assert.are.same({ "a: 1\n", tonumber("640", 8) }, { t:read_file(dir .. "/config") })
    local none, why, code = t:read_file(dir .. "/absent")
    assert.is_nil(none)
    assert.are.same({ "localhost: " .. dir .. "/absent: no such file", "notfound" }, { why, code })
    assert.are.same({}, t.refused)
  end)

  it("executes write and remove records, skipping what is already in place", function()
    local t = local_target.new {}
    local w = action.write { path = dir .. "/sub/kc", content = "a\n", mode = "0600", dir_mode = "0700" }
    local r = action.remove { path = dir .. "/old" }
    files.write(dir .. "/old", "x")
    assert.are.same({ "done", "done" }, statuses(t:apply({ w, r })))
    assert.are.same({ "a\n", tonumber("700", 8) }, { files.read(dir .. "/sub/kc"), fs.mode(dir .. "/sub") })
    assert.is_nil(files.read(dir .. "/old"))
    assert.are.same({ "skipped", "skipped" }, statuses(t:apply({ w, r })))
    assert(os.execute("chmod 0644 " .. dir .. "/sub/kc"))
    assert.are.same({ "done" }, statuses(t:apply({ w })))
    assert.are.equal(tonumber("600", 8), fs.mode(dir .. "/sub/kc"))
  end)

  it("refuses what is for a host, stopping the list there", function()
    local t = local_target.new {}
    local outcomes, err = t:apply({ action.run { cmd = "true" }, action.write { path = dir .. "/f", content = "" } })
    assert.are.same({ "failed", "not_run" }, statuses(outcomes))
    assert.are.equal("localhost: run true: a run action is for a host, not the operator's machine", err)
    local _, err2 = t:apply({ action.write { path = dir .. "/f", content = "", owner = "root" } })
    assert.matches("owner and group are not set", err2)
    assert.is_nil(files.read(dir .. "/f"))
  end)

  it("is refused in a dry run with a host's message, before anything is written", function()
    local t = local_target.new { dry_run = true }
    assert.has_error(function() t:write_file(dir .. "/kc", "x") end,
      "localhost: dry run: refused to write " .. dir .. "/kc")
    assert.has_error(function() t:remove(dir .. "/kc") end, "localhost: dry run: refused to remove " .. dir .. "/kc")
    assert.has_error(function() t:apply({ action.write { path = dir .. "/kc", content = "x" } }) end,
      "localhost: dry run: refused to apply 1 action")
    assert.is_nil(files.read(dir .. "/kc"))
    assert.are.equal(3, #t.refused)
    assert.are.equal(0, t.writes_sent)
    -- the same words as a host's refusal
    local h = host_mod.new { config = { index = 1, name = "localhost" }, dry_run = true }
    h:attach({})
    assert.has_error(function() h:write_file(dir .. "/kc", "x") end,
      "localhost: dry run: refused to write " .. dir .. "/kc")
  end)
end)

describe("host:download", function()
  local function host(dry_run)
    local h = host_mod.new { config = { index = 1, name = "cp1" }, dry_run = dry_run }
    local conn = { asked = 0 }
    function conn.download(_, _, local_path)
      conn.asked = conn.asked + 1
      files.write(local_path, "kubeconfig\n")
      return 11
    end
    h:attach(conn)
    return h
  end

  it("writes no local file in a dry run: it is refused", function()
    local path = os.tmpname()
    os.remove(path)
    local h = host(true)
    assert.has_error(function() h:download("/etc/rancher/k3s/k3s.yaml", path) end,
      "cp1: dry run: refused to download /etc/rancher/k3s/k3s.yaml to " .. path)
    assert.are.equal(0, h.conn.asked)
    assert.is_nil(files.read(path))
    local real = host(false)
    assert.are.equal(11, real:download("/etc/rancher/k3s/k3s.yaml", path))
    assert.are.equal("kubeconfig\n", files.read(path))
    os.remove(path)
  end)
end)
