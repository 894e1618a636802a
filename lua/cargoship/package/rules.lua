-- package.rules: a small declarative rule language; one rule tree both checks a document and writes its JSON Schema.
--
-- A rule is a table made by one of the constructors below. M.check(ctx, rule, doc, path)
-- walks a parsed YAML document against it and reports every mistake through ctx.errs (a
-- cargoship.config.errors collector: file:line:col, path, message, the cluster loader's
-- wording); M.schema(rule, root_fields) writes the JSON Schema (draft 2020-12) of the same
-- tree. Patterns are written once, as JSON Schema regular expressions of a small subset
-- (anchors, classes, \d, * + ? {n}), and translated to Lua patterns for the check, so the
-- schema and the check read the same text. What only code can say (`check` functions:
-- paths, octal modes, versions, cross-field rules) is checked and not in the schema.
local check = require "cargoship.config.check"
local errors = require "cargoship.config.errors"

local M = {}

local join, describe, quote, kind_of = errors.join, errors.describe, errors.quote, errors.kind_of

local function lua_char(c) return c:match("%w") and c or ("%" .. c) end
local ESCAPES = { d = "%d", s = "%s", n = "\n", r = "\r", t = "\t" }

-- A JSON Schema regex of the subset above -> the Lua pattern that matches the same strings.
-- Anything outside the subset (groups, alternation, '.') raises: a rule the check cannot
-- read the way a validator does is a bug, found when the rules load.
function M.lua_pattern(re)
  local out, i, last = {}, 1, nil
  while i <= #re do
    local c, atom = re:sub(i, i), nil
    if c == "^" and i == 1 then out[#out + 1] = "^"; i = i + 1
    elseif c == "$" and i == #re then out[#out + 1] = "$"; i = i + 1
    elseif c == "[" then
      local j, set = i + 1, { "[" }
      if re:sub(j, j) == "^" then set[2] = "^"; j = j + 1 end
      while re:sub(j, j) ~= "]" do
        assert(j <= #re, "rules: unterminated class in " .. re)
        local ch = re:sub(j, j)
        if ch == "\\" then
          j = j + 1
          ch = re:sub(j, j)
          set[#set + 1] = ESCAPES[ch] or lua_char(ch)
        elseif re:sub(j + 1, j + 1) == "-" and j + 2 <= #re and re:sub(j + 2, j + 2) ~= "]" then
          set[#set + 1] = ch .. "-" .. re:sub(j + 2, j + 2)
          j = j + 2
        else
          set[#set + 1] = lua_char(ch)
        end
        j = j + 1
      end
      set[#set + 1] = "]"
      atom, i = table.concat(set), j + 1
    elseif c == "\\" then
      local n = re:sub(i + 1, i + 1)
      atom, i = ESCAPES[n] or lua_char(n), i + 2
    elseif c == "*" or c == "+" or c == "?" then
      assert(last, "rules: a quantifier with nothing before it in " .. re)
      out[#out + 1], i, last = c, i + 1, nil
    elseif c == "{" then
      local n, stop = re:match("^{(%d+)}()", i)
      assert(n and last, "rules: only {n} repeats a single atom, in " .. re)
      for _ = 2, tonumber(n) do out[#out + 1] = last end
      i, last = stop, nil
    else
      assert(not c:match("[%(%)|%.{}]"), "rules: " .. c .. " is outside the pattern subset, in " .. re)
      atom, i = lua_char(c), i + 1
    end
    if atom then out[#out + 1], last = atom, atom end
  end
  return table.concat(out)
end

-- ---- constructors ------------------------------------------------------------------------
-- Common options: doc (the schema's description), check = function(v) -> why | nil.

-- opts: pattern (JSON regex), expect (how a mismatch is described), nonempty, binary (may hold NUL)
function M.string(opts)
  local r = { kind = "string" }
  for k, v in pairs(opts or {}) do r[k] = v end
  if r.pattern then r.lua = M.lua_pattern(r.pattern) end
  return r
end
function M.enum(values, opts)
  local r = M.string(opts)
  r.kind, r.values = "enum", values
  return r
end
function M.const(value, opts)
  local r = M.string(opts)
  r.kind, r.value = "const", value
  return r
end
function M.integer(opts)
  local r = { kind = "integer" }
  for k, v in pairs(opts or {}) do r[k] = v end
  return r
end
function M.boolean(opts) return { kind = "boolean", doc = opts and opts.doc } end
function M.number(opts) return { kind = "number", doc = opts and opts.doc } end
-- Any value at all (free-form sections), or any mapping.
function M.any(opts) return { kind = "any", doc = opts and opts.doc } end
function M.any_map(opts) return { kind = "any_map", doc = opts and opts.doc } end
-- opts: unique (scalar items), unique_by (a field of mapping items), min (items)
function M.list(items, opts)
  local r = { kind = "list", items = items }
  for k, v in pairs(opts or {}) do r[k] = v end
  return r
end
-- opts: key_pattern (JSON regex), key_expect
function M.map(values, opts)
  local r = { kind = "map", values = values }
  for k, v in pairs(opts or {}) do r[k] = v end
  if r.key_pattern then r.key_lua = M.lua_pattern(r.key_pattern) end
  return r
end
-- fields: ordered list of {name, rule, required = bool}; opts: name (a $defs entry),
-- hints = {key = "why"} for keys that belong elsewhere, check = function(ctx, map, path)
-- for cross-field rules (reports through ctx.errs itself).
function M.object(fields, opts)
  local r = { kind = "object", fields = fields }
  for k, v in pairs(opts or {}) do r[k] = v end
  local seen = {}
  for i, f in ipairs(fields) do
    assert(type(f[1]) == "string" and type(f[2]) == "table", "rules: field " .. i .. " needs a name and a rule")
    assert(not seen[f[1]], "rules: field " .. f[1] .. " is listed twice")
    seen[f[1]] = true
  end
  return r
end

-- An object rule's field named `name` ({name, rule, required = ...}), or nil.
function M.field(r, name)
  for _, f in ipairs(r.fields) do
    if f[1] == name then return f end
  end
end
-- The first alternative whose kind fits the value's (string, integer, number, mapping, list)
-- checks it. alternatives: rules of distinct kinds.
function M.any_of(alternatives, opts)
  return { kind = "any_of", alternatives = alternatives, doc = opts and opts.doc, expect = opts and opts.expect }
end

-- ---- checking ----------------------------------------------------------------------------

local function report(ctx, c, k, path, msg)
  ctx.errs:at_value(c, k, join(path, k), msg)
  ctx.errs:spoil(c, k)
end

local function code_check(ctx, c, k, path, r, v)
  local why = r.check and r.check(v)
  if why then report(ctx, c, k, path, why) return nil end
  return v
end

local CHECK = {}

-- Checks c[k] (present) against rule r; returns the value when usable.
local function check_value(ctx, c, k, path, r)
  return CHECK[r.kind](ctx, c, k, path, r)
end
M.check_value = check_value

function CHECK.string(ctx, c, k, path, r)
  local v = check.string(ctx, c, k, path, { nonempty = r.nonempty, binary = r.binary })
  if v == nil then return nil end
  if r.lua and not v:match(r.lua) then
    report(ctx, c, k, path, string.format("expected %s, got %s", r.expect or ("a string matching " .. r.pattern),
      describe(v)))
    return nil
  end
  return code_check(ctx, c, k, path, r, v)
end

function CHECK.enum(ctx, c, k, path, r)
  return check.enum(ctx, c, k, path, r.values, { blank_absent = r.blank })
end

function CHECK.const(ctx, c, k, path, r)
  local v = check.string(ctx, c, k, path)
  if v ~= nil and v ~= r.value then
    report(ctx, c, k, path, string.format("expected %s, got %s%s", quote(r.value), describe(v),
      errors.did_you_mean(v, { r.value })))
    return nil
  end
  return v
end

function CHECK.integer(ctx, c, k, path, r)
  local v = check.integer(ctx, c, k, path, { min = r.min, max = r.max })
  return v ~= nil and code_check(ctx, c, k, path, r, v) or nil
end

-- YAML 1.1 spellings (yes/no/on/off) are taken, as the Go tool's YAML library takes them, and
-- written back as booleans, so no reader of the document mistakes the string "no" for true.
function CHECK.boolean(ctx, c, k, path)
  local v = check.boolean(ctx, c, k, path)
  if v ~= nil then c[k] = v end
  return v
end

function CHECK.number(ctx, c, k, path)
  local v = c[k]
  if type(v) == "number" then return v end
  check.wrong(ctx, c, k, path, "a number", v)
  return nil
end

function CHECK.any(_, c, k) return c[k] end

function CHECK.any_map(ctx, c, k, path) return check.mapping(ctx, c, k, path) end

function CHECK.list(ctx, c, k, path, r)
  local v = check.sequence(ctx, c, k, path)
  if v == nil then return nil end
  local lpath, seen = join(path, k), {}
  if r.min and #v < r.min then report(ctx, c, k, path, string.format("expected at least %d item(s)", r.min)) end
  for i = 1, #v do
    if check.present(v, i) then
      local item = check_value(ctx, v, i, lpath, r.items)
      local key = r.unique_by and type(item) == "table" and item[r.unique_by] or item
      if (r.unique or r.unique_by) and key ~= nil and type(key) ~= "table" then
        if seen[key] then
          ctx.errs:at_value(v, i, join(lpath, i), string.format("%s%s is listed twice (first at %s)",
            r.unique_by and (r.unique_by .. " ") or "", describe(key), join(lpath, seen[key])))
        end
        seen[key] = seen[key] or i
      end
    else
      ctx.errs:at_value(v, i, join(lpath, i), "expected " .. M.expected(r.items) .. ", got null")
    end
  end
  return v
end

function CHECK.map(ctx, c, k, path, r)
  local m = check.mapping(ctx, c, k, path)
  if m == nil then return nil end
  local mpath = join(path, k)
  for _, key in ipairs(check.keys(m)) do
    if r.key_lua and not tostring(key):match(r.key_lua) then
      ctx.errs:at_key(m, key, join(mpath, key), string.format("key %s is not %s", quote(key),
        r.key_expect or ("matching " .. r.key_pattern)))
    elseif check.present(m, key) then
      check_value(ctx, m, key, mpath, r.values)
    elseif r.values.kind ~= "any" then
      ctx.errs:at_value(m, key, join(mpath, key), "expected " .. M.expected(r.values) .. ", got null")
    end
  end
  return m
end

-- The fields of mapping m (at path mpath) against object rule r.
function M.check_object(ctx, m, mpath, r)
  local names = {}
  for i, f in ipairs(r.fields) do names[i] = f[1] end
  check.fields(ctx, m, mpath, names, r.hints)
  for _, f in ipairs(r.fields) do
    local name, rule = f[1], f[2]
    if check.present(m, name) then check_value(ctx, m, name, mpath, rule)
    elseif f.required then check.missing(ctx, m, name, mpath) end
  end
  if r.check then r.check(ctx, m, mpath) end
  return m
end

function CHECK.object(ctx, c, k, path, r)
  local m = check.mapping(ctx, c, k, path)
  if m == nil then return nil end
  return M.check_object(ctx, m, join(path, k), r)
end

-- which alternative kinds take a value of each YAML kind
local FITS = { string = { string = true, enum = true, const = true }, integer = { integer = true, number = true },
  float = { number = true }, boolean = { boolean = true },
  mapping = { object = true, map = true, any_map = true }, sequence = { list = true },
  empty = { object = true, map = true, any_map = true, list = true } }

function CHECK.any_of(ctx, c, k, path, r)
  local fits = FITS[kind_of(c[k])] or {}
  for _, alt in ipairs(r.alternatives) do
    if fits[alt.kind] or alt.kind == "any" then return check_value(ctx, c, k, path, alt) end
  end
  check.wrong(ctx, c, k, path, M.expected(r), c[k])
  return nil
end

local EXPECTED = { string = "a string", enum = "a string", const = "a string", integer = "an integer",
  number = "a number", boolean = "a boolean (true or false)", any = "a value", any_map = "a mapping",
  list = "a sequence", map = "a mapping", object = "a mapping" }

-- How a rule's expected value is named in an error.
function M.expected(r)
  if r.expect then return r.expect end
  if r.kind ~= "any_of" then return EXPECTED[r.kind] end
  local names = {}
  for i, alt in ipairs(r.alternatives) do names[i] = M.expected(alt) end
  return table.concat(names, " or ")
end

-- ---- JSON Schema -------------------------------------------------------------------------

local SCHEMA = {}

local function schema_of(r, defs)
  local s
  if r.kind == "object" and r.name then
    if not defs[r.name] then
      defs[r.name] = true -- a placeholder while its fields are written (a rule may refer to itself)
      defs[r.name] = SCHEMA.object(r, defs)
    end
    s = { ["$ref"] = "#/$defs/" .. r.name }
  else
    s = SCHEMA[r.kind](r, defs)
  end
  if r.doc and type(s) == "table" then s.description = r.doc end
  return s
end

function SCHEMA.string(r)
  return { type = "string", pattern = r.pattern, minLength = r.nonempty and 1 or nil }
end
function SCHEMA.enum(r)
  local e = {}
  for i, v in ipairs(r.values) do e[i] = v end
  if r.blank then e[#e + 1] = "" end
  return { type = "string", enum = e }
end
function SCHEMA.const(r) return { const = r.value } end
function SCHEMA.integer(r) return { type = "integer", minimum = r.min, maximum = r.max } end
function SCHEMA.boolean() return { type = "boolean" } end
function SCHEMA.number() return { type = "number" } end
function SCHEMA.any() return true end
function SCHEMA.any_map() return { type = "object" } end
function SCHEMA.list(r, defs)
  return { type = "array", items = schema_of(r.items, defs), uniqueItems = r.unique or nil, minItems = r.min }
end
function SCHEMA.map(r, defs)
  return { type = "object", additionalProperties = schema_of(r.values, defs),
    propertyNames = r.key_pattern and { pattern = r.key_pattern } or nil }
end
function SCHEMA.object(r, defs)
  local props, required = {}, {}
  for _, f in ipairs(r.fields) do
    local p = schema_of(f[2], defs)
    if f.doc then
      p = type(p) == "table" and p or {}
      p.description = f.doc
    end
    props[f[1]] = p
    if f.required then required[#required + 1] = f[1] end
  end
  return { type = "object", additionalProperties = false, properties = props,
    required = #required > 0 and required or nil }
end
function SCHEMA.any_of(r, defs)
  local alts = {}
  for i, a in ipairs(r.alternatives) do alts[i] = schema_of(a, defs) end
  return { anyOf = alts }
end

-- The JSON Schema of a document whose root is object rule `root` -> Lua table (json.encode it).
-- meta: {id, title}.
function M.schema(root, meta)
  local defs = {}
  local s = SCHEMA.object(root, defs)
  s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
  s["$id"], s.title, s.description = meta.id, meta.title, root.doc
  if next(defs) then s["$defs"] = defs end
  return s
end

return M
