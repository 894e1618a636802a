-- cargoship.local_target: the operator's machine as a target: the same action records and dry-run refusal as a host.
--
-- Writes on the operator's side (the kubeconfig a run fetches, files a custom phase keeps
-- locally) go through here, not through io.open in a phase, so a dry run refuses them exactly
-- as host.lua refuses a host's: "<name>: dry run: refused to <what>", recorded in `refused`.
--   local target = M.new{dry_run = bool, log = logger, name = "localhost"}
--   target:read_file(path) -> content, mode (a number) | nil, msg, "notfound"|"io": a read,
--     allowed in a dry run (a phase's assess reads the operator's file so its plan is exact)
--   target:write_file(path, content, {mode = "0600"}) -> true | nil, msg, "io"
--   target:remove(path) -> true | nil, msg, "io"
--   target:apply(actions) -> outcomes, err: write, remove (and a note, refused as on a host);
--     another kind fails: a command or a service is for a host
-- A write is atomic (a temp file beside the target, renamed over it). Without a mode a new
-- file is 0600 (it may be a secret: a kubeconfig is one) and an existing file keeps its mode.
-- Owner and group are not changed: on this machine the files are the operator's.
local action = require "cargoship.action"
local fs = require "cargoship.fs"
local shell = require "cargoship.shell"
local util = require "cargoship.util"

local M = {}

local Target = {}
Target.__index = Target

function M.new(opts)
  opts = opts or {}
  return setmetatable({ name = opts.name or "localhost", dry_run = opts.dry_run and true or false, log = opts.log,
    refused = {}, writes_sent = 0 }, Target)
end

local function refuse(self, what)
  if self.dry_run then
    self.refused[#self.refused + 1] = what
    error(string.format("%s: dry run: refused to %s", self.name, what), 0)
  end
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- rename onto itself: true for anything at path (a file, a link, a directory), changing nothing
local function exists(path)
  return os.rename(path, path) ~= nil
end

-- "0640" -> 416
local function mode_bits(mode)
  return mode and tonumber(mode, 8) or nil
end

local function fail(self, path, op, why)
  return nil, string.format("%s: %s: %s: %s", self.name, path, op, tostring(why)), "io"
end

-- The write itself: with an explicit mode, the content goes to a fresh temp file made with
-- that mode (fs.replace gives a new file the mode asked) and is renamed over the target;
-- without, fs.replace keeps an existing file's mode (a new one is 0600).
local function put(self, path, content, mode)
  if not mode then
    local ok, err = fs.replace(path, content)
    if not ok then return nil, self.name .. ": " .. tostring(err), "io" end
    return true
  end
  local tmp = string.format("%s.cargoship-%d.new", path, util.getpid())
  os.remove(tmp)
  local ok, err = fs.replace(tmp, content, mode_bits(mode))
  if not ok then return nil, self.name .. ": " .. tostring(err), "io" end
  local renamed, rerr = os.rename(tmp, path)
  if not renamed then
    os.remove(tmp)
    return fail(self, path, "rename", rerr)
  end
  return true
end

function Target:read_file(path)
  local f, err = io.open(path, "rb")
  if not f then
    if not exists(path) then return nil, string.format("%s: %s: no such file", self.name, path), "notfound" end
    return fail(self, path, "read", err)
  end
  local s, rerr = f:read("a")
  f:close()
  if not s then return fail(self, path, "read", rerr) end
  return s, fs.mode(path)
end

function Target:write_file(path, content, opts)
  refuse(self, "write " .. path)
  self.writes_sent = self.writes_sent + 1
  return put(self, path, content, opts and opts.mode)
end

function Target:remove(path)
  refuse(self, "remove " .. path)
  self.writes_sent = self.writes_sent + 1
  local ok, err = os.remove(path)
  if not ok and exists(path) then return fail(self, path, "remove", err) end
  return true
end

local EXECUTE = {}

function EXECUTE.write(self, a)
  if a.owner or a.group then
    return "failed", self.name .. ": " .. a.say .. ": owner and group are not set on the operator's machine"
  end
  local have = read(a.path)
  if have ~= nil and util.sha256(have) == util.sha256(a.content)
    and (not a.mode or fs.mode(a.path) == mode_bits(a.mode)) then
    return "skipped"
  end
  if a.dir_mode and not os.execute(shell.fmt('d=$(dirname -- %s); [ -d "$d" ] || mkdir -p -m %s -- "$d"', a.path,
      a.dir_mode)) then
    return "failed", self.name .. ": " .. a.path .. ": cannot make its directory"
  end
  local ok, err = put(self, a.path, a.content, a.mode)
  if not ok then return "failed", err end
  return "done"
end

function EXECUTE.remove(self, a)
  if not exists(a.path) then return "skipped" end
  local ok, err = os.remove(a.path)
  if not ok then return "failed", string.format("%s: %s: remove: %s", self.name, a.path, tostring(err)) end
  return "done"
end

function EXECUTE.note(self, a)
  return "failed", self.name .. ": \"" .. a.say .. "\" is a sentence, not an action"
end

-- target:apply(actions) -> outcomes, err: as host:apply (outcomes[i] = {status, error}; the
-- first failure stops the list, the rest "not_run"); refused as a whole in a dry run.
function Target:apply(actions)
  refuse(self, string.format("apply %d action%s", #actions, #actions == 1 and "" or "s"))
  local outcomes = {}
  for i, a in ipairs(actions) do
    action.check(a)
    local run = EXECUTE[a.kind]
    local status, err
    if run then
      if a.kind ~= "note" then self.writes_sent = self.writes_sent + 1 end
      status, err = run(self, a)
    else
      status, err = "failed", string.format("%s: %s: a %s action is for a host, not the operator's machine",
        self.name, a.say, a.kind)
    end
    outcomes[i] = { status = status, error = err }
    if status == "failed" then
      for j = i + 1, #actions do outcomes[j] = { status = "not_run" } end
      return outcomes, err
    end
    if self.log then self.log:debug("%s: %s", a.say, status) end
  end
  return outcomes
end

M.Target = Target
return M
