-- distros.engine: the engine configurer interface and shared base; pure functions returning commands or parsing output.
--
-- An engine configurer (distros/<type>/init.lua) is `engine.define{...}` with:
--   name, binary, binary_paths (tried in order, then PATH), version_prefix (the word before
--   the version in `--version` output), services = {controller, worker}, kubeconfig,
--   kubectl_words (the kubectl command as words), data_dir, config_path.
-- and inherits:
--   version_probe() -> command printing the installed version (nothing when absent)
--   parse_version(output) -> "v1.35.4+rke2r1" | nil
--   service(role) -> unit/service name
--   service_active_probe(role, os) -> command whose exit status 0 means running
--   kubectl(args) -> "env KUBECONFIG=... <kubectl> args..." (every word quoted)
--   compare_versions(a, b) -> -1|0|1 | nil, why
-- Nothing here runs anything: the host object runs what these return.
local shell = require "cargoship.shell"

local M = {}

M.TYPES = { "rke2", "k3s", "upstream" }

local Engine = {}
Engine.__index = Engine

function M.define(spec)
  return setmetatable(spec, Engine)
end

-- distros.engine.load("rke2") -> configurer | nil, why
function M.load(type_name)
  for _, t in ipairs(M.TYPES) do
    if t == type_name then return require("distros." .. t) end
  end
  return nil, string.format("unknown engine type %q (known: %s)", tostring(type_name), table.concat(M.TYPES, ", "))
end

-- Builtins only until the binary itself runs: no subshell, no `exit`, so host:probes can
-- run it in the batch's own shell (a dry run sends this to every host).
function Engine:version_probe()
  return string.format('cs_b=; for b in %s; do if [ -x "$b" ]; then cs_b=$b; break; fi; done\n'
    .. 'if [ -n "$cs_b" ]; then "$cs_b" --version; elif command -v %s >/dev/null 2>&1; then %s --version; '
    .. 'else false; fi', shell.words(table.unpack(self.binary_paths)), shell.words(self.binary),
    shell.words(self.binary))
end

local VERSION = "v%d+%.%d+%.%d+[%w.+-]*"

function Engine:parse_version(out)
  out = out or ""
  local v = out:match(self.version_prefix:gsub("%p", "%%%0") .. "%s+(" .. VERSION .. ")")
    or out:match("(" .. VERSION .. ")")
  return v
end

function Engine:service(role)
  local s = self.services[role]
  if not s then error(string.format("%s: no service for role %s", self.name, tostring(role)), 2) end
  return s
end

-- os: the host's OS configurer (host.os); without one, systemd is assumed.
function Engine:service_active_probe(role, os)
  local name = self:service(role)
  if os then
    local cmd = os:service("is_active", name)
    if cmd then return cmd end
  end
  return shell.fmt("systemctl is-active --quiet %s", name)
end

-- args: a list of words, each quoted; a string would be an unaudited shell fragment.
function Engine:kubectl(args)
  if type(args) ~= "table" then error("kubectl: args must be a list of words", 2) end
  local cmd = shell.fmt("env KUBECONFIG=%s ", self.kubeconfig) .. shell.words(table.unpack(self.kubectl_words))
  if #args > 0 then cmd = cmd .. " " .. shell.words(table.unpack(args)) end
  return cmd
end

-- ---- versions ------------------------------------------------------------------------

-- "1.35.4-rke2r1", "v1.35.4+rke2r1" -> {1, 35, 4, pre = {"rke2r1"}} | nil
-- Packages write "-", hosts "+": both become a pre-release after "+" -> "-" (engines.md §1).
function M.parse(v)
  if type(v) ~= "string" then return nil end
  local s = v:match("^%s*v?(.-)%s*$"):gsub("%+", "-")
  local a, b, c, rest = s:match("^(%d+)%.(%d+)%.(%d+)(.*)$")
  if not a then return nil end
  local pre = {}
  if rest ~= "" then
    local p = rest:match("^%-(.+)$")
    if not p then return nil end
    for id in p:gmatch("[^.]+") do pre[#pre + 1] = id end
  end
  return { tonumber(a), tonumber(b), tonumber(c), pre = pre }
end

-- Identifiers compare as semver's, with one deliberate change: digit runs inside an
-- alphanumeric identifier compare as numbers, so rke2r10 is newer than rke2r9 (plain
-- semver orders them as text and would call r10 a downgrade from r9).
local function chunks(id)
  local out = {}
  for digits, letters in id:gmatch("(%d*)(%D*)") do
    if digits ~= "" then out[#out + 1] = tonumber(digits) end
    if letters ~= "" then out[#out + 1] = letters end
  end
  return out
end

local function compare_ident(x, y)
  local cx, cy = chunks(x), chunks(y)
  for i = 1, math.max(#cx, #cy) do
    local a, b = cx[i], cy[i]
    if a == nil then return -1 end
    if b == nil then return 1 end
    if type(a) ~= type(b) then return type(a) == "number" and -1 or 1 end
    if a ~= b then return a < b and -1 or 1 end
  end
  return 0
end

-- compare_versions(a, b) -> -1 (a older), 0, 1 (a newer) | nil, why
function M.compare_versions(a, b)
  local x, y = M.parse(a), M.parse(b)
  if not x then return nil, string.format("cannot read version %q", tostring(a)) end
  if not y then return nil, string.format("cannot read version %q", tostring(b)) end
  for i = 1, 3 do
    if x[i] ~= y[i] then return x[i] < y[i] and -1 or 1 end
  end
  -- a release is newer than any of its pre-releases
  if #x.pre == 0 or #y.pre == 0 then
    if #x.pre == #y.pre then return 0 end
    return #x.pre == 0 and 1 or -1
  end
  for i = 1, math.max(#x.pre, #y.pre) do
    if x.pre[i] == nil then return -1 end
    if y.pre[i] == nil then return 1 end
    local c = compare_ident(x.pre[i], y.pre[i])
    if c ~= 0 then return c end
  end
  return 0
end
Engine.compare_versions = function(_, a, b) return M.compare_versions(a, b) end

-- What a host needs against the package: "install" | "upgrade" | "up to date" | "downgrade"
-- | nil, why
function M.judge(installed, package_version)
  if not installed then return "install" end
  local c, why = M.compare_versions(installed, package_version)
  if not c then return nil, why end
  if c < 0 then return "upgrade" elseif c == 0 then return "up to date" end
  return "downgrade"
end

-- Minor versions an upgrade crosses (kubeadm refuses to skip one).
function M.minor_jump(installed, package_version)
  local x, y = M.parse(installed), M.parse(package_version)
  if not x or not y or x[1] ~= y[1] then return 0 end
  return y[2] - x[2]
end

M.Engine = Engine
return M
