-- cargoship.os: picks a host's OS configurer from its os-release through an ordered matcher list.
--
-- Matching: the host's ID against every configurer's ids first; then each ID_LIKE word in
-- the order os-release gives them (closest relative first) against the same list. The
-- list is ordered most specific first, so a derivative's own configurer wins over its
-- parent's. A host's `os` setting overrides detection (a configurer id or an os-release ID).
local M = {}

-- Most specific first; each entry is a module under cargoship.os.
M.MATCHERS = { "ubuntu", "debian", "rocky", "alma", "centos", "oracle", "fedora", "rhel",
               "opensuse", "sles" }

function M.configurers()
  local list = {}
  for i, id in ipairs(M.MATCHERS) do list[i] = require("cargoship.os." .. id) end
  return list
end

-- os-release is a shell-compatible KEY=value file; values may be single- or double-quoted,
-- and inside double quotes \" \\ \$ \` are escapes (os-release(5)).
function M.parse_os_release(text)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local k, v = line:match("^%s*([%w_]+)=(.*)$")
    if k then
      v = v:gsub("%s+$", "")
      local dq = v:match('^"(.*)"$')
      local sq = v:match("^'(.*)'$")
      if dq then v = dq:gsub('\\([\\"$`])', "%1")
      elseif sq then v = sq end
      out[k] = v
    end
  end
  return out
end

-- os-release fields -> host.facts.os
function M.os_facts(rel)
  local like = {}
  for w in (rel.ID_LIKE or ""):gmatch("%S+") do like[#like + 1] = w:lower() end
  return {
    id = (rel.ID or "linux"):lower(), -- os-release(5): absent ID means "linux"
    version_id = rel.VERSION_ID,
    pretty_name = rel.PRETTY_NAME or rel.NAME or "Linux",
    name = rel.NAME,
    like = like,
  }
end

local ARCH = {
  x86_64 = "amd64", amd64 = "amd64",
  aarch64 = "arm64", arm64 = "arm64", aarch64_be = "arm64be",
  riscv64 = "riscv64",
  armv7l = "arm", armv6l = "arm", armhf = "arm",
  i386 = "386", i486 = "386", i586 = "386", i686 = "386",
  ppc64le = "ppc64le", s390x = "s390x",
}

-- uname -m -> the architecture name packages and images use (GOARCH style).
function M.normalize_arch(machine)
  machine = (machine or ""):match("^%s*(.-)%s*$")
  return ARCH[machine] or machine
end

local function claims(cfg, id)
  for _, known in ipairs(cfg.ids) do
    if known == id then return true end
  end
  return false
end

-- M.match(os_facts) -> configurer class, how | nil
function M.match(f)
  local list = M.configurers()
  for _, cfg in ipairs(list) do
    if claims(cfg, f.id) then return cfg, "ID " .. f.id end
  end
  for _, like in ipairs(f.like or {}) do
    for _, cfg in ipairs(list) do
      if claims(cfg, like) then return cfg, "ID_LIKE " .. like end
    end
  end
  return nil
end

-- A configurer by its id ("rhel") or any os-release ID it claims ("almalinux").
function M.by_name(name)
  name = tostring(name):lower()
  for _, cfg in ipairs(M.configurers()) do
    if cfg.id == name or claims(cfg, name) then return cfg end
  end
  return nil
end

local function known_list()
  local t = {}
  for _, cfg in ipairs(M.configurers()) do t[#t + 1] = cfg.id end
  return table.concat(t, ", ")
end

-- M.select(os_facts, override, instance_opts) -> configurer instance, how | nil, why
function M.select(f, override, o)
  o = o or {}
  o.version_id = o.version_id or f.version_id
  if override ~= nil then
    local cfg = M.by_name(override)
    if not cfg then
      return nil, string.format("os %q is not a known OS configurer (known: %s)", tostring(override),
        known_list())
    end
    return cfg:new(o), string.format("os override %q", tostring(override))
  end
  local cfg, how = M.match(f)
  if not cfg then
    return nil, string.format(
      "unsupported operating system: ID %q, PRETTY_NAME %q%s; supported: %s. If it is compatible "
        .. "with one of them, set `os: <name>` on the host to use that one's configurer",
      f.id, f.pretty_name, #f.like > 0 and (", ID_LIKE " .. table.concat(f.like, " ")) or "",
      known_list())
  end
  return cfg:new(o), how
end

return M
