-- Shared helpers for the config specs: build small cluster files and load them.
local config = require "cargoship.config"

local M = {}

M.config = config

local function no_env() return nil end

function M.fixture(name)
  local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
  return src .. "/tests/fixtures/clusters/" .. name
end

function M.example(name)
  local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
  return src .. "/contrib/examples/" .. name
end

local function indent(text, first, rest)
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    out[#out + 1] = (n == 1 and first or rest) .. line
  end
  return table.concat(out, "\n")
end

-- A whole cluster document. parts.config: extra lines under spec.config (no indent);
-- parts.hosts: list of host bodies (no indent, no "- "), default one ssh controller;
-- parts.loadbalancer = false drops it; parts.head replaces everything before spec.
function M.doc(parts)
  parts = parts or {}
  local out = {}
  out[#out + 1] = parts.head or "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: t"
  out[#out + 1] = "spec:\n  config:"
  if parts.loadbalancer ~= false then
    out[#out + 1] = "    loadbalancer: " .. (parts.loadbalancer or "lb.example.internal")
  end
  if parts.config then out[#out + 1] = indent(parts.config, "    ", "    ") end
  out[#out + 1] = "  hosts:"
  for _, h in ipairs(parts.hosts or { "role: controller\nssh: {address: 192.0.2.10}" }) do
    out[#out + 1] = indent(h, "    - ", "      ")
  end
  return table.concat(out, "\n") .. "\n"
end

-- One controller with `body` added to it (body: extra host lines).
function M.host_doc(body, config_lines)
  return M.doc({ config = config_lines,
                 hosts = { "role: controller\n" .. body } })
end

function M.load(text, env)
  -- an env given means the spec is about ${VAR}: that needs --expand-env's opt-in
  return config.load_string(text, "test.yaml", { env = env or no_env, expand_env = env ~= nil })
end

-- The list of error texts (empty when the document loads).
function M.errors(text, env)
  local c, errs = M.load(text, env)
  if c then return {} end
  local out = {}
  for i, e in ipairs(errs) do out[i] = e.text end
  return out
end

-- Asserts the document loads and returns the cluster.
function M.ok(text, env)
  local c, errs = M.load(text, env)
  if not c then error("expected the document to load, got:\n" .. config.format_errors(errs), 2) end
  return c
end

-- Asserts some error text contains `needle` (plain find) and returns all texts.
function M.fails(text, needle, env)
  local errs = M.errors(text, env)
  for _, e in ipairs(errs) do
    if e:find(needle, 1, true) then return errs end
  end
  error(string.format("expected an error containing %q, got:\n%s\n--- document:\n%s", needle,
    #errs == 0 and "(no errors)" or table.concat(errs, "\n"), text), 2)
end

return M
