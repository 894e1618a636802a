-- contrib/phases/disk_space.lua: a read-only check that every host has enough free space under a path.
--
-- Runs after "Validate hosts" and, being read-only, in dry runs too: a host short of space
-- fails the run before anything is changed. Edit the two settings below for your cluster
-- (engines keep images and etcd data under /var/lib). Use it with `apply --phases
-- contrib/phases` or from the cluster file:
--   spec:
--     phases:
--       - file: phases/disk_space.lua
--         after: validate_hosts

-- `shell` (quoting helpers) is a global of the phase sandbox, docs/phases.md
-- luacheck: read globals shell

local PATH = "/var/lib"    -- the directory whose file system is checked
local MIN_FREE_MB = 2048   -- a host with fewer free MiB there fails

return {
  id = "check_disk_space",
  title = "Check free disk space",
  after = "validate_hosts",
  dry_run = "read_only",
  reads = { "connection" },
  creates = {},

  run = function(ctx, hosts)
    return ctx:each(hosts, function(host)
      -- POSIX output keeps one line per file system whatever its name's length
      local out, err, code = host:probe(shell.fmt("df -Pk -- %s | tail -n 1", PATH), { sudo = false })
      if not out then return nil, err end
      if code ~= 0 then return nil, string.format("%s: df %s failed: %s", host.name, PATH, err) end
      local avail_kb = tonumber(out:match("^%S+%s+%d+%s+%d+%s+(%d+)"))
      if not avail_kb then return nil, host.name .. ": cannot read df's answer: " .. out end
      local free_mb = avail_kb // 1024
      if free_mb < MIN_FREE_MB then
        return nil, string.format("%s: only %d MiB free under %s, %d MiB needed", host.name, free_mb, PATH,
          MIN_FREE_MB)
      end
      print(string.format("%s: %d MiB free under %s", host.name, free_mb, PATH))
      return true
    end)
  end,
}
