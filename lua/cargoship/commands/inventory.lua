-- cargoship.commands.inventory: `inventory from-ansible` turns an Ansible inventory (INI or YAML)
-- into a ZarfCluster file: hosts, groups to roles, ansible_host/user/port/private key.
local args = require "cargoship.cli.args"
local json = require "cargoship.json"

local M = {}

M.name = "inventory"
M.summary = "convert an Ansible inventory (INI or YAML) to a cluster file"
M.usage = [[
Usage: cargoship inventory from-ansible INVENTORY [--name NAME] [--loadbalancer HOST]
         [--controllers GROUP] [--workers GROUP] [-o OUT]

Reads the Ansible inventory INVENTORY (INI, or YAML with all:/hosts:/children:) and writes a
ZarfCluster file (stdout, or OUT). Every host becomes one spec.hosts entry with an ssh block:
address from ansible_host (else the inventory name), user from ansible_user, port from
ansible_port, keyPath from ansible_ssh_private_key_file (host variables win over group
variables, a child group's over its parent's, as Ansible orders them). A host whose inventory
name is a DNS name and differs from its address keeps it as hostname.

Roles come from groups: a host in the --controllers group (default: the first of
controllers, controller, control_plane, control, masters, master, servers, server that
exists) is a controller; every other host is a worker (--workers GROUP limits workers to that
group, and a host in neither is an error). Groups named like Kubernetes labels become the
host's profile only when a host is in exactly one other group; nothing else is guessed.
--loadbalancer defaults to the first controller's address. Check the result with
cargoship validate.]]
M.options = {
  { long = "name", value = "NAME", check = args.checks.nonempty, default = "cluster",
    help = "metadata.name of the cluster" },
  { long = "loadbalancer", value = "HOST", check = args.checks.nonempty,
    help = "spec.config.loadbalancer (default: the first controller's address)" },
  { long = "controllers", value = "GROUP", check = args.checks.nonempty, help = "the controllers' group" },
  { long = "workers", value = "GROUP", check = args.checks.nonempty, help = "the workers' group" },
  { long = "output", short = "o", value = "OUT", check = args.checks.nonempty, help = "write to OUT" },
}
M.arguments = { { name = "ACTION", choices = { "from-ansible" } }, { name = "INVENTORY" } }

local CONTROLLER_GROUPS = { "controllers", "controller", "control_plane", "control", "masters", "master",
  "servers", "server" }

