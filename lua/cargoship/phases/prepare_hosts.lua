-- Phase "Prepare hosts": /etc/environment, one sysctl drop-in, kernel modules persisted and loaded now.
--
-- What each host gets (distro-package.md §7, cluster-yaml.md §4.6):
--   environment  the host's `environment` with the package's spec.config.os.env over it (the
--                package is applied afterwards in the Go tool, so it wins), upserted into
--                /etc/environment; then a step reconnects the session, so the phases after
--                this one run in a login that read the new file (pam_env)
--   sysctl       spec.config.os.sysctl as /etc/sysctl.d/99-cargoship.conf, written atomically
--                and loaded with `sysctl -p` of that file
--   modules      spec.config.os.kernel: /etc/modules-load.d/<m>.conf (boot) and modprobe now;
--                the load names every module that failed (the Go tool only persists and reboots)
--   record       first, what it changes in either, for reset (cargoship.os.prepare_record)
-- assess reads all of it in one round trip and returns only what differs: the file's bytes,
-- and the live values (a sysctl the kernel holds differently is loaded again, a module the
-- kernel lacks is loaded), so a converged host has nothing to do.
local action = require "cargoship.action"
local linux = require "cargoship.os.linux"
local os_config = require "cargoship.package.os_config"
local record = require "cargoship.os.prepare_record"
local shell = require "cargoship.shell"

local M = {
  id = "prepare_hosts",
  title = "Prepare hosts",
  reads = { "connection", "os", "facts" },
  creates = { "environment", "sysctl", "kernel_modules" },
}

local ABSENT = 44

local function cat(path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- What the host should have: {env = {..}, sysctl = {..}, kernel = {..}}.
function M.wanted(ctx, host)
  local pkg = os_config.of(ctx.distro)
  local env = {}
  for k, v in pairs(host.config.environment or {}) do env[k] = tostring(v) end
  for k, v in pairs(pkg.env) do env[k] = v end
  return { env = env, sysctl = pkg.sysctl, kernel = pkg.kernel }
end

-- The probes of one host: files as they are, live sysctl values, modules the kernel has.
function M.probes(paths, want)
  local p = {}
  if next(want.env) then p.environment, p.env_record = cat(paths.environment), cat(record.ENV) end
  if next(want.sysctl) then
    p.sysctl_dir = shell.fmt("test -d %s", paths.sysctl_dir)
    p.sysctl_file = cat(paths.sysctl_dir .. "/99-cargoship.conf")
    -- one line per key: "key<TAB>value", tabs of multi-valued keys turned to spaces
    p.sysctl_live = "for k in " .. shell.words(table.unpack(sorted_keys(want.sysctl)))
      .. [[; do v=$(sysctl -n -- "$k" 2>/dev/null | tr '\t\n' '  ') && printf '%s\t%s\n' "$k" "$v"; done; true]]
  end
  if #want.kernel > 0 then
    p.modules_dir, p.modules_record = shell.fmt("test -d %s", paths.modules_load_dir), cat(record.MODULES)
  end
  for i, m in ipairs(want.kernel) do
    p["module_file_" .. i] = cat(paths.modules_load_dir .. "/" .. m .. ".conf")
    p["module_loaded_" .. i] = shell.fmt("m=%s; [ -d /sys/module/$m ] || grep -q \"/$m.ko\" "
      .. "\"/lib/modules/$(uname -r)/modules.builtin\" 2>/dev/null", (m:gsub("-", "_")))
  end
  return p
end

local function norm(v)
  return (tostring(v):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

-- A drop-in directory the host lacks (a minimal or runit host has no systemd ones) is made
-- first, 0755 as the distributions ship them, only when a file is to go in it.
local function mkdir(out, probe, dir, needed)
  if needed and probe and probe.code ~= 0 then
    out[#out + 1] = action.run { cmd = shell.fmt("mkdir -p -m 0755 %s", dir), say = "create " .. dir }
  end
end

local function add(out, list) for _, a in ipairs(list) do out[#out + 1] = a end end

-- Probe answers -> records | nil, why. Pure: the fixture specs feed it answers.
function M.decide(cfg, want, res)
  local out = {}
  local function file(key)
    local r = res[key]
    if not r or r.code == ABSENT then return nil end
    if r.code ~= 0 then return nil, key .. ": cannot read (exit " .. tostring(r.code) .. ")" end
    return r.out
  end
  if next(want.env) then
    local current, err = file("environment")
    if err then return nil, err end
    local acts, why = cfg:environment_actions(current, want.env)
    if not acts then return nil, why end
    if #acts > 0 then  -- one write: the record of what it changes first
      local old, rerr = file("env_record")
      if rerr then return nil, rerr end
      add(out, record.env_actions(old, current, acts[1].content))
      add(out, { acts[1], action.step { name = "reconnect",
        say = "reconnect, so the next phases see the new environment" } })
    end
  end
  if next(want.sysctl) then
    local f = cfg:sysctl(want.sysctl)
    local current, err = file("sysctl_file")
    if err then return nil, err end
    local live = {}
    for k, v in ((res.sysctl_live or {}).out or ""):gmatch("([^\t\n]+)\t([^\n]*)") do live[k] = norm(v) end
    local stale = current ~= f.content
    for _, k in ipairs(sorted_keys(want.sysctl)) do
      if live[k] ~= norm(want.sysctl[k]) then stale = true end
    end
    mkdir(out, res.sysctl_dir, cfg.paths.sysctl_dir, current ~= f.content)
    if current ~= f.content then out[#out + 1] = action.write { path = f.path, content = f.content, mode = f.mode } end
    if stale then out[#out + 1] = action.run { cmd = f.load, say = "load the sysctl settings of " .. f.path } end
  end
  if #want.kernel > 0 then
    local have, loaded = {}, {}
    for i, m in ipairs(want.kernel) do
      have[m] = file("module_file_" .. i)
      loaded[m] = res["module_loaded_" .. i] and res["module_loaded_" .. i].code == 0
    end
    local acts, why = cfg:modules_actions(want.kernel, have, loaded)
    if not acts then return nil, why end
    local old, rerr = file("modules_record")
    if rerr then return nil, rerr end
    add(out, record.modules_actions(old, want.kernel, have, res.modules_dir ~= nil and res.modules_dir.code ~= 0))
    mkdir(out, res.modules_dir, cfg.paths.modules_load_dir, acts[1] and acts[1].kind == "write")
    add(out, acts)
  end
  return out
end

function M.assess(ctx, host)
  local want = M.wanted(ctx, host)
  if not next(want.env) and not next(want.sysctl) and #want.kernel == 0 then return {} end
  local cfg = host.os or linux
  local res, err = host:probes(M.probes(cfg.paths, want))
  if not res then error(err, 0) end
  local acts, why = M.decide(cfg, want, res)
  if not acts then error(host.name .. ": " .. why, 0) end
  return acts
end

M.steps = {
  reconnect = function(_, host)
    local ok, err = host:reconnect()
    if not ok then return nil, host.name .. ": reconnect after writing /etc/environment: " .. tostring(err) end
    return true
  end,
}

return M
