-- Integration spec (issue 13): cluster-file values holding "$$", "${", quotes and newlines reach a lab
-- host byte for byte — read literally by default, expanded only under --expand-env.
--
-- A custom phase writes each string of spec.config.values.probe to /root/cs-probe/<key> on every
-- host (write records, so the bytes go through the engine's own upload path); the spec reads them
-- back over ssh and compares them with what the file said, or with its expansion.
local util = require "cargoship.util"
local json = require "cargoship.json"
local lab = require "integration.lab"

local q = util.quote
local N = 2
local work

local read, write = lab.read, lab.write

local PHASE = [[
-- writes spec.config.values.probe.<key> to /root/cs-probe/<key>, as the cluster file gave it
-- luacheck: read globals action
return {
  id = "write_probe",
  title = "Write the probe values",
  after = "acquire_lock",
  reads = { "connection" },
  creates = { "probe" },
  assess = function(ctx, host)
    local out = { action.run { cmd = "mkdir -p /root/cs-probe", say = "make /root/cs-probe" } }
    for k, v in pairs(ctx.cluster.values.probe) do
      out[#out + 1] = action.write { path = "/root/cs-probe/" .. k, content = v, mode = "0600",
        say = "write " .. k }
    end
    return out
  end,
}
]]

-- Values as the operator writes them (YAML double-quoted, so every byte is explicit).
local LITERAL = {
  dd = "a$$b",
  open = "x${never closed",
  ref = "${HOME}/y",
  bad = "${not a name}",
  quotes = "say \"hi\" and 'bye' $1 `date`",
  lines = "first\n  second $$ ${\nthird\n",
}
local EXPANDABLE = {
  dd = "a$$b",
  ref = "${CS_PROBE}/y",
  quotes = "\"${CS_PROBE}\" 'q' $1",
  lines = "one\n${CS_PROBE}\n$$\n",
}
local EXPANDED = {
  dd = "a$b",
  ref = "v$al'ue\"/y",
  quotes = "\"v$al'ue\"\" 'q' $1",
  lines = "one\nv$al'ue\"\n$\n",
}

local function cluster(name, values)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: literal",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "    values:", "      probe:" }
  local keys = {}
  for k in pairs(values) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do lines[#lines + 1] = "        " .. k .. ": " .. json.encode(values[k]) end
  lines[#lines + 1] = "  hosts:"
  for i, h in ipairs { table.unpack(lab.hosts(), 1, N) } do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i, h.address, lab.key, lab.known_hosts)
  end
  lines[#lines + 1] = "  phases:\n    - file: phases/probe.lua\n      after: acquire_lock"
  return write(work .. "/" .. name, table.concat(lines, "\n") .. "\n")
end

local function apply(args)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("env HOME=%s CS_PROBE=%s %s apply %s </dev/null >%s 2>%s",
    q(work), q("v$al'ue\""), q(lab.bin), args, q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err) }
  os.remove(out)
  os.remove(err)
  return r
end

-- The bytes of /root/cs-probe/<key> on host i (base64 over ssh, so nothing is lost on the way).
local function probe(i, key)
  local tmp = os.tmpname()
  local ok = os.execute("ssh -F " .. q(lab.state .. "/ssh_config") .. " h" .. i .. " "
    .. q("base64 -w0 /root/cs-probe/" .. key) .. " | base64 -d >" .. q(tmp))
  local data = read(tmp)
  os.remove(tmp)
  assert(ok, "cannot read /root/cs-probe/" .. key .. " on h" .. i)
  return data
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work .. "/phases")))
  write(work .. "/phases/probe.lua", PHASE)
  cluster("literal.yaml", LITERAL)
  cluster("expand.yaml", EXPANDABLE)
end)

teardown(function()
  os.execute("rm -rf " .. q(work))
end)

describe("cluster-file values on the hosts", function()
  it("are written exactly as the file has them without --expand-env", function()
    local r = apply("--confirm " .. q(work .. "/literal.yaml"))
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    for i = 1, N do
      for k, v in pairs(LITERAL) do assert.are.equal(v, probe(i, k), "h" .. i .. " " .. k) end
    end
  end)

  it("are expanded, byte for byte, with --expand-env", function()
    local r = apply("--expand-env --confirm " .. q(work .. "/expand.yaml"))
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    for i = 1, N do
      for k, v in pairs(EXPANDED) do assert.are.equal(v, probe(i, k), "h" .. i .. " " .. k) end
    end
  end)

  it("refuse an unterminated ${ under --expand-env, before any host is touched", function()
    local r = apply("--expand-env --confirm " .. q(work .. "/literal.yaml"))
    assert.are.equal(1, r.code, r.stdout .. r.stderr)
    assert.matches("values.probe.open: unterminated ${", r.stderr, 1, true)
    assert.is_nil(r.stderr:find("Connect", 1, true))
  end)
end)
