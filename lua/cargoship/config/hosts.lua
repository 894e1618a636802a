-- cargoship.config.hosts: `spec.hosts` — connections, role, per-host settings, and the rules
-- that span hosts (a controller exists, no login or node name appears twice).
local check = require "cargoship.config.check"
local FIELDS = require "cargoship.config.fields"
local errors = require "cargoship.config.errors"
local firewall = require "cargoship.config.firewall"
local kube = require "cargoship.config.kube"
local net = require "cargoship.config.net"
local yaml = require "cargoship.yaml"

local M = {}

local quote, join, describe = errors.quote, errors.join, errors.describe

local ROLES = { "controller", "worker" }
M.ROLES = ROLES

local BELONGS_IN_SSH = "it belongs inside the ssh or openSSH block"
local HOST_HINTS = { address = BELONGS_IN_SSH, user = BELONGS_IN_SSH, port = BELONGS_IN_SSH,
  keyPath = BELONGS_IN_SSH, labels = "it belongs inside engine", taints = "it belongs inside engine",
  ports = "it belongs inside host", firewall = "it belongs inside host" }

-- A jump chain longer than this is a loop made with YAML aliases, not a network.
local MAX_BASTION_DEPTH = 8

-- The longest name DNS can carry (RFC 1035 §3.1, as text without the final dot).
local MAX_ADDRESS = 253

local function address(ctx, block, bpath, strict)
  local a = check.string(ctx, block, "address", bpath, { required = true, word = true })
  if not a then return nil end
  local apath, why = join(bpath, "address"), nil
  if #a > MAX_ADDRESS then
    why = string.format("expected an IP address or hostname of at most %d characters (the DNS limit)",
      MAX_ADDRESS)
  elseif a:find("@", 1, true) then
    why = "expected an IP address or hostname without user (set user: instead)"
  elseif a:find("%s") then
    why = "expected an IP address or hostname"
  elseif strict and not net.is_host_or_ip(a) then
    -- Underscores are not RFC 1123 but resolve in practice, so they pass.
    if a:match("^[^:]+:%d+$") then why = "expected an IP address or hostname without port (set port: instead)"
    elseif not (a:match("^[%w_.-]+$") and not a:match("^[.-]") and not a:match("[.-]$")) then
      why = "expected an IP address or hostname"
    end
  end
  if why then
    ctx.errs:at_value(block, "address", apath, why .. ", got " .. describe(a))
    return nil
  end
  return a
end

local function options(ctx, block, bpath)
  local out = check.string_map(ctx, block, "options", bpath, function(k, v, m, vpath)
    if k == "" or k:find("[%s%c=]") then
      ctx.errs:at_key(m, k, vpath, "option names must not be empty or contain spaces, control "
        .. "characters or '=', got " .. quote(k))
      return nil
    end
    if v:find("[\r\n]") then
      ctx.errs:at_value(m, k, vpath, "option values must not contain newlines")
      return nil
    end
    local why = check.control_problem(v, true)
    if why then
      ctx.errs:at_value(m, k, vpath, "option values " .. why)
      return nil
    end
    return v
  end)
  return out or {}
end

-- parent[key] as an `ssh` block (bastions nest the same shape).
function M.ssh(ctx, parent, key, path, depth)
  local b = check.mapping(ctx, parent, key, path)
  if not b then return nil end
  local bpath = join(path, key)
  check.fields(ctx, b, bpath, FIELDS.ssh)
  local c = {
    kind = "ssh",
    address = address(ctx, b, bpath, true),
    user = check.string(ctx, b, "user", bpath, { blank_absent = true, word = true }) or "root",
    port = check.integer(ctx, b, "port", bpath, { min = 1, max = 65535 }) or 22,
    key_path = check.string(ctx, b, "keyPath", bpath, { blank_absent = true, word = true }),
    options = options(ctx, b, bpath),
  }
  if check.present(b, "bastion") then
    if depth >= MAX_BASTION_DEPTH then
      ctx.errs:at_value(b, "bastion", join(bpath, "bastion"),
        string.format("bastion chain deeper than %d", MAX_BASTION_DEPTH))
    else
      c.bastion = M.ssh(ctx, b, "bastion", bpath, depth + 1)
    end
  end
  return c
end

