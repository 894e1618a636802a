-- cargoship.config.check: typed field access that reports mistakes instead of raising.
-- Every getter takes (ctx, map, key, path) where path is the map's own path; it returns the
-- value when it is usable and nil otherwise (absent, null, or wrong and already reported).
local yaml = require "cargoship.yaml"
local errors = require "cargoship.config.errors"

local M = {}

local join, describe, kind_of, quote = errors.join, errors.describe, errors.kind_of, errors.quote

-- Optional fields written as `key:` with nothing after are null; treating them as absent
-- matches how the Go tool decodes them.
function M.present(map, key)
  local v = map[key]
  return v ~= nil and not yaml.is_null(v)
end

function M.missing(ctx, map, key, path)
  ctx.errs:at_node(map, path, string.format("missing required field %s", quote(key)))
end

-- The raw value, or nil when absent/null/spoiled; reports a required field that is absent.
local function raw(ctx, map, key, path, opts, expected)
  if ctx.errs:is_spoiled(map, key) then return nil end
  local v = map[key]
  if v == nil then
    if opts and opts.required then M.missing(ctx, map, key, path) end
    return nil
  end
  if yaml.is_null(v) then
    if opts and opts.required then
      ctx.errs:at_value(map, key, join(path, key), "expected " .. expected .. ", got null")
    end
    return nil
  end
  return v
end

local function one_of(values)
  local q = {}
  for i, s in ipairs(values) do q[i] = quote(s) end
  return "one of " .. table.concat(q, ", ")
end
M.one_of = one_of

-- How a wrong value of a secret field is named: its kind, never its text (a numeric
-- password would otherwise be printed back in the error).
function M.describe_hidden(v)
  local k = kind_of(v)
  if k == "string" or k == "integer" or k == "float" or k == "boolean" then
    return "a" .. (k == "integer" and "n " or " ") .. k .. " (value hidden: the field is secret)"
  end
  return describe(v)
end

local function wrong(ctx, map, key, path, expected, v, hint, secret)
  ctx.errs:at_value(map, key, join(path, key),
    string.format("expected %s, got %s%s", expected, secret and M.describe_hidden(v) or describe(v),
      hint or ""))
  ctx.errs:spoil(map, key)
end
M.wrong = wrong

-- Why s cannot be used as one word of an identity (user, address, key path, ssh option):
-- a NUL cuts the string where C sees it (a user written "ro\0ot" logs in as "ro") and other
-- control characters break log lines, ssh_config and shell commands. nil when fine.
function M.control_problem(s, any_control)
  local at = s:find(any_control and "%c" or "\0")
  if not at then return nil end
  return string.format("must not contain control characters, found byte 0x%02x at position %d",
    s:byte(at), at)
end

-- A value that came out of ${VAR} expansion was a string before; the Go tool expands before
-- parsing, so `port: ${SSH_PORT}` is an integer there. Re-resolve such values for the
-- integer and boolean getters only.
local function expanded(ctx, map, key)
  local e = ctx.expanded and ctx.expanded[map]
  return e ~= nil and e[key] == true
end

function M.mapping(ctx, map, key, path, opts)
  local v = raw(ctx, map, key, path, opts, "a mapping")
  if v == nil then return nil end
  local k = kind_of(v)
  if k == "mapping" or k == "empty" then return v end
  wrong(ctx, map, key, path, "a mapping", v)
  return nil
end

function M.sequence(ctx, map, key, path, opts)
  local v = raw(ctx, map, key, path, opts, "a sequence")
  if v == nil then return nil end
  local k = kind_of(v)
  if k == "sequence" or k == "empty" then return v end
  wrong(ctx, map, key, path, "a sequence", v)
  return nil
end

local function scalar_hint(v)
  local t = type(v)
  if t == "number" or t == "boolean" then return " (quote it to keep it as text)" end
  return ""
end

