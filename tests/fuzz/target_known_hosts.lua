-- target_known_hosts.lua - fuzz target: an OpenSSH known_hosts file (ssh.known_hosts, then the host-key
-- types it holds per host, as a connection asks them). Fine: a collection, or nil + "path: ...". A finding: any raise.
local ssh = require "cargoship.ssh"
local fuzz = require "fuzz"

local function run(data, path)
  local k, err, code = ssh.known_hosts(path)
  if not k then
    assert(code == "io" and type(err) == "string" and err:find(path, 1, true), "bad failure: " .. tostring(err))
    return
  end
  -- the first name of the first lines, and a few fixed ones
  local hosts = { "localhost", "10.0.0.1", "[10.0.0.1]:2222", "|1|", "" }
  for line in data:gmatch("[^\n]+") do
    if #hosts > 12 then break end
    hosts[#hosts + 1] = line:match("^([^%s,]+)")
  end
  for _, h in ipairs(hosts) do
    local name, port = h:match("^%[(.*)%]:(%d+)$")
    local types = fuzz.kh_types(k, name or h, tonumber(port or "22") % 65536)
    assert(type(types) == "string")
  end
  getmetatable(k).__close(k)
end

return { file = "known_hosts", run = run }
