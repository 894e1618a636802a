-- cargoship.facts.prefetch: the reads of the phases ahead, asked up front and sent to each host in one round trip.
--
-- How a phase plugs in (the only thing a phase adds; its own reads stay as they are):
--
--   M.prefetch(ctx, host) -> cmds, opts | nil
--     cmds = {key = command, ...}: the very commands the phase will send through host:probes
--     or host:probe (same text, same user); opts = {sudo = false} when it reads as the login
--     user (as host:probes(cmds, {sudo = false}) does), else they run as root. nil (or {})
--     when the phase cannot know its commands yet (they depend on a fact an earlier phase has
--     not gathered, host.os say): it is asked again before every later phase that prefetches.
--     It must not touch the host: it only builds commands, like the phase's probes do.
--
-- The runner calls M.before_phase before every phase that has a prefetch: every phase from
-- that one on is asked for its commands, and those not already answered go to the host in
-- one batch (one host:probe). Each answer is kept on the host (host:remember); the phase's
-- host:probes / host:probe then finds it there and sends nothing. A dry run of phases 1-7
-- and 30 thus costs a host two round trips after connecting: one before phase 2 (OS, facts,
-- the lock read), one before phase 5 (the engine probes, which need the OS configurer), or
-- before phase 4 with them when validate_hosts has a join probe to send (a worker the run starts).
-- A login that is not root: the first batch also asks `sudo -n true` and the connection
-- learns the answer there (host:sudo_answer), so deciding sudo costs no round trip either.
-- A later phase (pkgfault's dpkg and holds checks, predict's apt-get -s) adds its own
-- M.prefetch and rides along in the same batch.
--
-- Answers are the host's as of the batch: the host forgets all of them at its first write
-- (host.lua), so a real run's assessment after the lock reads the host afresh. A command
-- for root whose batch found sudo not working is not kept: the phase sends it itself and
-- reports its own error. A batch that fails changes nothing: the phases then ask as they
-- would have without it.
local shell = require "cargoship.shell"

local M = {}

-- One command's section: stdout as is, then its stderr and status. Each runs in a subshell
-- of its own (command substitution), so `exit` or a variable in one never reaches another.
local function section(i, cmd, prefix)
  local body = prefix and (prefix .. "env CARGOSHIP_CMD=\"$CARGOSHIP_CMD\" sh -c " .. shell.quote(cmd)) or cmd
  return table.concat({
    string.format("printf '\\036cs-pf-begin:%d\\n'", i),
    "{ cs_err=$( { " .. body .. "\n} 2>&1 1>&3 3>&- ); cs_rc=$?; } 3>&1",
    string.format("printf '\\036cs-pf-err:%d\\n%%s\\036cs-pf-end:%d:%%d\\n' \"$cs_err\" \"$cs_rc\"", i, i),
  }, "\n")
end

-- M.script(list) -> the batch's text for list = {{cmd, sudo, prefix}, ...}. Pure.
function M.script(list)
  local parts = {}
  for i, c in ipairs(list) do parts[i] = section(i, c.cmd, c.sudo and c.prefix ~= "" and c.prefix or nil) end
  return table.concat(parts, "\n")
end

-- M.parse(out, list) -> {[i] = {out, err, code}}: only the sections that came back whole.
function M.parse(out, list)
  local got = {}
  for i, body, err, j, code in (out or ""):gmatch(
    "\30cs%-pf%-begin:(%d+)\n(.-)\30cs%-pf%-err:%d+\n(.-)\30cs%-pf%-end:(%d+):(%d+)\n") do
    if i == j and list[tonumber(i)] then
      got[tonumber(i)] = { out = body, err = err, code = tonumber(code) }
    end
  end
  return got
end

-- M.needs(ctx, phases, from, host) -> {{cmd, sudo}, ...}: what phases[from..] will read on
-- host and the host has not been answered yet, each command once.
function M.needs(ctx, phases, from, host)
  local list, seen = {}, {}
  for j = from, #phases do
    local p = phases[j]
    if p.prefetch then
      local cmds, opts = p.prefetch(ctx, host)
      local sudo = not (opts and opts.sudo == false)
      local keys = {}
      for k in pairs(cmds or {}) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do
        local cmd = cmds[k]
        local id = (sudo and "s" or "u") .. "\0" .. cmd
        if not seen[id] and not host:recall(cmd, sudo) then
          seen[id] = true
          list[#list + 1] = { cmd = cmd, sudo = sudo }
        end
      end
    end
  end
  return list
end

-- M.fetch(ctx, host, list) -> how many answers were kept. One round trip; errors are the
-- phases' to meet, so a failed batch only means nothing was kept.
function M.fetch(ctx, host, list)
  local prefix = host:sudo_known()
  local send, ask = {}, false
  for _, c in ipairs(list) do if c.sudo and not prefix then ask = true end end
  -- sudo not decided yet (a login that is not root): the batch asks it first, and the
  -- connection learns the answer; the commands for root count only if it said yes
  if ask and host.sudo_known then
    prefix = "sudo -n "
    send[1] = { cmd = "sudo -n true", sudo = false, check = true }
  end
  for _, c in ipairs(list) do
    if not c.sudo or prefix then send[#send + 1] = { cmd = c.cmd, sudo = c.sudo, prefix = prefix } end
  end
  if #send == 0 then return 0 end
  local clock = ctx.clock or os.time
  local t0 = clock()
  local out = host:probe(M.script(send), { sudo = false })
  if not out then return 0 end
  local taken = { t0, clock() }
  local got, kept = M.parse(out, send), 0
  local sudo_ok = not ask
  if ask then
    if not got[1] then return 0 end
    host:sudo_answer(got[1].code, got[1].err)
    sudo_ok = got[1].code == 0
  end
  for i, a in pairs(got) do
    if not send[i].check and (sudo_ok or not send[i].sudo) then
      a.taken = taken
      host:remember(send[i].cmd, send[i].sudo, a)
      kept = kept + 1
    end
  end
  return kept
end

-- M.before_phase(ctx, phases, i, hosts): the runner's hook, before phase i on its hosts.
-- Nothing is sent unless phase i itself has reads not answered yet: a phase that reads
-- nothing costs no round trip, and the batch goes out as late as it can, when most facts
-- the later phases' commands depend on are known.
function M.before_phase(ctx, phases, i, hosts)
  if not phases[i].prefetch then return end
  ctx:each(hosts, function(host)
    if not host:connected() then return true end
    if #M.needs(ctx, { phases[i] }, 1, host) == 0 then return true end
    M.fetch(ctx, host, M.needs(ctx, phases, i, host))
    return true
  end)
end

return M
