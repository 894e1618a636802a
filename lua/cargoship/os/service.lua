-- cargoship.os.service: service-manager command builders (systemd, runit, openrc) and how to tell which one runs.
--
-- A manager is a table of builders: manager.command(verb, name) -> shell command.
-- Verbs: is_active (exit status 0 when running), is_up (exit status 0 when running or on its
-- way up or down: starting, restarting, stopping; its process may hold its ports), start,
-- stop, restart, enable, disable, logs (the recent log, for error messages), reload (the
-- manager rereads its unit files), forget (after the service's files were removed: what the
-- manager itself kept of it, so nothing is left: runit's supervise state in /etc/sv/<name>
-- and the directory when empty, systemd's failed state), start_failed (exit status 0 and one
-- line saying how, when the service's last start failed and the manager has it down or waiting
-- to restart: systemd's failed or auto-restart states; nil where the manager keeps no such
-- state: runit restarts a failing service at once, openrc says nothing).
-- o.nowait (start, restart): the manager is asked and does not wait for the service to report
-- ready: a systemd Type=notify start blocks until then, for ever when the service never is
-- (an engine refused its join); who asks so watches start_failed and the service's log.
local shell = require "cargoship.shell"

local M = {}

M.VERBS = { is_active = true, is_up = true, start = true, stop = true, restart = true, enable = true,
            disable = true, logs = true, reload = true, forget = true, start_failed = true }

local systemd = { name = "systemd" }
local SYSTEMD = {
  is_active = "systemctl is-active --quiet %s",
  -- a Type=notify unit is "activating" from its start until it reports READY (an engine binds
  -- its API port long before), and between a crash and its restart (RestartSec)
  is_up = "case $(systemctl is-active %s) in active|activating|reloading|deactivating) true;; *) false;; esac",
  start = "systemctl start %s",
  stop = "systemctl stop %s",
  restart = "systemctl restart %s",
  enable = "systemctl enable %s",
  disable = "systemctl disable %s",
  logs = "journalctl --no-pager -n 50 -u %s",
}
-- Without waiting: a failed state left by an earlier start is reset first (start_failed then
-- speaks of this start only, and a start limit hit before no longer refuses it), and a unit
-- waiting out RestartSec after a failure is restarted now (a start would wait for the holdoff).
local function systemd_nowait(verb, name)
  if verb == "restart" then
    return shell.fmt("systemctl reset-failed %s >/dev/null 2>&1; systemctl restart --no-block %s", name, name)
  end
  return shell.fmt("systemctl reset-failed %s >/dev/null 2>&1; if [ \"$(systemctl show -p SubState --value %s)\" "
    .. "= auto-restart ]; then systemctl restart --no-block %s; else systemctl start --no-block %s; fi",
    name, name, name, name)
