-- cargoship.facts.packages: the package manager's own state on a host: an interrupted transaction, the pinned packages.
--
-- A package-manager transaction cut short (a host rebooted, dpkg killed mid-unpack) makes
-- every later install fail ("dpkg was interrupted, you must manually run 'dpkg --configure
-- -a'"), and one cut short between install and pin leaves the engine unpinned. Both are
-- read here, in a fragment phases append to a probe they send anyway (no round trip of its own):
--   M.command(method) -> shell fragment ("apt" | "rpm"; nil for others); never fails, prints
--     a "#cs-pm" line, then "I <why>" per sign of an interrupted transaction and, on rpm
--     hosts, the versionlock list (facts.host's format) or "#rpm-nolock" without the plugin
--   M.parse(out) -> {interrupted = {why, ...} | nil, holds = {[name] = true} | nil}
--     holds nil: the host cannot say (no versionlock plugin: nothing is pinned there)
-- Held apt packages are read per package by the install probe (dpkg's Status-Want "hold").
local host_facts = require "cargoship.facts.host"

local M = {}

M.MARK = "#cs-pm"

local COMMAND = {
  -- dpkg's journal holds entries only while a run is in progress (or was cut short); --audit
  -- names packages left unpacked, half-installed or half-configured
  apt = table.concat({
    "echo '" .. M.MARK .. "'",
    'if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ]; then echo "I dpkg was interrupted'
      .. ' (its journal /var/lib/dpkg/updates is not empty)"; fi',
    "dpkg --audit 2>/dev/null | sed -n 's/^ \\([a-z0-9][a-z0-9+.:-]*\\)  *.*$/I dpkg --audit: \\1 is not"
      .. " fully installed/p'",
  }, "\n"),
  -- an rpm transaction killed half-way leaves both versions of a package in the database;
  -- yum leaves its transaction journal
  rpm = table.concat({
    "echo '" .. M.MARK .. "'",
    "if ls /var/lib/yum/transaction-all* >/dev/null 2>&1; then echo 'I yum has an unfinished transaction'; fi",
    "rpm -qa --qf '%{NAME}.%{ARCH}\\n' 2>/dev/null | sort | uniq -d | grep -v -e '^kernel' -e '^gpg-pubkey'"
      .. " | sed 's/^/I rpm lists two versions of /'",
    host_facts.RPM_LOCKS,
  }, "\n"),
}

function M.command(method)
  return COMMAND[method]
end

function M.parse(out)
  local at = (out or ""):find(M.MARK, 1, true)
  if not at then return {} end
  local text = out:sub(at)
  local why, seen = {}, {}
  for line in text:gmatch("[^\n]+") do
    local w = line:match("^I (.+)$")
    if w and not seen[w] then seen[w] = true; why[#why + 1] = w end
  end
  local r = { interrupted = #why > 0 and why or nil }
  if text:find("\n#rpm\n", 1, true) or text:match("\n#rpm$") then
    r.holds = host_facts.parse_holds(text:sub(text:find("\n#rpm", 1, true) + 1))
  end
  return r
end

return M
