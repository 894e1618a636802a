-- cargoship.subprocess: runs a local program to its end on the event loop, its stdin fed and both outputs read at once.
--
-- M.run(argv, opts) -> stdout, stderr, code, signal | nil, why, code
--   Runs in a task and yields while the program runs: other hosts' tasks go on meanwhile.
--   code is the exit status (128 + the signal's number when a signal ended it, signal then
--   naming it, "TERM"); a non-zero exit is no error here, the caller judges it.
--   opts.stdin: a string written to the program's stdin, which is then closed (default:
--     /dev/null). A program that exits without reading it all is not an error.
--   opts.on_stdout(chunk): called with each piece of stdout as it arrives, instead of
--     collecting it (stdout is then returned as ""). It must not wait.
--   opts.on_stderr(chunk): the same for stderr (returned as "").
--   opts.stderr = "stdout": stderr merged into stdout (stderr is then returned as "").
--   opts.env, opts.clear_env, opts.cwd: as proc.spawn (env is laid over ours).
--   opts.timeout: seconds for the whole run; past it the process group is killed, and the
--     result is nil, "<program>: timed out after N s", "timeout".
--   A program that does not exist: nil, "<program>: spawn: ...", "missing".
--   If on_stdout raises or the task is cancelled, the process group is killed and reaped
--   and the error goes on.
local loop = require "cargoship.loop"
local proc = require "cargoship.proc"

local M = {}

local function remaining(deadline)
  return deadline and math.max(0, deadline - loop.now()) or nil
end

-- Reads one stream to its end into sink -> true | nil, why, code
local function drain(p, which, deadline, sink)
  while true do
    local chunk, err, code = p:read(which, nil, remaining(deadline))
    if not chunk then return nil, err, code end
    if chunk == "" then return true end
    sink(chunk)
  end
end

-- The helpers: a writer for stdin, a reader for stderr; each -> true | nil, why, code.
-- They run shielded: a run started by shielded code (a cancelled command's cleanup) must not
-- lose them to a later cancel-everything (the main task's end, a second signal). They end
-- with the program's pipes, which M.run closes by killing its process group when it stops.
local function start_helpers(p, opts, deadline, errs)
  local helpers = {}
  if opts.stdin then
    helpers[#helpers + 1] = loop.spawn(loop.shield, function()
      local ok, err, code = p:write(opts.stdin, remaining(deadline))
      p:close_stdin()
      if ok or code == "closed" then return true end
      return nil, err, code
    end)
  end
  if opts.stderr ~= "stdout" then
    helpers[#helpers + 1] = loop.spawn(loop.shield, function()
      return drain(p, "stderr", deadline, opts.on_stderr or function(s) errs[#errs + 1] = s end)
    end)
  end
  return helpers
end

-- Stdout read to its end here, then the helpers joined -> true | nil, why, code
local function communicate(p, helpers, deadline, sink)
  local ok, err, code = drain(p, "stdout", deadline, sink)
  if not ok then return nil, err, code end
  for _, h in ipairs(helpers) do
    local joined, done, herr, hcode = h:join()
    if not joined then error(done, 0) end
    if not done then return nil, herr, hcode end
  end
  return true
end

function M.run(argv, opts)
  opts = opts or {}
  local p, err, code = proc.spawn {
    argv = argv, env = opts.env, clear_env = opts.clear_env, cwd = opts.cwd,
    stdin = opts.stdin and "pipe" or "null", stdout = "pipe",
    stderr = opts.stderr == "stdout" and "stdout" or "pipe",
  }
  if not p then return nil, err, code end
  local deadline = opts.timeout and loop.now() + opts.timeout
  local outs, errs = {}, {}
  local helpers = start_helpers(p, opts, deadline, errs)
  local sink = opts.on_stdout or function(s) outs[#outs + 1] = s end
  local called, ok, why, why_code = pcall(communicate, p, helpers, deadline, sink)
  local status, signal
  if called and ok then
    status, signal, why_code = p:wait(remaining(deadline))
    ok, why = status ~= nil, signal
  end
  if not (called and ok) then
    for _, h in ipairs(helpers) do h:cancel() end
    p:close()
    if not called then error(ok, 0) end
    if why_code == "timeout" then
      return nil, string.format("%s: timed out after %g s", argv[1], opts.timeout), "timeout"
    end
    return nil, why, why_code
  end
  p:close()
  return table.concat(outs), table.concat(errs), status, signal
end

return M
