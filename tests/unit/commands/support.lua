-- tests/unit/commands/support.lua: runs cli.main in-process with captured output for command specs.
local cli = require "cargoship.cli"
local util = require "cargoship.util"

local M = {}

M.capture = require "unit.capture"

function M.temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. util.quote(path)))
  return path
end

function M.remove_tree(path)
  os.execute("rm -rf " .. util.quote(path))
end

-- cli.main(argv) with env given as a table; returns code, stdout text, stderr text.
function M.run(argv, env)
  local out, err = M.capture(), M.capture()
  env = env or {}
  local code = cli.main(argv, {
    env = function(name) return env[name] end,
    stdout = out, stderr = err,
    isatty = { stdin = false, stdout = false, stderr = false },
    now = function() return 1700000000 end,
    pid = 4242,
  })
  return code, out.text(), err.text()
end

-- Replaces the cluster-file loader with `fake` for the duration of fn.
function M.with_config(fake, fn)
  local saved = package.loaded["cargoship.config"]
  package.loaded["cargoship.config"] = fake
  local ok, e = pcall(fn)
  package.loaded["cargoship.config"] = saved
  if not ok then error(e, 0) end
end

-- A loader stand-in: files named "bad*" fail with `errors`, the rest load as `cluster`.
function M.fake_config(cluster, errors)
  return {
    load = function(path)
      if path:match("bad[^/]*$") then return nil, errors end
      return cluster
    end,
    format_errors = function(list)
      local out = {}
      for i, e in ipairs(list) do
        out[i] = string.format("%s:%d:%d: %s: %s", e.file, e.line, e.col, e.path, e.message)
      end
      return table.concat(out, "\n")
    end,
  }
end

return M
