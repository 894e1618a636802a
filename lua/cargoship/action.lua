-- cargoship.action: the action records a phase's assess returns; one record is both the plan's sentence and the work.
--
-- Every record has `kind` (stable, in the JSON report) and `say` (the sentence people read).
--   run      {cmd, timeout?, sudo?, stdin?, finish?}  a command; non-zero exit fails it. finish: seconds
--                                                     it may run on when the run is cancelled
--                                                     (a package-manager transaction), then ended
--   write    {path, content, mode?, owner?, group?}   atomic temp+rename; skipped when the host
--                                                     already has the same content and mode
--   upload   {path, source, sha256, size?, mode?, owner?, group?}
--                                                     a local file; skipped when the remote hash
--                                                     and mode match; assessed = true: the
--                                                     phase's assess read the target and found
--                                                     it different, so the transport does not ask again
--   remove   {path}                                   rm -f (a directory needs `recursive = true`)
--   service  {verb, service, nowait?}                 verb: start|stop|restart|reload|enable|disable
--                                                     through the host's service manager; nowait
--                                                     (start, restart): not waiting for the service
--                                                     to report ready (cargoship.os.service)
--   kube     {verb, node?, path?, cmd, timeout?, retries?}
--                                                     a kubectl operation on the host it is applied
--                                                     to (the leader): verb apply (path: a
--                                                     manifest on that host) | drain | uncordon |
--                                                     cordon | label | delete_node (node: the
--                                                     node it acts on); cmd is the engine's
--                                                     rendering (distros.engine); a write
--   step     {name, ...}                              a sequence step the phase runs itself (drain,
--                                                     wait for Ready); the phase's `steps[name]`
--                                                     executes it
--   note     {say}                                    a sentence and nothing else: what a phase of
--                                                     the old contract (assess returning strings)
--                                                     says; host:apply refuses to execute one
-- A write or remove with `on = "local"` is for the operator's machine (cargoship.local_target:
-- the kubeconfig a run merges): the context executes it there, and a host refuses it.
-- Constructors validate and fill `say`; they raise on misuse (a bug in a phase, not a host's
-- failure). `public(a)` is the part that may leave the process (plan, report, logs): never a
-- file's content, stdin or anything marked `secret`.
local M = {}

M.KINDS = { run = true, write = true, upload = true, remove = true, service = true, kube = true, step = true,
  note = true }
M.SERVICE_VERBS = { start = true, stop = true, restart = true, reload = true, enable = true, disable = true }
M.KUBE_VERBS = { apply = true, drain = true, uncordon = true, cordon = true, label = true, delete_node = true }

-- want: the Lua type (default "string", which must then be non-empty); "content" is any
-- string, the empty one included (an empty file is a file).
local function need(t, field, kind, want)
  local v = t[field]
  if want == "content" then
    if type(v) ~= "string" then
      error(string.format("action %s: %s must be a string, not %s", kind, field, type(v)), 3)
    end
    return v
  end
  if type(v) ~= (want or "string") or (type(v) == "string" and v == "") then
    error(string.format("action %s: %s must be a %s%s, not %s", kind, field, want or "string",
      (want or "string") == "string" and " (non-empty)" or "", v == "" and "empty" or type(v)), 3)
  end
  return v
end

local function opt(t, field, kind, want)
  local v = t[field]
  if v ~= nil and type(v) ~= want then
    error(string.format("action %s: %s must be a %s, not %s", kind, field, want, type(v)), 3)
  end
end

local function make(kind, t, say)
  t.kind = kind
  if t.say == nil then t.say = say end
  if type(t.say) ~= "string" or t.say == "" then error("action " .. kind .. ": say must be a sentence", 3) end
  return t
end