-- Inventory model: hosts (names in order), groups[name] = {hosts = {name = true}, children = {..},
-- vars = {}}, host_vars[name] = {}.
local function new_inventory()
  local inv = { order = {}, seen = {}, groups = {}, host_vars = {} }
  function inv.group(name)
    local g = inv.groups[name]
    if not g then g = { name = name, hosts = {}, children = {}, vars = {}, parents = {} }; inv.groups[name] = g end
    return g
  end
  function inv.host(name)
    if not inv.seen[name] then
      inv.seen[name] = true
      inv.order[#inv.order + 1] = name
      inv.host_vars[name] = {}
    end
    return inv.host_vars[name]
  end
  return inv
end

-- Ansible INI values: key=value words, a value may be quoted.
local function ini_vars(rest, out, where)
  local i, n = 1, #rest
  while i <= n do
    local s = rest:find("%S", i)
    if not s or rest:sub(s, s) == "#" then break end
    local key, e = rest:match("^([%w_]+)=()", s)
    if not key then return nil, where .. ": expected key=value, got " .. rest:sub(s) end
    local q = rest:sub(e, e)
    local v
    if q == '"' or q == "'" then
      local close = rest:find(q, e + 1, true)
      if not close then return nil, where .. ": unterminated quote" end
      v, i = rest:sub(e + 1, close - 1), close + 1
    else
      local stop = rest:find("%s", e) or n + 1
      v, i = rest:sub(e, stop - 1), stop
    end
    out[key] = v
  end
  return true
end

-- Ansible host patterns with a numeric range, web[01:03]: expanded to every name.
local function expand_range(name)
  local pre, a, b, post = name:match("^(.-)%[(%d+):(%d+)%](.*)$")
  if not pre then return { name } end
  local out, width = {}, #a
  for k = tonumber(a), tonumber(b) do
    out[#out + 1] = pre .. (#a == #b and string.format("%0" .. width .. "d", k) or tostring(k)) .. post
  end
  return out
end

local function parse_ini(text, file)
  local inv = new_inventory()
  local section, kind = "ungrouped", "hosts"
  local lineno = 0
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do
    lineno = lineno + 1
    local where = file .. ":" .. lineno
    local t = line:match("^%s*(.-)%s*$")
    if t ~= "" and not t:match("^[#;]") then
      local head = t:match("^%[(.-)%]$")
      if head then
        local g, k = head:match("^(.-):(%a+)$")
        section, kind = g or head, k or "hosts"
        if kind ~= "hosts" and kind ~= "vars" and kind ~= "children" then
          return nil, where .. ": unknown section kind :" .. kind
        end
        inv.group(section)
      elseif kind == "vars" then
        local key, v = t:match("^([%w_]+)%s*=%s*(.-)$")
        if not key then return nil, where .. ": expected key=value" end
        inv.group(section).vars[key] = v:match('^"(.*)"$') or v:match("^'(.*)'$") or v
      elseif kind == "children" then
        local child = inv.group(t)
        inv.group(section).children[#inv.group(section).children + 1] = t
        child.parents[#child.parents + 1] = section
      else
        local name, rest = t:match("^(%S+)(.*)$")
        local vars = {}
        local ok, err = ini_vars(rest, vars, where)
        if not ok then return nil, err end
        for _, h in ipairs(expand_range(name)) do
          local hv = inv.host(h)
          for k, v in pairs(vars) do hv[k] = v end
          inv.group(section).hosts[h] = true
        end
      end
    end
  end
  return inv
end

local function scalar_text(v)
  if type(v) == "string" then return v end
  if math.type(v) == "integer" or type(v) == "boolean" then return tostring(v) end
  return nil
end

local function parse_yaml(text, file)
  local yaml = require "cargoship.yaml"
  local docs, err = yaml.load(text, file)
  if not docs then return nil, err end
  local root = docs[1]
  if type(root) ~= "table" then return nil, file .. ": expected a mapping of groups" end
  local inv = new_inventory()
  local function walk(name, body, parent)
    local g = inv.group(name)
    if parent then
      inv.group(parent).children[#inv.group(parent).children + 1] = name
      g.parents[#g.parents + 1] = parent
    end
    if type(body) ~= "table" or yaml.is_null(body) then return end
    if type(body.hosts) == "table" and not yaml.is_null(body.hosts) then
      local keys = {}
      for h in pairs(body.hosts) do keys[#keys + 1] = h end
      table.sort(keys, function(a, b)
        local la, ca = yaml.key_where(body.hosts, a)
        local lb, cb = yaml.key_where(body.hosts, b)
        if la and lb and la ~= lb then return la < lb end
        if la and lb and ca ~= cb then return ca < cb end
        return a < b
      end)
      for _, pattern in ipairs(keys) do
        local hv = body.hosts[pattern]
        for _, h in ipairs(expand_range(pattern)) do
          local vars = inv.host(h)
          if type(hv) == "table" and not yaml.is_null(hv) then
            for k, v in pairs(hv) do vars[k] = scalar_text(v) end
          end
          g.hosts[h] = true
        end
      end
    end
    if type(body.vars) == "table" then
      for k, v in pairs(body.vars) do g.vars[k] = scalar_text(v) end
    end
    if type(body.children) == "table" and not yaml.is_null(body.children) then
      for child, cbody in pairs(body.children) do walk(child, cbody, name) end
    end
  end
  for name, body in pairs(root) do walk(name, body, nil) end
  return inv
end

-- Groups a host belongs to, directly or through children, each once.
local function groups_of(inv, host)
  local out, seen = {}, {}
  local function up(gname)
    if seen[gname] then return end
    seen[gname] = true
    out[#out + 1] = gname
    for _, p in ipairs(inv.groups[gname].parents) do up(p) end
  end
  local direct = {}
  for gname, g in pairs(inv.groups) do if g.hosts[host] then direct[#direct + 1] = gname end end
  table.sort(direct)
  for _, gname in ipairs(direct) do up(gname) end
  return out, seen
end

-- Depth of a group below all (ancestors first, so children's vars win).
local function depth(inv, gname, seen)
  seen = seen or {}
  if seen[gname] then return 0 end
  seen[gname] = true
  local d = 0
  for _, p in ipairs(inv.groups[gname].parents) do d = math.max(d, depth(inv, p, seen) + 1) end
  return d
end

local function host_vars(inv, host)
  local groups = groups_of(inv, host)
  local sorted = {}
  for _, g in ipairs(groups) do sorted[#sorted + 1] = { name = g, d = depth(inv, g) } end
  if inv.groups.all then sorted[#sorted + 1] = { name = "all", d = -1 } end
  table.sort(sorted, function(a, b) if a.d ~= b.d then return a.d < b.d end return a.name < b.name end)
  local vars = {}
  for _, g in ipairs(sorted) do for k, v in pairs(inv.groups[g.name].vars) do vars[k] = v end end
  for k, v in pairs(inv.host_vars[host]) do vars[k] = v end
  return vars
end

local function q(s) return json.encode(s) end

-- The cluster file text for inv. -> text | nil, message
function M.convert(inv, o)
  local cgroup = o.controllers
  if not cgroup then
    for _, g in ipairs(CONTROLLER_GROUPS) do if inv.groups[g] then cgroup = g; break end end
  end
  if not cgroup or not inv.groups[cgroup] then
    return nil, "no controllers group" .. (cgroup and (" " .. cgroup) or "") .. ": name it with --controllers GROUP"
  end
  if o.workers and not inv.groups[o.workers] then return nil, "no group " .. o.workers end
  local hosts = {}
  for _, name in ipairs(inv.order) do
    local _, member = groups_of(inv, name)
    local role
    if member[cgroup] then role = "controller"
    elseif not o.workers or member[o.workers] then role = "worker" end
    if not role then return nil, "host " .. name .. " is in neither " .. cgroup .. " nor " .. o.workers end
    local v = host_vars(inv, name)
    local port = v.ansible_port or v.ansible_ssh_port
    if port and not port:match("^%d+$") then
      return nil, "host " .. name .. ": ansible_port " .. port .. " is no number"
    end
    hosts[#hosts + 1] = { name = name, role = role, address = v.ansible_host or v.ansible_ssh_host or name,
      user = v.ansible_user or v.ansible_ssh_user, port = port,
      key = v.ansible_ssh_private_key_file or v.ansible_private_key_file }
  end
  if #hosts == 0 then return nil, "the inventory has no hosts" end
  local lb = o.loadbalancer
  for _, h in ipairs(hosts) do if not lb and h.role == "controller" then lb = h.address end end
  local out = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: " .. q(o.name),
    "spec:", "  config:", "    loadbalancer: " .. q(lb or hosts[1].address), "  hosts:" }
  for _, h in ipairs(hosts) do
    out[#out + 1] = "    - role: " .. h.role
    if h.name ~= h.address and require("cargoship.config.net").is_node_name(h.name) then
      out[#out + 1] = "      hostname: " .. q(h.name)
    end
    out[#out + 1] = "      ssh:"
    out[#out + 1] = "        address: " .. q(h.address)
    if h.user then out[#out + 1] = "        user: " .. q(h.user) end
    if h.port then out[#out + 1] = "        port: " .. h.port end
    if h.key then out[#out + 1] = "        keyPath: " .. q(h.key) end
  end
  return table.concat(out, "\n") .. "\n"
end

function M.parse(text, file)
  -- YAML inventories are mappings of groups; INI ones start with [section] or a host line
  local first = text:match("^%s*([^\n]*)")
  if first:match("^%-%-%-") or first:match("^[%w_.-]+:%s*$") or first:match("^[%w_.-]+:%s*#") then
    return parse_yaml(text, file)
  end
  return parse_ini(text, file)
end

function M.run(ctx, a)
  local action, path = a.positional[1], a.positional[2]
  if action ~= "from-ansible" then
    ctx.stderr:write("cargoship inventory: unknown action '", tostring(action), "': expected from-ansible\n")
    return ctx.exit.usage
  end
  local f, err = io.open(path, "rb")
  if not f then
    ctx.stderr:write("cargoship inventory: ", err, "\n")
    return ctx.exit.failure
  end
  local text = f:read("a")
  f:close()
  local inv, perr = M.parse(text, path)
  if not inv then
    ctx.stderr:write("cargoship inventory: ", perr, "\n")
    return ctx.exit.failure
  end
  local out, cerr = M.convert(inv, a.options)
  if not out then
    ctx.stderr:write("cargoship inventory: ", path, ": ", cerr, "\n")
    return ctx.exit.failure
  end
  if a.options.output then
    local w, werr = io.open(a.options.output, "wb")
    if not w then
      ctx.stderr:write("cargoship inventory: ", werr, "\n")
      return ctx.exit.failure
    end
    w:write(out)
    w:close()
  else
    ctx.stdout:write(out)
  end
  return ctx.exit.ok
end

return M