end
-- Down after this start failed: failed, or waiting to restart without having been active since
-- it left the inactive state (a unit that came up and crashed later is the Ready wait's to see).
local SYSTEMD_START_FAILED = "systemctl show -p ActiveState -p SubState -p Result -p ExecMainStatus "
  .. "-p ActiveEnterTimestampMonotonic -p InactiveExitTimestampMonotonic %s | { a= s= r= x= ae=0 ie=0; "
  .. "while IFS== read -r k v; do case $k in ActiveState) a=$v;; SubState) s=$v;; Result) r=$v;; "
  .. "ExecMainStatus) x=$v;; ActiveEnterTimestampMonotonic) ae=${v:-0};; InactiveExitTimestampMonotonic) "
  .. "ie=${v:-0};; esac; done; if [ \"$a\" = failed ] || { [ \"$s\" = auto-restart ] && [ \"$ae\" -le \"$ie\" ]; }; "
  .. "then echo \"systemd: \"%s\" is $a ($s) after its start failed (result $r, exit status $x)\"; exit 0; fi; "
  .. "exit 1; }"
function systemd.command(verb, name, o)
  if verb == "reload" then return "systemctl daemon-reload" end
  if verb == "forget" then return shell.fmt("systemctl reset-failed %s >/dev/null 2>&1; true", name) end
  if verb == "start_failed" then return shell.fmt(SYSTEMD_START_FAILED, name, name) end
  if (verb == "start" or verb == "restart") and o and o.nowait then
    return systemd_nowait(verb, name)
  end
  return shell.fmt(SYSTEMD[verb], name)
end

-- runit names services by their directory under the scanned service dir; `sv` takes the
-- full path so the command does not depend on SVDIR, which differs between distributions.
local function runit(service_dir)
  local dir = service_dir or "/etc/service"
  local r = { name = "runit", service_dir = dir }
  -- `sv up` never waits for the service to be ready: o.nowait changes nothing
  function r.command(verb, name)
    local path = dir .. "/" .. name
    if verb == "start_failed" then return nil end
    if verb == "is_active" then
      -- `sv status` exits 0 for a stopped service too; only "run:" means running
      return shell.fmt("sv status %s 2>/dev/null | grep -q '^run:'", path)
    elseif verb == "is_up" then
      -- also "down: ... want up": runsv restarts a process that left within a second
      return shell.fmt("sv status %s 2>/dev/null | grep -qE '^run:|^(finish|down): .*want up'", path)
    elseif verb == "start" or verb == "restart" then
      -- a service just linked in has no supervisor until runsvdir's next scan (every 5 s;
      -- seen past 7 s on a loaded host), so wait for it, up to 30 s, and say so if it never
      -- comes. Waiting for supervise/ok to exist is not enough: runsv makes that FIFO before
      -- it opens it, and a stale one outlives its runsv; `sv status` answers only once a runsv
      -- reads it ("runsv not running" before: seen on 1 of 50 hosts behind a 100 ms link)
      return shell.fmt("i=0; until sv status %s >/dev/null 2>&1; do [ $i -lt 300 ] || { echo %s >&2; exit 1; }; "
        .. "sleep 0.1; i=$((i+1)); done; sv " .. (verb == "start" and "up" or "restart") .. " %s",
        path, "runsvdir has not started a supervisor (runsv) for " .. path .. " within 30 s", path)
    elseif verb == "stop" then return shell.fmt("sv down %s", path)
    elseif verb == "enable" then return shell.fmt("ln -sfn %s %s", "/etc/sv/" .. name, path)
    elseif verb == "disable" then return shell.fmt("rm -f -- %s", path)
    elseif verb == "logs" then
      -- the log directory is whatever the service's log/run hands svlogd (its last word);
      -- else where distributions put it (Void /var/log/NAME, others /var/log/runit/NAME)
      return shell.fmt("for f in \"$(sed -n 's#.*svlogd.*[[:space:]]\\(/[^[:space:]]*\\)[[:space:]]*$#\\1#p' %s "
        .. "2>/dev/null | tail -n 1)/current\" %s %s %s; do [ -f \"$f\" ] && exec tail -n 50 \"$f\"; done; "
        .. "echo no log found for %s", "/etc/sv/" .. name .. "/log/run", "/var/log/" .. name .. "/current",
        "/var/log/runit/" .. name .. "/current", "/var/log/sv/" .. name .. "/current", name)
    elseif verb == "reload" then return "true" -- runsvdir rescans its directory every 5 s
    elseif verb == "forget" then
      -- runsv's state; then the directory itself where the package's files left it empty.
      -- runsvdir stops the service's runsv (and the svlogd under it) only at its next scan
      -- after the link went (every 5 s, later on a loaded host), so wait for runsv to leave
      -- first, up to 30 s: `sv status` fails ("runsv not running") once it has. A reset that
      -- ended with runsv still there would leave engine processes behind.
      local d = "/etc/sv/" .. name
      return shell.fmt("i=0; while sv status %s >/dev/null 2>&1 && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
        .. "if sv status %s >/dev/null 2>&1; then echo %s >&2; exit 1; fi; "
        .. "rm -rf -- %s %s; rmdir %s %s 2>/dev/null; true", d, d,
        "runsv of " .. d .. " still running 30 s after its link in " .. dir .. " was removed: is runsvdir scanning "
        .. dir .. "?", d .. "/supervise", d .. "/log/supervise", d .. "/log", d)
    end
  end
  return r