local function check_mode(t, kind)
  if t.mode ~= nil then
    local m = type(t.mode) == "string" and t.mode or ""
    if not (m:match("^[0-7][0-7][0-7]$") or m:match("^[0-7][0-7][0-7][0-7]$")) then
      error(string.format("action %s: mode must be octal text such as \"0644\", not %s", kind, tostring(t.mode)), 3)
    end
    if #t.mode == 3 then t.mode = "0" .. t.mode end
  end
  opt(t, "owner", kind, "string")
  opt(t, "group", kind, "string")
  -- dir_mode: the target's directory is made with this mode when missing, as part of the
  -- write: several phases write under /var/lib/cargoship, and a plan cannot know which of
  -- them will be the first to create it
  if t.dir_mode ~= nil then
    local d = type(t.dir_mode) == "string" and t.dir_mode or ""
    if not d:match("^0?[0-7][0-7][0-7]$") then
      error(string.format("action %s: dir_mode must be octal text such as \"0700\", not %s", kind,
        tostring(t.dir_mode)), 3)
    end
  end
end

function M.run(t)
  need(t, "cmd", "run")
  opt(t, "timeout", "run", "number")
  opt(t, "stdin", "run", "string")
  opt(t, "finish", "run", "number")
  return make("run", t, "run " .. t.cmd:match("^[^\n]*"):sub(1, 120))
end

function M.write(t)
  need(t, "path", "write")
  need(t, "content", "write", "content")
  check_mode(t, "write")
  return make("write", t, string.format("write %s (%d bytes%s)", t.path, #t.content,
    t.mode and (", mode " .. t.mode) or ""))
end

function M.upload(t)
  need(t, "path", "upload")
  need(t, "source", "upload")
  need(t, "sha256", "upload")
  opt(t, "size", "upload", "number")
  check_mode(t, "upload")
  return make("upload", t, string.format("upload %s%s", t.path, t.size and string.format(" (%d bytes)", t.size) or ""))
end

function M.remove(t)
  need(t, "path", "remove")
  return make("remove", t, "remove " .. t.path)
end

function M.service(t)
  need(t, "verb", "service")
  need(t, "service", "service")
  if not M.SERVICE_VERBS[t.verb] then error("action service: unknown verb " .. t.verb, 2) end
  opt(t, "nowait", "service", "boolean")
  return make("service", t, t.verb .. " service " .. t.service)
end

-- The sentence names the verb and what it acts on: "drain node w1", "apply /x.yaml".
function M.kube(t)
  need(t, "verb", "kube")
  if not M.KUBE_VERBS[t.verb] then error("action kube: unknown verb " .. t.verb, 2) end
  need(t, "cmd", "kube")
  opt(t, "timeout", "kube", "number")
  opt(t, "retries", "kube", "number")
  if t.verb == "apply" then
    need(t, "path", "kube")
    opt(t, "node", "kube", "string")
    return make("kube", t, "kubectl apply -f " .. t.path)
  end
  need(t, "node", "kube")
  return make("kube", t, string.format("kubectl %s node %s", (t.verb:gsub("_node$", "")), t.node))
end

function M.step(t)
  need(t, "name", "step")
  need(t, "say", "step")
  return make("step", t, t.say)
end

function M.note(t)
  if type(t) == "string" then t = { say = t } end
  need(t, "say", "note")
  return make("note", t, t.say)
end

-- M.check(a) -> a: raises unless a is a well-formed record of a known kind.
function M.check(a)
  if type(a) ~= "table" or not M.KINDS[a.kind] then
    error("an action must be a record made by cargoship.action (with a known kind), not "
      .. (type(a) == "table" and ("kind " .. tostring(a.kind)) or type(a)), 2)
  end
  return M[a.kind](a)
end

local PUBLIC = { "kind", "say", "path", "mode", "owner", "group", "sha256", "size", "verb", "service", "name" }

-- M.public(a) -> the fields of a that the plan, the report and the logs may carry.
function M.public(a)
  local p = {}
  for _, k in ipairs(PUBLIC) do p[k] = a[k] end
  if (a.kind == "run" or a.kind == "kube") and not a.secret then p.cmd = a.cmd end
  if a.kind == "kube" then p.node = a.node end
  if a.on == "local" then p.on = "local" end
  return p
end

return M
