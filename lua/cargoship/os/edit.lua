-- cargoship.os.edit: pure builders for the files prepare phases manage (sysctl, environment, modules, hosts).
--
-- Each takes what the host has now (file content as read, nil when absent) and what is
-- wanted, and returns the new content; running one again on its own result changes
-- nothing (idempotent), and lines it does not own are kept byte for byte.
--   sysctl(values) -> content                      (sorted "key = value" lines under a header)
--   environment(current, vars) -> content | nil, why
--   module_file(name) -> content | nil, why        (one modules-load.d file per module)
--   hosts(current, nodes) -> content | nil, why    (a marked block of "<address> <fqdn> <short>")
--   include_line(current, path) -> content          (nftables boot file: the include once)
local M = {}

M.SYSCTL_HEADER = "# Written by cargoship from the distro package (spec.config.os.sysctl); edits here are replaced.\n"
M.HOSTS_BEGIN = "# BEGIN cargoship: cluster nodes (managed block, edits inside are replaced)"
M.HOSTS_END = "# END cargoship"

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function lines_of(text)
  local out = {}
  for line in (text or ""):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  local tail = (text or ""):match("([^\n]+)$")
  if tail then out[#out + 1] = tail end
  return out
end

local function join(lines)
  if #lines == 0 then return "" end
  return table.concat(lines, "\n") .. "\n"
end

function M.sysctl(values)
  local out = { M.SYSCTL_HEADER }
  for _, k in ipairs(sorted_keys(values)) do
    local v = tostring(values[k])
    if not k:match("^[%w_][%w._/-]*$") then error(string.format("sysctl key %q is not a sysctl name", k), 2) end
    if v:find("[\n\r]") then error(string.format("sysctl %s: a value cannot span lines", k), 2) end
    out[#out + 1] = k .. " = " .. v .. "\n"
  end
  return table.concat(out)
end

-- /etc/environment is read by pam_env (which strips one pair of quotes and expands
-- nothing) and is sourced by shell scripts too: single quotes mean the same to both.
local function env_value(k, v)
  v = tostring(v)
  if v:match("^[%w%%+,./:=@_-]*$") then return v end
  if v:find("[\n\r]") then return nil, string.format("environment %s: a value cannot span lines", k) end
  if not v:find("'", 1, true) then return "'" .. v .. "'" end
  if not v:find('["$`\\]') then return '"' .. v .. '"' end
  return nil, string.format("environment %s: a value with both ' and one of \" $ ` \\ has no spelling that"
    .. " pam_env and a shell read alike", k)
end

function M.environment(current, vars)
  local want, done = {}, {}
  for _, k in ipairs(sorted_keys(vars)) do
    if not k:match("^[%a_][%w_]*$") then return nil, string.format("environment name %q is not a variable name", k) end
    local v, why = env_value(k, vars[k])
    if not v then return nil, why end
    want[k] = k .. "=" .. v
  end
  local out = {}
  for _, line in ipairs(lines_of(current)) do
    local export, k = line:match("^%s*(export%s+)([%a_][%w_]*)=")
    if not k then k = line:match("^%s*([%a_][%w_]*)=") end
    if k and want[k] then
      -- later duplicates would win over ours: drop them; an `export ` prefix is kept
      if not done[k] then out[#out + 1] = (export or "") .. want[k]; done[k] = true end
    else
      out[#out + 1] = line
    end
  end
  for _, k in ipairs(sorted_keys(want)) do
    if not done[k] then out[#out + 1] = want[k] end
  end
  return join(out)
end

function M.module_file(name)
  if type(name) ~= "string" or not name:match("^[%w_-]+$") then
    return nil, string.format("kernel module %q is not a module name", tostring(name))
  end
  return name .. "\n"
end

local function short_name(n)
  local h = n.hostname or n.fqdn or n.name
  return h and h:match("^[^.]+")
end

-- nodes: {{address, fqdn?, hostname?, name?}..} in the order the block lists them; each line
-- names the FQDN (else the hostname), the short name, then the node name when it differs.
local function host_lines(nodes)
  local out = {}
  for _, n in ipairs(nodes or {}) do
    if type(n.address) ~= "string" or not n.address:match("^[%x.:]+$") then
      return nil, string.format("hosts entry %s: %q is not an IP address", tostring(n.name), tostring(n.address))
    end
    local names, seen = {}, {}
    -- the node name too, when the cluster file's `hostname` makes it differ from the machine's
    for _, h in ipairs({ n.fqdn or n.hostname or n.name, short_name(n), n.name }) do
      if h and not seen[h] then
        if not h:match("^[%w][%w.-]*$") then return nil, string.format("hosts entry %q is not a host name", h) end
        names[#names + 1] = h
        seen[h] = true
      end
    end
    if #names == 0 then return nil, "hosts entry " .. n.address .. " has no name" end
    out[#out + 1] = n.address .. " " .. table.concat(names, " ")
  end
  return out
end

function M.hosts(current, nodes)
  local block, why = host_lines(nodes)
  if not block then return nil, why end
  local out, inside, placed = {}, false, false
  local function place()
    if placed or #block == 0 then placed = true; return end
    out[#out + 1] = M.HOSTS_BEGIN
    for _, l in ipairs(block) do out[#out + 1] = l end
    out[#out + 1] = M.HOSTS_END
    placed = true
  end
  for _, line in ipairs(lines_of(current)) do
    if line == M.HOSTS_BEGIN then
      if inside then return nil, "/etc/hosts: a cargoship block begins inside another" end
      inside = true
      place()
    elseif line == M.HOSTS_END and inside then
      inside = false
    elseif not inside then
      out[#out + 1] = line
    end
  end
  -- never guess where an unterminated block ends: the lines after it may be someone's
  if inside then return nil, "/etc/hosts: the cargoship block has no end marker; fix the file by hand" end
  place()
  return join(out)
end

function M.include_line(current, path)
  local line = string.format('include "%s"', path)
  for _, l in ipairs(lines_of(current)) do
    if l:match("^%s*(.-)%s*$") == line then return current end
  end
  local out = lines_of(current)
  out[#out + 1] = line
  return join(out)
end

return M
