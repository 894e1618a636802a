-- tests/integration/lab.lua: what integration specs know about the running lab (hosts, keys, helpers).
local M = {}

M.state = os.getenv("LAB_STATE") or error("LAB_STATE is not set: integration specs run inside the lab (see tests/lab)")
M.src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
M.bin = os.getenv("CARGOSHIP_BIN")
M.cluster = M.state .. "/cluster.yaml"
M.known_hosts = M.state .. "/known_hosts"
M.key = M.state .. "/id_ed25519"

-- hosts.tsv: name, address, os, init
function M.hosts()
  local list = {}
  for line in io.lines(M.state .. "/hosts.tsv") do
    local name, addr, os_name, init = line:match("^(%S+)\t(%S+)\t(%S+)\t(%S+)")
    if name then list[#list + 1] = { name = name, address = addr, os = os_name, init = init } end
  end
  return list
end

function M.host(i)
  return M.hosts()[i]
end

-- First host of the wanted flavour.
function M.find(os_name, init)
  for _, h in ipairs(M.hosts()) do
    if (not os_name or h.os == os_name) and (not init or h.init == init) then return h end
  end
  error("the lab has no " .. tostring(os_name) .. "/" .. tostring(init) .. " host")
end

-- A connection config as the cluster loader normalizes it.
function M.conn(h, over)
  local c = { kind = "ssh", address = h.address, port = 22, user = "root", key_path = M.key }
  for k, v in pairs(over or {}) do c[k] = v end
  return c
end

-- Runs a shell command on the machine; returns exit code and output.
function M.sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out
end

function M.lab(args)
  return M.sh(M.src .. "/tests/lab/lab.sh " .. args)
end

-- Files under a host's overlay upper dir with their sha256, for "wrote nothing" proofs.
function M.upper_snapshot(i, ignore)
  local _, dir = M.lab("upper " .. i)
  dir = dir:gsub("%s+$", "")
  local _, list = M.sh("cd " .. dir .. " && find . -xdev \\( -type f -o -type l \\) -print0 | sort -z | "
    .. "xargs -0 -r sha256sum 2>/dev/null")
  local snap = {}
  for sum, path in list:gmatch("(%x+)  ([^\n]+)") do
    local skip = false
    for _, pat in ipairs(ignore or {}) do if path:match(pat) then skip = true end end
    if not skip then snap[path] = sum end
  end
  return snap, dir
end

return M
