-- cargoship.cli.args: the declarative option parser behind every cargoship command line.
--
-- An option spec is a list of entries:
--   { long = "concurrency", short = "c", value = "N", check = M.checks.positive_int,
--     default = 30, multiple = false, key = "concurrency", help = "..." }
-- `value` (a metavariable) marks an option that takes a value; without it the option is a
-- flag. `check` converts the raw string or says why it is wrong; it may also be a list of
-- allowed words. `multiple` lets a flag count its repeats (-vv) and a valued option collect
-- a list; any other option given twice is an error, because on a tool that changes clusters
-- a silently overridden `--concurrency` is worse than a complaint. `key` defaults to the long
-- name with dashes turned into underscores.
-- `aliases` lists other spellings of the same option ({"--update-firewall", "-F"}): each is
-- parsed as the option itself and shown in --help. `go_name` is the Go tool's spelling
-- when ours differs (shown in --help, and accepted too when it is not already an alias).
local pad = require("cargoship.lines").pad

local M = {}

M.checks = {}

-- Bare digits only: "1e3", "+5" and "0x10" are typos far more often than intent.
function M.checks.positive_int(s)
  local n = s:match("^%d+$") and math.tointeger(tonumber(s))
  if not n or n < 1 then return nil, "expected a positive whole number" end
  return n
end

local UNIT_SECONDS = { h = 3600, m = 60, s = 1 }

-- "30s", "5m", "1h", "1m30s", "1.5s" or bare seconds ("90"); returns seconds (> 0).
function M.checks.duration(s)
  local bad = "expected a duration such as 30s, 5m, 1h, 1m30s or a number of seconds"
  if s == "" then return nil, bad end
  if s:match("^%d+%.?%d*$") then
    local n = tonumber(s)
    if n > 0 then return n end
    return nil, "expected a duration greater than zero"
  end
  local total, rest, last_rank = 0, s, 0
  local rank = { h = 1, m = 2, s = 3 }
  while rest ~= "" do
    local num, unit, tail = rest:match("^(%d+%.?%d*)([hms])(.*)$")
    -- units must come in order, each once: "5s1m" is more likely a slip than a wish
    if not num or rank[unit] <= last_rank then return nil, bad end
    total, rest, last_rank = total + tonumber(num) * UNIT_SECONDS[unit], tail, rank[unit]
  end
  if total <= 0 then return nil, "expected a duration greater than zero" end
  return total
end

