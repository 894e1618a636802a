-- contrib/phases/motd.lua: writes /etc/motd on every host, and does nothing where it already says the same.
--
-- A phase that changes hosts: in a dry run it is reported, not run (it declares no
-- dry_run). Its assess reads the current file, so hosts that have the text already show
-- "nothing to do", and returns one write record elsewhere: the plan shows that record, and
-- the real run executes exactly it (the runner, through host:apply, atomically; skipped if
-- the file is already in place by then). No run: nothing here needs ordering across hosts.
-- It runs after the host lock is taken. Edit MOTD below; %s is the cluster's name.

-- `action` (the record constructors) is a global of the phase sandbox, docs/phases.md
-- luacheck: read globals action

local MOTD = [[
This host belongs to the cluster %s, installed and managed by cargoship.
Changes made here by hand may be undone by the next `cargoship apply`.
]]

local FILE = "/etc/motd"

local function text(ctx)
  return string.format(MOTD, ctx.cluster and ctx.cluster.name or "?")
end

return {
  id = "write_motd",
  title = "Write the message of the day",
  after = "acquire_lock",
  reads = { "connection" },
  creates = { "motd" },

  assess = function(ctx, host)
    local have, err, code = host:read_file(FILE)
    if not have and code ~= "notfound" then error(err, 0) end
    if have == text(ctx) then return {} end
    return { action.write { path = FILE, content = text(ctx), mode = "0644",
      say = (have and "rewrite " or "create ") .. FILE } }
  end,
}