-- opts.nonempty rejects "" (after trimming nothing: a blank is a blank).
-- opts.secret never quotes the value in an error. A NUL is refused in every string but
-- opts.binary ones (file data); opts.word refuses every control character.
-- opts.max caps the length in bytes.
function M.string(ctx, map, key, path, opts)
  opts = opts or {}
  local v = raw(ctx, map, key, path, opts, "a string")
  if v == nil then return nil end
  if type(v) ~= "string" then
    wrong(ctx, map, key, path, "a string", v, scalar_hint(v), opts.secret)
    return nil
  end
  if (opts.nonempty or opts.required) and v:match("^%s*$") then
    ctx.errs:at_value(map, key, join(path, key), "expected a non-empty string")
    ctx.errs:spoil(map, key)
    return nil
  end
  local why = not opts.binary and M.control_problem(v, opts.word)
  if not why and opts.max and #v > opts.max then
    why = string.format("must be at most %d bytes long, got %d", opts.max, #v)
  end
  if why then
    ctx.errs:at_value(map, key, join(path, key), why)
    ctx.errs:spoil(map, key)
    return nil
  end
  return v
end

function M.integer(ctx, map, key, path, opts)
  local v = raw(ctx, map, key, path, opts, "an integer")
  if v == nil then return nil end
  if type(v) == "string" and expanded(ctx, map, key) and v:match("^%s*[-+]?%d+%s*$") then
    v = math.tointeger(tonumber(v))
  end
  if math.type(v) ~= "integer" then
    wrong(ctx, map, key, path, "an integer", v)
    return nil
  end
  local lo, hi = opts and opts.min, opts and opts.max
  if (lo and v < lo) or (hi and v > hi) then
    ctx.errs:at_value(map, key, join(path, key),
      string.format("expected an integer in %d..%d, got integer %d", lo or math.mininteger,
        hi or math.maxinteger, v))
    return nil
  end
  return v
end

-- YAML 1.1 spellings (yes/no/on/off) are accepted because the Go tool's YAML library
-- still decodes them into bool fields; YAML 1.2 left them as strings.
local BOOL_WORDS = { yes = true, on = true, y = true, ["true"] = true,
                     no = false, off = false, n = false, ["false"] = false }

function M.boolean(ctx, map, key, path, opts)
  local v = raw(ctx, map, key, path, opts, "a boolean")
  if v == nil then return nil end
  if type(v) == "string" then
    local lower = v:lower()
    -- Only all-lower, Capitalised or ALL-UPPER forms, as YAML 1.1 spells them.
    if BOOL_WORDS[lower] ~= nil and (v == lower or v == v:upper() or v == lower:gsub("^%l",
      string.upper)) then
      v = BOOL_WORDS[lower]
    end
  end
  if type(v) ~= "boolean" then
    wrong(ctx, map, key, path, "a boolean (true or false)", v)
    return nil
  end
  return v
end


-- A string from a fixed set; opts.ignore_case returns the canonical spelling.
function M.enum(ctx, map, key, path, values, opts)
  local v = raw(ctx, map, key, path, opts, one_of(values))
  if v == nil then return nil end
  if type(v) ~= "string" then
    wrong(ctx, map, key, path, one_of(values), v)
    return nil
  end
  for _, s in ipairs(values) do
    if v == s or (opts and opts.ignore_case and v:lower() == s:lower()) then return s end
  end
  local hint = (opts and opts.hint) or errors.did_you_mean(v, values)
  ctx.errs:at_value(map, key, join(path, key),
    string.format("expected %s, got %s%s", one_of(values), describe(v), hint))
  ctx.errs:spoil(map, key)
  return nil
end

-- Keys of a mapping in file order (Lua tables forget it; positions remember it).
function M.keys(map)
  local ks = {}
  for k in pairs(map) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local la, ca = yaml.key_where(map, a)
    local lb, cb = yaml.key_where(map, b)
    if la and lb and (la ~= lb or ca ~= cb) then
      if la ~= lb then return la < lb end
      return ca < cb
    end
    return tostring(a) < tostring(b)
  end)
  return ks
end

-- Reports every key of `map` not in `known` (a list, in schema order, for suggestions).
-- `hints[key]` explains a field that is valid elsewhere (e.g. `address` next to `ssh`).
function M.fields(ctx, map, path, known, hints)
  local set = {}
  for _, k in ipairs(known) do set[k] = true end
  for _, k in ipairs(M.keys(map)) do
    if not set[k] then
      local hint = hints and hints[k]
      hint = hint and (" (" .. hint .. ")") or errors.did_you_mean(k, known)
      ctx.errs:at_key(map, k, join(path, k), "unknown field " .. quote(k) .. hint)
    end
  end
end

-- Exactly-one/at-most-one of a group of fields, reported at the mapping.
function M.count_present(map, keys)
  local n, found = 0, {}
  for _, k in ipairs(keys) do
    if M.present(map, k) then n = n + 1; found[#found + 1] = k end
  end
  return n, found
end

function M.quoted_list(keys)
  local q = {}
  for i, k in ipairs(keys) do q[i] = quote(k) end
  return table.concat(q, ", ")
end

-- A mapping of string -> scalar text. Integers and booleans are accepted and written as
-- text (the Go tool decodes them into map[string]string the same way); floats are refused
-- because YAML already lost their spelling (1.10 is 1.1).
-- opts.secret: the values are not quoted in errors (environment values carry proxies
-- with passwords and tokens). A NUL in a key or value is refused here for every map.
function M.string_map(ctx, map, key, path, check_entry, opts)
  local m = M.mapping(ctx, map, key, path)
  if not m then return nil end
  local secret = opts and opts.secret
  local out, mpath = {}, join(path, key)
  for _, k in ipairs(M.keys(m)) do
    local v, vpath = m[k], join(mpath, k)
    if ctx.errs:is_spoiled(m, k) then
      v = nil
    elseif type(v) == "boolean" or math.type(v) == "integer" then
      v = tostring(v)
    elseif yaml.is_null(v) then
      v = ""
    elseif type(v) ~= "string" then
      wrong(ctx, m, k, mpath, "a string", v, scalar_hint(v), secret)
      v = nil
    end
    local why = M.control_problem(tostring(k))
    if why then
      ctx.errs:at_key(m, k, vpath, "key " .. why)
      v = nil
    elseif v ~= nil then
      why = M.control_problem(v)
      if why then
        ctx.errs:at_value(m, k, vpath, why)
        v = nil
      end
    end
    if v ~= nil and check_entry then v = check_entry(k, v, m, vpath) end
    if v ~= nil then out[k] = v end
  end
  return out, m
end

return M