-- "18-22,24": phase numbers and ranges, comma-separated -> a sorted list without repeats.
function M.checks.number_list(s)
  local bad = "expected phase numbers such as 18-22,24"
  local seen, out = {}, {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local a, b = item:match("^(%d+)%-(%d+)$")
    if not a then a = item:match("^(%d+)$"); b = a end
    a, b = tonumber(a), tonumber(b)
    if not a or a > b or b > 999 then return nil, bad end
    for n = a, b do
      if not seen[n] then seen[n] = true; out[#out + 1] = math.tointeger(n) end
    end
  end
  table.sort(out)
  return out
end

function M.checks.nonempty(s)
  if s == "" then return nil, "expected a non-empty value" end
  return s
end

-- A check that accepts exactly the given words.
function M.choice(words)
  return function(s)
    for _, w in ipairs(words) do
      if s == w then return s end
    end
    return nil, "expected one of " .. table.concat(words, ", ")
  end
end

-- Levenshtein distance, enough for did-you-mean over a few dozen names.
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- The candidate closest to `word`, if it is close enough to be a plausible slip. Lengths
-- further apart than the limit are never compared: the distance costs #word * #c steps,
-- and a word of megabytes would stall the command line for minutes.
function M.suggest(word, candidates)
  local best, best_d
  for _, c in ipairs(candidates) do
    local limit = math.max(1, #c // 3)
    local d
    if #word >= 3 and c:sub(1, #word) == word then d = 1
    elseif math.abs(#word - #c) <= limit then d = distance(word, c) end
    if d and d <= limit and (not best_d or d < best_d) then best, best_d = c, d end
  end
  return best
end

-- A word of the command line as a message shows it: at most 60 bytes.
function M.shown(s)
  if #s <= 60 then return s end
  return s:sub(1, 57) .. "... (" .. #s .. " bytes)"
end
local shown = M.shown

local function key_of(opt)
  return opt.key or (opt.long:gsub("-", "_"))
end

-- Builds lookup tables; a spec that names an option twice is a programming error.
local function index(spec)
  local long, short = {}, {}
  for _, opt in ipairs(spec) do
    assert(type(opt.long) == "string", "option spec entry without a long name")
    assert(not long[opt.long], "option --" .. opt.long .. " declared twice")
    long[opt.long] = opt
    if opt.short then
      assert(#opt.short == 1 and not short[opt.short], "bad or duplicate short option -" .. opt.short)
      short[opt.short] = opt
    end
  end
  -- aliases after every primary name, so an alias can never shadow another option's name
  for _, opt in ipairs(spec) do
    for _, alias in ipairs(M.alias_list(opt)) do
      local l, sh = alias:match("^%-%-(.+)$"), alias:match("^%-(%w)$")
      assert(l or sh, "bad alias " .. alias .. " of --" .. opt.long)
      if l then
        assert(not long[l] or long[l] == opt, "alias " .. alias .. " of --" .. opt.long .. " is taken")
        long[l] = opt
      else
        assert(not short[sh] or short[sh] == opt, "alias " .. alias .. " of --" .. opt.long .. " is taken")
        short[sh] = opt
      end
    end
  end
  return long, short
end

-- Every extra spelling of opt: its aliases, and its Go name when that is a different one.
function M.alias_list(opt)
  local list = {}
  for _, a in ipairs(opt.aliases or {}) do list[#list + 1] = a end
  if opt.go_name and opt.go_name ~= "--" .. opt.long then
    local known = false
    for _, a in ipairs(list) do known = known or a == opt.go_name end
    if not known then list[#list + 1] = opt.go_name end
  end
  return list
end

local function long_names(spec)
  local names = {}
  for _, opt in ipairs(spec) do
    names[#names + 1] = opt.long
    for _, a in ipairs(M.alias_list(opt)) do
      local l = a:match("^%-%-(.+)$")
      if l then names[#names + 1] = l end
    end
  end
  return names
end

local function display(opt)
  return "--" .. opt.long
end

local function unknown(spec, token)
  local word = token:match("^%-%-?([^=]*)")
  local hint = M.suggest(word, long_names(spec))
  local msg = "unknown option " .. shown(token:match("^[^=]*"))
  if hint then msg = msg .. " (did you mean --" .. hint .. "?)" end
  return msg
end

-- Records one occurrence of opt (value is nil for a flag).
local function store(result, opt, value)
  local key = key_of(opt)
  if not opt.value then
    if opt.multiple then
      result[key] = (result[key] or 0) + 1
    else
      result[key] = true
    end
    return true
  end
  local check = opt.check
  if type(check) == "table" then check = M.choice(check) end
  local v, why = value, nil
  if check then v, why = check(value) end
  if v == nil then
    return nil, string.format("option %s: bad value '%s' (%s)", display(opt), shown(value), why or "rejected")
  end
  if opt.multiple then
    result[key] = result[key] or {}
    table.insert(result[key], v)
  elseif result[key] ~= nil then
    return nil, "option " .. display(opt) .. " given more than once"
  else
    result[key] = v
  end
  return true
end

-- The next word is the option's value unless it looks like another option: `--log-file -v`
-- is a forgotten path, not a file named "-v". Negative numbers and "-" still pass, so
-- `--concurrency -1` gets the better complaint about its value.
local function looks_like_value(word)
  return word ~= nil and (word == "-" or not word:match("^%-") or word:match("^%-%d") ~= nil)
end

-- Parses argv[first..] against spec into `result` (a table, filled in place).
-- Options and positionals may mix; "--" ends options. With `stop_at_positional`, parsing
-- stops at the first positional (used for the global options before a command name).
-- Returns result, positionals, index of the first unparsed word
--      | nil, message, the offending word
function M.parse(argv, spec, opts)
  opts = opts or {}
  local long, short = index(spec)
  local result = opts.result or {}
  local positional = {}
  local i = opts.first or 1
  while i <= #argv do
    local word = argv[i]
    if word == "--" then
      if opts.stop_at_positional then return result, positional, i end
      for j = i + 1, #argv do positional[#positional + 1] = argv[j] end
      return result, positional, #argv + 1
    elseif word:sub(1, 2) == "--" then
      local name, inline = word:match("^%-%-([^=]+)=(.*)$")
      name = name or word:sub(3)
      local opt = long[name]
      if not opt then return nil, unknown(spec, word), word end
      local value
      if opt.value then
        if inline then
          value = inline
        elseif looks_like_value(argv[i + 1]) then
          i = i + 1
          value = argv[i]
        else
          return nil, string.format("option %s needs a value (%s)", display(opt), opt.value), word
        end
      elseif inline then
        return nil, "option " .. display(opt) .. " takes no value", word
      end
      local ok, err = store(result, opt, value)
      if not ok then return nil, err, word end
    elseif word:sub(1, 1) == "-" and #word > 1 then
      -- a bundle of short flags (-vq); a short option with a value takes the rest or the next word
      local j = 2
      while j <= #word do
        local c = word:sub(j, j)
        local opt = short[c]
        if not opt then
          local hint = #word > 2 and M.suggest(word:sub(2), long_names(spec))
          local msg = "unknown option -" .. c .. (#word > 2 and (" in " .. word) or "")
          if hint then msg = msg .. " (did you mean --" .. hint .. "?)" end
          return nil, msg, word
        end
        local value
        if opt.value then
          if j < #word then
            value = word:sub(j + 1)
          elseif looks_like_value(argv[i + 1]) then
            i = i + 1
            value = argv[i]
          else
            return nil, string.format("option -%s needs a value (%s)", c, opt.value), word
          end
          j = #word
        end
        local ok, err = store(result, opt, value)
        if not ok then return nil, err, word end
        j = j + 1
      end
    else
      if opts.stop_at_positional then return result, positional, i end
      positional[#positional + 1] = word
    end
    i = i + 1
  end
  return result, positional, i
end

-- Fills in what was not given: declared defaults, 0 for counting flags, false for flags,
-- an empty list for collecting options. Returns result.
function M.apply_defaults(result, spec)
  for _, opt in ipairs(spec) do
    local key = key_of(opt)
    if result[key] == nil then
      if opt.default ~= nil then
        result[key] = opt.default
      elseif not opt.value then
        result[key] = opt.multiple and 0 or false
      elseif opt.multiple then
        result[key] = {}
      end
    end
  end
  return result
end

-- The option table of a --help text, rendered from the spec so the two cannot disagree.
function M.help(spec)
  local rows, width = {}, 0
  for _, opt in ipairs(spec) do
    local left = (opt.short and ("-" .. opt.short .. ", ") or "    ") .. "--" .. opt.long
    if opt.value then left = left .. " " .. opt.value end
    local right = opt.help or ""
    local extra = {}
    for _, al in ipairs(opt.aliases or {}) do
      if al ~= opt.go_name then extra[#extra + 1] = al end
    end
    if #extra > 0 then right = right .. " (also " .. table.concat(extra, ", ") .. ")" end
    if opt.go_name and opt.go_name ~= "--" .. opt.long then
      right = right .. " (the Go tool's " .. opt.go_name .. ")"
    end
    if opt.multiple then right = right .. (opt.value and " (repeatable)" or "") end
    if opt.default ~= nil then right = right .. " (default: " .. tostring(opt.default) .. ")" end
    rows[#rows + 1] = { left, right }
    width = math.max(width, #left)
  end
  local lines = {}
  for _, row in ipairs(rows) do
    lines[#lines + 1] = "  " .. pad(row[1], width) .. "  " .. row[2]
  end
  return table.concat(lines, "\n")
end

M.key_of = key_of

return M
