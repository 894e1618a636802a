-- A mutation fuzzer over the shipped examples: every mutated cluster file, through the real
-- loader and (for a sample) the executable, ends in a cluster or in located errors, in
-- bounded time and memory, and never in a raise or a Lua error text (issue 8).
local config = require "cargoship.config"
local json = require "cargoship.json"
local util = require "cargoship.util"

-- Fixed, so the suite is deterministic; set CARGOSHIP_FUZZ_SEED/_CASES to explore further.
local SEED = tonumber(os.getenv("CARGOSHIP_FUZZ_SEED") or "") or 8042
local CASES = tonumber(os.getenv("CARGOSHIP_FUZZ_CASES") or "") or 3000
local PROCESS_EVERY = 50          -- one input in 50 also goes through `cargoship validate`
local SECONDS_PER_INPUT = 1       -- CPU time; a hook stops an input that takes longer
local HUGE_SECONDS = 6            -- inputs of several MB get this long (a 10 MB one takes ~2.1 s quiet)
local MAX_MEMORY_KB = 1024 * 1024 -- the Lua heap after any one input
local MAX_ERROR_TEXT = 2000       -- bytes of one error's text: no value is printed back whole

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local BIN = os.getenv("CARGOSHIP_BIN") or (SRC .. "/build/bin/cargoship")
local EXAMPLES = { "minimal.yaml", "full.yaml" }

-- What must never reach the operator: raised Lua errors and their traces.
local LUA_TEXTS = { "attempt to ", "stack traceback", "%.lua:%d+:", "bad argument #", "internal error",
  "invalid conversion", "table expected", "string expected", "nil value" }

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

local ENV = { HOME = "/home/op", PORT = "2222", EMPTY = "", BYTES = "\255\254\192x", NUL = "a\0b",
  LONG = ("L"):rep(70000), BOOL = "yes", NEWLINE = "a\nb: c" }
local function env(name) return ENV[name] end

-- ---- mutations: each takes the text and returns a new one --------------------------------

local R = math.random