local function openssh(ctx, parent, path)
  local b = check.mapping(ctx, parent, "openSSH", path)
  if not b then return nil end
  local bpath = join(path, "openSSH")
  check.fields(ctx, b, bpath, FIELDS.openssh)
  -- user and port stay unset unless written: ssh_config decides them for openSSH.
  return {
    kind = "openssh",
    address = address(ctx, b, bpath, false),
    user = check.string(ctx, b, "user", bpath, { blank_absent = true, word = true }),
    port = check.integer(ctx, b, "port", bpath, { min = 1, max = 65535 }),
    key_path = check.string(ctx, b, "keyPath", bpath, { blank_absent = true, word = true }),
    config_path = check.string(ctx, b, "configPath", bpath, { blank_absent = true, word = true }),
    options = options(ctx, b, bpath),
    disable_multiplexing = check.boolean(ctx, b, "disableMultiplexing", bpath) or false,
  }
end

local function connection(ctx, h, hpath)
  if h.winRM ~= nil then
    ctx.errs:at_key(h, "winRM", join(hpath, "winRM"),
      "winRM connections are not supported (no Windows support); use ssh, openSSH or localhost")
  end
  -- localhost: true, or the block form localhost: {enabled: true}
  local local_flag
  if type(h.localhost) == "table" and errors.kind_of(h.localhost) == "mapping" then
    local lpath = join(hpath, "localhost")
    check.fields(ctx, h.localhost, lpath, FIELDS.localhost)
    local_flag = check.boolean(ctx, h.localhost, "enabled", lpath)
  else
    local_flag = check.boolean(ctx, h, "localhost", hpath)
  end
  local n, found = check.count_present(h, { "ssh", "openSSH" })
  if local_flag then n, found[#found + 1] = n + 1, "localhost" end
  if n > 1 then
    ctx.errs:at_node(h, hpath, string.format("expected exactly one of ssh, openSSH, localhost; got %s",
      check.quoted_list(found)))
  elseif n == 0 then
    -- The Go tool's validate passes such a host and only connecting fails; apply and exec
    -- refuse it before connecting anywhere (cargoship.config.unreachable).
    if h.winRM == nil and not ctx.errs:is_spoiled(h, "localhost") then
      ctx.warns:at_node(h, hpath, "no connection (ssh, openSSH or localhost: true): apply and exec "
        .. "refuse this host").level = "warn"
    end
    return nil
  end
  if found[1] == "ssh" then return M.ssh(ctx, h, "ssh", hpath, 0) end
  if found[1] == "openSSH" then return openssh(ctx, h, hpath) end
  return { kind = "localhost", options = {} }
end

-- Only a quoted string: YAML reads an unquoted 0644 as the number 420 and 644 as six
-- hundred and forty-four, and a number cannot say which was meant.
local function perm(ctx, f, fpath)
  if not check.present(f, "perm") or ctx.errs:is_spoiled(f, "perm") then return nil end
  local v = f.perm
  local s = type(v) == "string" and v:match("^%s*(.-)%s*$")
  if not s or not s:match("^[0-7][0-7][0-7][0-7]?$") then
    local hint = type(v) == "number" and " (quote it: YAML reads an unquoted mode as a number)" or ""
    ctx.errs:at_value(f, "perm", join(fpath, "perm"),
      "expected an octal mode as a string like \"0644\", got " .. describe(v) .. hint)
    return nil
  end
  if #s == 3 then s = "0" .. s end
  return s, tonumber(s, 8)
end

local function abs_path(ctx, f, key, fpath)
  local p = check.string(ctx, f, key, fpath, { blank_absent = true, word = true })
  if p and p:sub(1, 1) ~= "/" then
    ctx.errs:at_value(f, key, join(fpath, key), "expected an absolute path, got " .. describe(p))
    return nil
  end
  return p
end

local function files(ctx, h, hpath)
  local out = {}
  local list = check.sequence(ctx, h, "files", hpath)
  if not list then return out end
  local lpath, names = join(hpath, "files"), {}
  for i = 1, #list do
    local fpath = join(lpath, i)
    local f = check.mapping(ctx, list, i, lpath, { required = true })
    if f then
      check.fields(ctx, f, fpath, FIELDS.file)
      local e = {
        name = check.string(ctx, f, "name", fpath, { required = true, word = true }),
        src = check.string(ctx, f, "src", fpath, { blank_absent = true, word = true }),
        data = check.string(ctx, f, "data", fpath, { binary = true, secret = true }),
        dst = abs_path(ctx, f, "dst", fpath),
        dst_dir = abs_path(ctx, f, "dstDir", fpath),
        user = check.string(ctx, f, "user", fpath, { blank_absent = true, word = true }),
        group = check.string(ctx, f, "group", fpath, { blank_absent = true, word = true }),
      }
      e.perm, e.mode = perm(ctx, f, fpath)
      -- "" in src, dst or dstDir is Go's unset string; data "" is an empty file
      for _, pair in ipairs({ { "src", "data" }, { "dst", "dstDir" } }) do
        local n = check.count_given(f, pair)
        if pair[2] == "data" and f.data == "" then n = n + 1 end
        if n ~= 1 then
          ctx.errs:at_node(f, fpath, string.format("expected exactly one of %s, got %s",
            check.quoted_list(pair), n == 0 and "neither" or "both"))
        end
      end
      if e.name then
        if names[e.name] then
          ctx.errs:at_value(f, "name", join(fpath, "name"),
            string.format("duplicate file name %s (first at %s)", quote(e.name), names[e.name]))
        end
        names[e.name] = names[e.name] or fpath
      end
      out[#out + 1] = e
    end
  end
  return out
end

local function environment(ctx, h, hpath)
  local env = check.string_map(ctx, h, "environment", hpath, function(k, v, m, vpath)
    if k == "" or k:find("[=%c]") then
      ctx.errs:at_key(m, k, vpath,
        "environment variable names must not be empty or contain '=' or control characters, got "
        .. quote(k))
      return nil
    end
    if v:find("[\r\n]") then
      ctx.errs:at_value(m, k, vpath, "environment values must not contain newlines")
      return nil
    end
    return v
  end, { secret = true })
  return env or {}
end

local function decode_host(ctx, h, hpath, profiles)
  check.fields(ctx, h, hpath, FIELDS.host, HOST_HINTS)
  -- The Go code knows these role names internally; its schema (and we) refuse them.
  local combined = (h.role == "controller+worker" or h.role == "single")
    and " (combined roles are not supported)" or nil
  local host = {
    role = check.enum(ctx, h, "role", hpath, ROLES, { required = true, hint = combined }),
    connection = connection(ctx, h, hpath),
    environment = environment(ctx, h, hpath),
    files = files(ctx, h, hpath),
    engine = kube.engine(ctx, h, "engine", hpath),
    host = firewall.host(ctx, h, "host", hpath),
  }
  local profile = check.string(ctx, h, "profile", hpath, { blank_absent = true, word = true })
  if profile and not profiles[profile] then
    -- The Go tool accepts it: the name still becomes the node-role label, nothing is merged.
    local names = {}
    for n in pairs(profiles) do names[#names + 1] = n end
    table.sort(names)
    local msg = #names == 0
      and string.format("profile %s is not defined (spec.config.profiles defines none): it only names "
        .. "the node-role label; nothing is merged", quote(profile))
      or string.format("profile %s is not defined (defined: %s)%s: it only names the node-role label; "
        .. "nothing is merged", quote(profile), check.quoted_list(names), errors.did_you_mean(profile, names))
    ctx.warns:at_value(h, "profile", join(hpath, "profile"), msg).level = "verbose"
  end
  host.profile = profile
  local hostname = check.string(ctx, h, "hostname", hpath, { blank_absent = true })
  if hostname and not net.is_node_name(hostname) then
    ctx.errs:at_value(h, "hostname", join(hpath, "hostname"),
      "expected a lower-case DNS name (it becomes the node name), got " .. describe(hostname))
    hostname = nil
  end
  host.hostname = hostname
  local pa = check.string(ctx, h, "privateAddress", hpath, { blank_absent = true })
  if pa and not net.ip_family(pa) then
    ctx.errs:at_value(h, "privateAddress", join(hpath, "privateAddress"),
      "expected an IPv4 or IPv6 address, got " .. describe(pa))
    pa = nil
  end
  host.private_address = pa
  local pi = check.string(ctx, h, "privateInterface", hpath, { blank_absent = true })
  if pi and (#pi > 15 or pi:find("[%s%c/:]")) then
    ctx.errs:at_value(h, "privateInterface", join(hpath, "privateInterface"),
      "expected a network interface name (at most 15 characters, no spaces, '/' or ':'), got "
        .. describe(pi))
    pi = nil
  end
  host.private_interface = pi
  -- cargoship's own addition: names the OS configurer when /etc/os-release is unknown or wrong
  local os_id = check.string(ctx, h, "os", hpath, { blank_absent = true })
  if os_id and not os_id:match("^[a-z][a-z0-9._-]*$") then
    ctx.errs:at_value(h, "os", join(hpath, "os"),
      "expected an OS configurer or os-release ID such as \"rocky\" or \"ubuntu\", got " .. describe(os_id))
    os_id = nil
  end
  host.os = os_id
  return host
end

local function login_key(c)
  if not c then return nil end
  if c.kind == "localhost" then return "localhost" end
  if not c.address then return nil end
  return string.format("%s@%s:%s", c.user or "", c.address:lower(), c.port or "")
end

-- Two entries for one login would run every step twice on one machine, racing itself.
-- Reported at the second entry's address (or its localhost flag).
local function check_logins(ctx, hosts, nodes)
  local first = {}
  for i, host in ipairs(hosts) do
    local c, k = host.connection, login_key(host.connection)
    if k and first[k] then
      local msg = string.format("same login as %s (address, port and user must not repeat across hosts)",
        first[k])
      if c.kind == "localhost" then
        ctx.errs:at_value(nodes[i], "localhost", join(host.source.path, "localhost"), msg)
      else
        local block = c.kind == "ssh" and "ssh" or "openSSH"
        ctx.errs:at_value(nodes[i][block], "address", join(join(host.source.path, block), "address"), msg)
      end
    elseif k then
      first[k] = host.source.path
    end
  end
end

-- A role mistake already explains a missing controller; do not report it twice.
local function check_controller(ctx, hosts, nodes, spec, lpath)
  for i, host in ipairs(hosts) do
    if host.role == "controller" or (host.role == nil and nodes[i].role ~= nil) then return end
  end
  ctx.errs:at_value(spec, "hosts", lpath, "expected at least one host with role: controller")
end

local function unique(ctx, hosts, field, what, node_key, list)
  local first = {}
  for i, host in ipairs(hosts) do
    local v = host[field]
    if v ~= nil then
      if first[v] then
        ctx.errs:at_value(list[i], node_key, join(host.source.path, node_key),
          string.format("%s %s is also used by %s", what, quote(v), first[v]))
      else
        first[v] = host.source.path
      end
    end
  end
end

-- hostname if set, else the address; ":port", then "user@" are added only where needed to
-- tell hosts apart in log prefixes.
local function assign_names(hosts)
  local function base(h)
    if h.hostname then return h.hostname end
    local c = h.connection or {}
    return c.address or (c.kind == "localhost" and "localhost") or ("host" .. h.index)
  end
  local steps = {
    base,
    function(h)
      local c = h.connection or {}
      if h.hostname or not c.address then return base(h) end
      return string.format("%s:%s", c.address, c.port or 22)
    end,
    function(h)
      local c = h.connection or {}
      if h.hostname or not c.address then return base(h) end
      return string.format("%s@%s:%s", c.user or "", c.address, c.port or 22)
    end,
  }
  local names = {}
  for i, h in ipairs(hosts) do names[i] = base(h) end
  for step = 2, #steps do
    local count = {}
    for _, n in ipairs(names) do count[n] = (count[n] or 0) + 1 end
    local again = false
    for i, h in ipairs(hosts) do
      if count[names[i]] > 1 then names[i] = steps[step](h); again = true end
    end
    if not again then break end
  end
  for i, h in ipairs(hosts) do h.name = names[i] end
end

-- Decodes spec.hosts; `profiles` is the decoded profile map (for profile references).
function M.decode(ctx, spec, path, profiles)
  local out = {}
  local list = check.sequence(ctx, spec, "hosts", path, { required = true })
  if not list then return out end
  local lpath = join(path, "hosts")
  if #list == 0 then
    ctx.errs:at_value(spec, "hosts", lpath, "expected at least one host")
    return out
  end
  local nodes = {}
  for i = 1, #list do
    local hpath = join(lpath, i)
    local h = check.mapping(ctx, list, i, lpath, { required = true })
    if h then
      local host = decode_host(ctx, h, hpath, profiles)
      local line, col = yaml.where(h)
      host.source = { file = ctx.file, line = line, col = col, path = hpath }
      host.index = #out + 1
      out[host.index], nodes[host.index] = host, h
    end
  end
  check_controller(ctx, out, nodes, spec, lpath)
  check_logins(ctx, out, nodes)
  unique(ctx, out, "hostname", "hostname", "hostname", nodes)
  unique(ctx, out, "private_address", "private address", "privateAddress", nodes)
  assign_names(out)
  return out
end

return M
