-- cargoship.pipeline.custom.api: what a custom phase may touch of hosts, the context and the libraries, listed once.
--
-- The sandbox (custom/sandbox.lua) builds the libraries from this table, the views
-- (custom/views.lua) expose exactly these fields and methods, and docs/phases.md ("The
-- context", "A host") documents the same names: tests/unit/pipeline/custom_api_spec.lua
-- holds the three to this list. Adding to the API is adding a name here (and a row there).
local M = {}

M.host = {
  -- read straight through from the Host
  fields = { "name", "role", "index", "facts", "config", "os", "log", "dry_run" },
  -- methods that only read: a dry run lets them through
  reads = { "probe", "probes", "read_file", "exists", "is_controller" },
  -- methods that change the host: a dry run refuses them
  writes = { "run", "check", "write_file", "upload", "remove" },
}

M.ctx = {
  -- read straight through from the Context
  fields = { "cluster", "options", "dry_run", "state", "engine_type", "engine_running", "run_id", "log",
    "env", "distro" },
  -- fields whose hosts the phase sees as views: hosts (a list), leader (one host or nil)
  host_fields = { "hosts", "leader" },
  -- methods, each taking and giving host views where the Context's take hosts
  methods = { "each", "fail", "leave", "planned", "apply", "wait_until", "sleep", "random", "leader_nodes" },
}

-- The libraries of the sandbox beside Lua's safe standard ones: name -> the functions taken
-- from the module of that name (cargoship.shell, cargoship.json, cargoship.action); json's
-- decode is the sandbox's own (cjson's null and floats made plain).
M.libraries = {
  shell = { "quote", "words", "fmt" },
  json = { "encode", "decode", "null", "array" },
  action = { "run", "write", "upload", "remove", "service", "kube", "step", "note" },
}

-- Every host method, reads then writes.
function M.host_methods()
  local out = {}
  for _, list in ipairs { M.host.reads, M.host.writes } do
    for _, name in ipairs(list) do out[#out + 1] = name end
  end
  return out
end

-- A set of a list's names.
function M.set(list)
  local s = {}
  for _, name in ipairs(list) do s[name] = true end
  return s
end

return M
