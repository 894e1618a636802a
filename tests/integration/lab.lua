-- tests/integration/lab.lua: what integration specs know about the running lab (hosts, keys, helpers).
local files = require "unit.files"

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

-- M.pick(os_name, init) -> index, host: the first host of that flavour, by its index (what
-- `lab.sh reset I` and run.ssh take).
function M.pick(os_name, init)
  for i, h in ipairs(M.hosts()) do
    if h.os == os_name and h.init == init then return i, h end
  end
  error("the lab has no " .. os_name .. "/" .. init .. " host")
end

-- M.must(args): `lab.sh ARGS`, which must succeed (its output is the error otherwise).
function M.must(args)
  local code, out = M.lab(args)
  assert(code == 0, "lab.sh " .. args .. ": " .. out)
end

-- The transport the host-facing specs run on: CARGOSHIP_LAB_TRANSPORT=libssh2 (the default,
-- `ssh:` blocks) or openssh (`openSSH:` blocks, the system's ssh); ctest runs them once each.
M.transport = os.getenv("CARGOSHIP_LAB_TRANSPORT") or "libssh2"
assert(M.transport == "libssh2" or M.transport == "openssh",
  "CARGOSHIP_LAB_TRANSPORT must be libssh2 or openssh, got " .. M.transport)
M.openssh = M.transport == "openssh"

-- A connection config as the cluster loader normalizes it, of the spec's transport.
function M.conn(h, over)
  local c = { kind = M.openssh and "openssh" or "ssh", address = h.address, port = 22, user = "root", key_path = M.key }
  for k, v in pairs(over or {}) do c[k] = v end
  return c
end

-- The cluster file's connection block of a host for the spec's transport, as one YAML flow
-- mapping: `ssh: {address: A, keyPath: K}` or `openSSH: {address: A, keyPath: K}`; extra
-- fields (a table, written in sorted order) come first.
function M.block(h, extra)
  local fields = {}
  local keys = {}
  for k in pairs(extra or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do fields[#fields + 1] = k .. ": " .. tostring(extra[k]) end
  fields[#fields + 1] = "address: " .. h.address
  fields[#fields + 1] = "keyPath: " .. M.key
  return (M.openssh and "openSSH" or "ssh") .. ": {" .. table.concat(fields, ", ") .. "}"
end

-- A whole local file ("" when it does not exist).
function M.read(path) return files.read(path) or "" end

-- Writes text to a local file; returns the path.
M.write = files.write

-- Runs a shell command on the machine; returns exit code and output.
function M.sh(cmd)
  local out, code = files.sh(cmd)
  return code, out
end

-- Writes a Lua script for a separate lua5.4 process (under valgrind, or with a preloaded shim)
-- that uses this tree's runtime: `loop` and `ssh` are loaded, then body runs. -> the path.
function M.runtime_script(body)
  local path = os.tmpname()
  files.write(path, string.format("package.path = %q .. \"/lua/?.lua;\" .. package.path\n"
    .. "package.cpath = %q .. \"/lib/?.so;\" .. package.cpath\n"
    .. "local loop = require \"cargoship.loop\"\nlocal ssh = require \"cargoship.ssh\"\n",
    M.src, os.getenv("CARGOSHIP_BUILD_DIR")) .. body)
  return path
end

-- M.fanout_script(n, o) -> the path of a runtime script (M.runtime_script) that connects to the
-- lab's first n hosts at once as root, runs o.each (Lua text; `s` the session, `a` its address)
-- in each host's task, then o.after (inside the loop, once all are joined; may use `kh`), then
-- o.tail (after the loop, e.g. the line the spec looks for). o.timeout: connect's, if given.
function M.fanout_script(n, o)
  local hosts, addrs = M.hosts(), {}
  assert(#hosts >= n, "the lab has " .. #hosts .. " hosts, " .. n .. " needed")
  for i = 1, n do addrs[i] = string.format("%q", hosts[i].address) end
  return M.runtime_script(string.format([[
local ok, err = loop.run(function()
  local kh = assert(ssh.known_hosts(%q))
  local tasks = {}
  for i, a in ipairs { %s } do
    tasks[i] = loop.spawn(function()
      local s = assert(ssh.connect { address = a, user = "root", key_path = %q, known_hosts = kh%s })
%s
    end)
  end
  for _, t in ipairs(tasks) do assert(t:join()) end
%s
end)
assert(ok, err)
%s
]], M.known_hosts, table.concat(addrs, ", "), M.key, o.timeout and (", timeout = " .. o.timeout) or "",
    o.each, o.after or "", o.tail or ""))
end

function M.lab(args)
  return M.sh(M.src .. "/tests/lab/lab.sh " .. args)
end

-- Runs `cargoship ARGS` in the background with HOME=work (env: "VAR=value ..." before it, stdin
-- /dev/null); when ready is given, calls it while the run goes on, then sends the run signal
-- (INT, KILL, ...), if given. -> {code, secs (from the signal, or the start), stdout, stderr, all}
function M.run_bin(work, args, ready, signal, env)
  local q = require("cargoship.util").quote
  local now = require("cargoship.util").now
  local out, err, pidf = os.tmpname(), os.tmpname(), os.tmpname()
  local inner = string.format("echo $$ > %s; exec %s %s", pidf, q(M.bin), args)
  local p = io.popen(string.format("env HOME=%s %s sh -c %s </dev/null >%s 2>%s & wait $!; echo $?", q(work),
    env or "", q(inner), q(out), q(err)))
  local t0 = now()
  if ready then
    ready()
    t0 = now()
    if signal then os.execute("kill -" .. signal .. " " .. M.read(pidf):match("%d+")) end
  end
  local code = tonumber(p:read("a"):match("%d+"))
  p:close()
  local r = { code = code, secs = now() - t0, stdout = M.read(out), stderr = M.read(err) }
  r.all = r.stdout .. r.stderr
  os.remove(out); os.remove(err); os.remove(pidf)
  return r
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

-- ---- "wrote nothing" proofs over every entry, not only files (added for apply_dryrun_spec) ----

-- Every entry under root (root itself included), keyed by its path below root ("/etc/hosts"):
-- "type mode uid:gid" plus the sha256 of a file, the target of a symlink; with opts.mtime also
-- the modification time. Unlike upper_snapshot this also sees directories, deletions (an
-- overlay whiteout is a character device in the upper dir), dangling symlinks, mode and owner
-- changes. Paths matching a Lua pattern of `ignore` are left out. opts.xdev: stay on root's
-- filesystem. -> { [path] = "line" }
function M.tree_snapshot(root, ignore, opts)
  opts = opts or {}
  local xdev = opts.xdev and " -xdev" or ""
  local when = opts.mtime and " %T@" or ""
  local cd = "cd '" .. root:gsub("'", "'\\''") .. "' && "
  local code, list = M.sh(cd .. "find ." .. xdev .. " -printf '%y %m %U:%G" .. when .. "\t%l\t%p\n'")
  assert(code == 0, "cannot list " .. root .. ": " .. list)
  local _, sums = M.sh(cd .. "find ." .. xdev .. " -type f -print0 | xargs -0 -r sha256sum")
  local hash = {}
  for sum, path in sums:gmatch("(%x+)  %.([^\n]*)") do hash[path] = sum end
  local snap = {}
  for meta, target, path in list:gmatch("([^\t\n]*)\t([^\t\n]*)\t%.([^\n]*)") do
    if path == "" then path = "/" end
    local skip = false
    for _, pat in ipairs(ignore or {}) do if path:match(pat) then skip = true end end
    if not skip then
      local line = meta
      if meta:sub(1, 1) == "f" then line = line .. " sha256:" .. tostring(hash[path])
      elseif meta:sub(1, 1) == "l" then line = line .. " -> " .. target end
      snap[path] = line
    end
  end
  return snap
end

-- Host i's overlay upper dir (everything the host wrote to disk), as tree_snapshot, with mtimes.
function M.upper_tree(i, ignore)
  local _, dir = M.lab("upper " .. i)
  return M.tree_snapshot(dir:gsub("%s+$", ""), ignore, { xdev = true, mtime = true })
end

-- Host i's RAM filesystems (/run, where locks live, /tmp, /dev/shm), which the upper dir does
-- not see, as tree_snapshot (no mtimes), seen from the machine through /proc/PID/root.
M.TMPFS = { "/run", "/tmp", "/dev/shm" }
function M.tmpfs_tree(i, ignore)
  local _, pid = M.lab("pid " .. i)
  pid = pid:gsub("%s+$", "")
  assert(pid:match("^%d+$"), "no PID 1 for host " .. i .. ": " .. pid)
  local snap = {}
  for _, mnt in ipairs(M.TMPFS) do
    for path, line in pairs(M.tree_snapshot("/proc/" .. pid .. "/root" .. mnt)) do
      local full = mnt .. (path == "/" and "" or path)
      local skip = false
      for _, pat in ipairs(ignore or {}) do if full:match(pat) then skip = true end end
      if not skip then snap[full] = line end
    end
  end
  return snap
end

-- What differs between two snapshots, one sorted line per path ("+ path", "- path", "~ path: a => b").
function M.snapshot_diff(before, after)
  local out = {}
  for path, line in pairs(before) do
    if after[path] == nil then out[#out + 1] = "- " .. path .. "  (" .. line .. ")"
    elseif after[path] ~= line then out[#out + 1] = "~ " .. path .. ": " .. line .. " => " .. after[path] end
  end
  for path, line in pairs(after) do
    if before[path] == nil then out[#out + 1] = "+ " .. path .. "  (" .. line .. ")" end
  end
  table.sort(out, function(a, b) return a:sub(3) < b:sub(3) end)
  return out
end

return M