end

local openrc = { name = "openrc" }
local OPENRC = {
  is_active = "rc-service %s status >/dev/null 2>&1",
  -- started only: openrc's exit statuses for a service starting or stopping are not relied on
  is_up = "rc-service %s status >/dev/null 2>&1",
  start = "rc-service %s start",
  stop = "rc-service %s stop",
  restart = "rc-service %s restart",
  enable = "rc-update add %s default",
  disable = "rc-update del %s default",
  logs = "tail -n 50 /var/log/messages",
}
function openrc.command(verb, name)
  if verb == "start_failed" then return nil end
  if verb == "reload" or verb == "forget" then return "true" end
  if verb == "logs" then return OPENRC.logs end
  return shell.fmt(OPENRC[verb], name)
end

-- M.manager(name, {service_dir}) -> manager | nil
function M.manager(name, o)
  if name == "systemd" then return systemd end
  if name == "runit" then return runit(o and o.service_dir) end
  if name == "openrc" then return openrc end
  return nil
end

-- The probe that collects what detect() needs, as key=value lines. Constant text, so
-- nothing in it needs quoting. Tools are looked up in the usual directories, not PATH:
-- a non-root login on Debian has no /usr/sbin in its PATH.
M.PROBE = [[
c=; read -r c < /proc/1/comm 2>/dev/null; printf 'comm=%s\n' "$c"
printf 'cmdline=%s\n' "$(tr '\000' ' ' </proc/1/cmdline 2>/dev/null)"
[ -d /run/systemd/system ] && echo systemd_booted=yes
for c in systemctl sv rc-service; do
  for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
    if [ -x "$d/$c" ]; then echo "has=$c"; break; fi
  done
done
for d in /etc/service /var/service /service; do [ -d "$d" ] && echo "service_dir=$d"; done
true]]

-- Parses PROBE's output -> {comm, cmdline, systemd_booted, has = {tool = true}, service_dirs = {..}}
function M.parse(out)
  local s = { has = {}, service_dirs = {} }
  for line in (out or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k == "has" then s.has[v] = true
    elseif k == "service_dir" then s.service_dirs[#s.service_dirs + 1] = v
    elseif k == "systemd_booted" then s.systemd_booted = true
    elseif k then s[k] = v:gsub("%s+$", "") end
  end
  return s
end

-- M.detect(signals) -> "systemd"|"runit"|"openrc"|nil, service_dir|nil, why
-- /run/systemd/system is systemd's own "booted with systemd" test (sd_booted); an
-- installed systemctl alone proves nothing (Debian ships it on runit hosts too).
function M.detect(s)
  local comm = s.comm or ""
  if s.systemd_booted or comm == "systemd" then
    return "systemd", nil, "systemd is PID 1"
  end
  if comm == "runit" or comm == "runsvdir" then
    -- runsvdir as PID 1 names its directory: "runsvdir -P /etc/service log: ..."
    local dir = (s.cmdline or ""):match("^%S*runsvdir%s+%-P%s+(/%S+)")
      or (s.cmdline or ""):match("^%S*runsvdir%s+(/%S+)")
    return "runit", dir or s.service_dirs[1], comm .. " is PID 1"
  end
  if s.has["rc-service"] and (comm == "init" or comm == "openrc-init") then
    return "openrc", nil, "rc-service present and " .. comm .. " is PID 1"
  end
  if s.has.sv and s.service_dirs[1] then
    return "runit", s.service_dirs[1], "sv present with " .. s.service_dirs[1]
  end
  return nil, nil, string.format("PID 1 is %q and none of systemd, runit or openrc was found",
    comm ~= "" and comm or "unknown")
end

return M
