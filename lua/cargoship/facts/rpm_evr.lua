-- cargoship.facts.rpm_evr: rpm's version rules, to judge a host's rpm answers against requirements read locally.
--
-- M.vercmp(a, b) -> -1 | 0 | 1: rpmvercmp (rpm's lib/rpmvercmp.c, ~ and ^ included).
-- M.evrcmp(a, b) -> -1 | 0 | 1: "[E:]V[-R]" strings, a missing epoch is 0, releases compared
--   only when both sides have one.
-- M.satisfies(provide, require) -> bool: rpm's range overlap (lib/rpmds.c rpmdsCompare) of a
--   provide {name, flags, version} and a requirement of the same name; no version on either: true.
-- M.text(dep) -> "name >= 1.2": a dependency as rpm prints it.
-- M.outside(infos) -> { {name, flags, version, text, by = {package, ...}}, ... }: the Requires of a
--   set of rpm headers (cargoship.package.rpm.read) that no member satisfies (its Provides, its
--   files), once each.
-- flags are rpm's RPMSENSE bits: LESS 2, GREATER 4, EQUAL 8.
local M = {}

M.LESS, M.GREATER, M.EQUAL = 2, 4, 8

local function alnum(c) return c:match("^[%w]$") ~= nil end

function M.vercmp(a, b)
  if a == b then return 0 end
  local i, j = 1, 1
  while i <= #a or j <= #b do
    while i <= #a and not alnum(a:sub(i, i)) and a:sub(i, i) ~= "~" and a:sub(i, i) ~= "^" do i = i + 1 end
    while j <= #b and not alnum(b:sub(j, j)) and b:sub(j, j) ~= "~" and b:sub(j, j) ~= "^" do j = j + 1 end
    local ca, cb = a:sub(i, i), b:sub(j, j)
    if ca == "~" or cb == "~" then
      if ca ~= "~" then return 1 end
      if cb ~= "~" then return -1 end
      i, j = i + 1, j + 1
    elseif ca == "^" or cb == "^" then
      if ca == "" then return -1 end
      if cb == "" then return 1 end
      if ca ~= "^" then return 1 end
      if cb ~= "^" then return -1 end
      i, j = i + 1, j + 1
    else
      if ca == "" or cb == "" then break end
      local pat = ca:match("%d") and "^%d+" or "^%a+"
      local sa = a:match(pat, i)
      local sb = b:match(pat, j) or ""
      i, j = i + #sa, j + #sb
      if sb == "" then return pat == "^%d+" and 1 or -1 end
      if pat == "^%d+" then
        sa, sb = sa:gsub("^0+", ""), sb:gsub("^0+", "")
        if #sa ~= #sb then return #sa > #sb and 1 or -1 end
      end
      if sa ~= sb then return sa > sb and 1 or -1 end
    end
  end
  if i > #a and j > #b then return 0 end
  return i > #a and -1 or 1
end

local function evr(s)
  local e, rest = s:match("^(%d+):(.*)$")
  rest = rest or s
  local v, r = rest:match("^(.*)-([^-]*)$")
  return tonumber(e) or 0, v or rest, r
end

function M.evrcmp(a, b)
  local ea, va, ra = evr(a)
  local eb, vb, rb = evr(b)
  if ea ~= eb then return ea > eb and 1 or -1 end
  local c = M.vercmp(va, vb)
  if c ~= 0 or not ra or not rb or ra == "" or rb == "" then return c end
  return M.vercmp(ra, rb)
end

local SENSE = M.LESS | M.GREATER | M.EQUAL

function M.satisfies(p, r)
  local pf, rf = (p.flags or 0) & SENSE, (r.flags or 0) & SENSE
  if pf == 0 or rf == 0 or not p.version or not r.version then return true end
  local s = M.evrcmp(p.version, r.version)
  if s < 0 then return pf & M.GREATER ~= 0 or rf & M.LESS ~= 0 end
  if s > 0 then return pf & M.LESS ~= 0 or rf & M.GREATER ~= 0 end
  return (pf & rf & SENSE) ~= 0
end

function M.text(d)
  local f = (d.flags or 0) & SENSE
  if f == 0 or not d.version then return d.name end
  local op = (f & M.LESS ~= 0 and "<" or "") .. (f & M.GREATER ~= 0 and ">" or "") .. (f & M.EQUAL ~= 0 and "=" or "")
  return d.name .. " " .. op .. " " .. d.version
end

function M.outside(infos)
  local out, seen = {}, {}
  local function inside(r)
    for _, i in ipairs(infos) do
      if i.files[r.name] then return true end
      for _, p in ipairs(i.provides) do
        if p.name == r.name and M.satisfies(p, r) then return true end
      end
    end
    return false
  end
  for _, i in ipairs(infos) do
    for _, r in ipairs(i.requires) do
      local t = M.text(r)
      local o = seen[t]
      if o then
        if o.by[#o.by] ~= i.name then o.by[#o.by + 1] = i.name end
      elseif not inside(r) then
        o = { name = r.name, flags = r.flags, version = r.version, text = t, by = { i.name } }
        seen[t] = o
        out[#out + 1] = o
      else
        seen[t] = { by = {} }
      end
    end
  end
  return out
end

return M