local function lines_of(text)
  local t = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do t[#t + 1] = line end
  return t
end

local function pick(list) return list[R(#list)] end

local NASTY_SCALARS = { "~", "null", "[]", "{}", "0", "-1", "99999999999999999999", "1.5", "1e400",
  ".nan", "true", "yes", "''", '""', '"\\0"', '"\\x01\\e\\x7f"', '"\\u202e"', '"\\xff"', "!!binary aGk=",
  "!!int x", "!!str 1", "!foo x", "*nope", "&a x", "|\n  a\n  b", ">-\n  c", "'${HOME}'", '"${UNSET}"',
  '"${BYTES}"', '"${NUL}"', '"${LONG}"', '"${NEWLINE}"', '"$${x}"', '"${ bad }"', '"${"', "[1, [2, {a: b}]]",
  '"a@b"', '"h:22"', '"-rf /"', '"$(id)"', "'`id`'", '"\\t"', '"é\\u0301"', "0644", '"0644"', "0x1F",
  '"' .. ("é"):rep(40) .. '"', "<<", "=", "? x", "- a", "a: b" }

local SCHEMA_KEYS = { "apiVersion", "kind", "metadata", "spec", "config", "hosts", "role", "ssh",
  "openSSH", "localhost", "address", "user", "port", "keyPath", "options", "bastion", "files",
  "environment", "engine", "labels", "taints", "host", "ports", "firewall", "rules", "policy",
  "profiles", "profile", "registries", "auth", "pass", "token", "proxy", "url", "rewrite", "tls",
  "phases", "file", "after", "before", "replace", "values", "concurrency", "hostname",
  "privateAddress", "winRM", "encryption", "age", "recipients", "name", "<<" }

local function flip_byte(text)
  if #text == 0 then return text end
  local i = R(#text)
  local b = R(0, 3) == 0 and R(0, 255) or (text:byte(i) ~ (1 << R(0, 7)))
  return text:sub(1, i - 1) .. string.char(b) .. text:sub(i + 1)
end

local function truncate(text)
  return text:sub(1, R(0, #text))
end

local function duplicate_line(text)
  local t = lines_of(text)
  local i = R(#t)
  table.insert(t, R(#t), t[i])
  return table.concat(t, "\n")
end

local function delete_line(text)
  local t = lines_of(text)
  table.remove(t, R(#t))
  return table.concat(t, "\n")
end

local function swap_lines(text)
  local t = lines_of(text)
  local a, b = R(#t), R(#t)
  t[a], t[b] = t[b], t[a]
  return table.concat(t, "\n")
end

local function reindent(text)
  local t = lines_of(text)
  local i = R(#t)
  t[i] = (" "):rep(R(0, 12)) .. t[i]:gsub("^%s*", "")
  return table.concat(t, "\n")
end

-- Replaces the value of one "key: value" line.
local function replace_value(text, value)
  local t = lines_of(text)
  local cands = {}
  for i, line in ipairs(t) do
    if line:match("^%s*[-]?%s*[%w<]+:%s*%S") then cands[#cands + 1] = i end
  end
  if #cands == 0 then return text end
  local i = pick(cands)
  t[i] = t[i]:gsub("^(%s*[-]?%s*[%w<]+:%s*).*$", "%1" .. value:gsub("%%", "%%%%"))
  return table.concat(t, "\n")
end

local function nasty_value(text) return replace_value(text, pick(NASTY_SCALARS)) end

local function huge_value(text)
  local size = R(0, 19) == 0 and 10 * 1024 * 1024 or R(70, 300) * 1024
  -- repeated pieces that patterns care about: an unanchored or lazy pattern retried at each
  -- of them goes quadratic, which the time bound catches
  local v = pick({ "x", "a-", "é", "A.", "0", "a:", "1:", "-----BEGIN ", "(a", "[a-", "\\\\", "%", "a@",
    "${", "$$", "=a", "a/", "::", "\\t" }):rep(size // 2)
  if R(0, 1) == 0 then v = '"' .. v .. '"' end
  return replace_value(text, v)
end

local function huge_key(text)
  local key = pick({ "k", "é", "Z" }):rep(R(70, 2000) * 512)
  local t = lines_of(text)
  local i = R(#t)
  local indent = t[i]:match("^(%s*)")
  table.insert(t, i, indent .. "? " .. key .. "\n" .. indent .. ": 1")
  return table.concat(t, "\n")
end

local function insert_key(text)
  local t = lines_of(text)
  local i = R(#t)
  local indent = t[i]:match("^(%s*)") .. (R(0, 1) == 0 and "  " or "")
  table.insert(t, i + 1, indent .. pick(SCHEMA_KEYS) .. ": " .. pick(NASTY_SCALARS))
  return table.concat(t, "\n")
end

local function control_chars(text)
  local escapes = { "\\0", "\\x01", "\\e", "\\x7f", "\\t", "\\r", "\\n", "\\u0085", "\\u2028", "\\U0010FFFF" }
  local t = lines_of(text)
  local cands = {}
  for i, line in ipairs(t) do
    if line:match(":%s*[%w/~.$-]") then cands[#cands + 1] = i end
  end
  if #cands == 0 then return text end
  local i = pick(cands)
  t[i] = t[i]:gsub(":%s*(.-)%s*$", function(v)
    v = v:gsub('["\\]', "")
    local at = R(0, #v)
    return ': "' .. v:sub(1, at) .. pick(escapes) .. v:sub(at + 1) .. '"'
  end, 1)
  if R(0, 4) == 0 then t[i] = t[i] .. string.char(R(0, 31)) end   -- a raw one: a YAML error
  return table.concat(t, "\n")
end

local function deep_nesting(text)
  local n = pick({ 100, 400, 511, 513, 2000, 20000 })
  local v
  if R(0, 1) == 0 then v = ("["):rep(n) .. ("]"):rep(n)
  else v = ("{a: "):rep(n) .. "1" .. ("}"):rep(n) end
  return replace_value(text, v)
end

local function bare_scalar(text)
  local c = R(0, 5)
  if c == 0 then return pick(NASTY_SCALARS) end
  if c == 1 then return (text:match("^[^\n]*\n[^\n]*") or text):sub(1, R(1, 40)) end
  if c == 2 then return "--- " .. pick(NASTY_SCALARS) .. "\n" .. text end
  if c == 3 then return text .. "\n---\n" .. pick(NASTY_SCALARS) .. "\n" end
  if c == 4 then return "- " .. text:gsub("\n", "\n  ") end
  return "%YAML 1.1\n---\n" .. text
end

local function alias_bomb(text)
  local c = R(0, 2)
  if c == 0 then
    local lines = { "a: &a [x, x, x, x, x, x, x, x, x, x]" }
    for i = 2, R(3, 12) do
      lines[i] = string.format("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]",
        string.char(96 + i), string.char(96 + i), string.char(95 + i), string.char(95 + i),
        string.char(95 + i), string.char(95 + i), string.char(95 + i), string.char(95 + i),
        string.char(95 + i), string.char(95 + i), string.char(95 + i), string.char(95 + i))
    end
    return table.concat(lines, "\n") .. "\n" .. text
  end
  if c == 1 then
    -- a host list whose entries alias one another, and a bastion that names itself
    return replace_value(text, "&self {address: h, bastion: *self}")
  end
  return text:gsub("hosts:\n", "hosts: &h\n", 1) .. "\n    extra: *h\n"
end

local function merge_keys(text)
  return replace_value(text, pick({ "{<<: {address: h}}", "{<<: [1, 2]}", "{<<: *x}", "{<<: ~}",
    "&m {<<: *m}", "{<<: {<<: {<<: {role: worker}}}}" }))
end

local function splice(text, other)
  local a, b = R(0, #text), R(0, #other)
  return text:sub(1, a) .. other:sub(b)
end

local MUTATIONS = {
  { flip_byte, 6 }, { truncate, 3 }, { duplicate_line, 4 }, { delete_line, 2 }, { swap_lines, 2 },
  { reindent, 2 }, { nasty_value, 8 }, { huge_value, 1 }, { huge_key, 1 }, { insert_key, 5 },
  { control_chars, 5 }, { deep_nesting, 1 }, { bare_scalar, 2 }, { alias_bomb, 1 }, { merge_keys, 1 },
}
local WEIGHTS = 0
for _, m in ipairs(MUTATIONS) do WEIGHTS = WEIGHTS + m[2] end

local function mutation()
  local r = R(WEIGHTS)
  for _, m in ipairs(MUTATIONS) do
    r = r - m[2]
    if r <= 0 then return m[1] end
  end
end

-- One to three stacked mutations of one example (sometimes spliced with the other).
local function mutate(texts)
  local text = pick(texts)
  for _ = 1, R(1, 3) do
    if R(0, 19) == 0 then text = splice(text, pick(texts)) else text = mutation()(text) end
  end
  return text
end

-- ---- checks -------------------------------------------------------------------------------

local function problem_with_text(s)
  for _, p in ipairs(LUA_TEXTS) do
    if s:find(p) then return "Lua error text " .. p end
  end
  if #s > MAX_ERROR_TEXT then return "error text of " .. #s .. " bytes" end
end

-- nil when `text` loads to a cluster or to located errors; else what went wrong.
local function check_load(text)
  local limit = #text > 1024 * 1024 and HUGE_SECONDS or SECONDS_PER_INPUT
  local deadline = os.clock() + limit
  debug.sethook(function()
    if os.clock() > deadline then error("fuzz: over " .. limit .. " s", 0) end
  end, "", 10000)
  local ok, cluster, errs = pcall(config.load_string, text, "fuzz.yaml", { env = env, expand_env = true })
  debug.sethook()
  if not ok then return "raised: " .. tostring(cluster) end
  if cluster then return nil, "loaded" end
  if type(errs) ~= "table" or #errs == 0 then return "neither a cluster nor errors" end
  for _, e in ipairs(errs) do
    if type(e.text) ~= "string" then return "an error without text" end
    if math.type(e.line) ~= "integer" or math.type(e.col) ~= "integer" then
      return "an unlocated error: " .. e.text
    end
    local why = problem_with_text(e.text)
    if why then return why .. ": " .. e.text:sub(1, 300) end
  end
  local report = json.encode({ errors = errs })
  if not utf8.len(report) then return "JSON report is not valid UTF-8" end
  return nil, "refused"
end

local function check_process(dir, text, n)
  local path = string.format("%s/in-%d.yaml", dir, n)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  local proc = io.popen(string.format("env -i PATH=/usr/bin:/bin timeout 10 %s validate --output json %s 2>&1;"
    .. " echo \"rc=$?\"", util.quote(BIN), util.quote(path)))
  local out = proc:read("a")
  proc:close()
  os.remove(path)
  local code = tonumber(out:match("rc=(%d+)\n$"))
  out = out:gsub("rc=%d+\n$", "")
  if code ~= 0 and code ~= 1 then return "exit " .. tostring(code) .. ": " .. out:sub(1, 300) end
  if not utf8.len(out) then return "output is not valid UTF-8" end
  if not out:match('^{.*"valid":') then return "not a JSON report: " .. out:sub(1, 300) end
  for _, p in ipairs(LUA_TEXTS) do
    if out:find(p) then return "Lua error text " .. p .. ": " .. out:sub(1, 300) end
  end
end

describe("the cluster-file loader under mutation", function()
  it(string.format("takes %d mutated examples with no raise, hang or Lua error text", CASES), function()
    local texts = {}
    for i, name in ipairs(EXAMPLES) do texts[i] = read(SRC .. "/contrib/examples/" .. name) end
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. util.quote(dir)))
    math.randomseed(SEED)
    local counts, failures, processes = { loaded = 0, refused = 0 }, {}, 0
    local started = util.now()
    for n = 1, CASES do
      local text = mutate(texts)
      local why, verdict = check_load(text)
      if not why and n % PROCESS_EVERY == 0 then
        processes = processes + 1
        why = check_process(dir, text, n)
      end
      if why then
        failures[#failures + 1] = string.format("input %d (%d bytes, starts %q): %s", n, #text,
          text:sub(1, 80), why)
        if #failures >= 10 then break end
      else
        counts[verdict] = counts[verdict] + 1
      end
      collectgarbage()
      local kb = collectgarbage("count")
      if kb > MAX_MEMORY_KB then
        failures[#failures + 1] = string.format("input %d: Lua heap at %d KB", n, kb)
        break
      end
    end
    os.execute("rm -rf " .. util.quote(dir))
    print(string.format("# fuzz: %d inputs (seed %d): %d loaded, %d refused with located errors; "
      .. "%d through the executable; %.1f s", counts.loaded + counts.refused, SEED, counts.loaded,
      counts.refused, processes, util.now() - started))
    assert.are.equal("", table.concat(failures, "\n"))
    assert.are.equal(CASES, counts.loaded + counts.refused)
  end)
end)
