-- cargoship.package.rpm: an .rpm file's header read locally (lead, signature, main header) and rpm's version rules.
--
-- M.read(path) -> {name, version, release, epoch, arch, requires, provides, files, sha256header} | nil, why
--   The file as rpm(8) lays it out (rpm's doc/manual/format): a 96-byte lead (magic ed ab ee db),
--   the signature header padded to 8 bytes, the main header; the payload after it is never
--   read. requires/provides = { {name, flags, version}, ... } (flags: rpm's RPMSENSE bits;
--   requires drop rpmlib(...) and the missing-ok ones), files = {[path] = true}, sha256header =
--   the signature header's SHA256 of the main header (hex; what `rpm -qp --qf %{SHA256HEADER}`
--   prints once rpm has checked it), nil when the file has none. Only the
--   headers' bytes are read, each bounded (MAX_ENTRIES index entries, MAX_DATA bytes of data),
--   and every index entry is checked against its store: a hostile file gives
--   "<path>: byte N: <what>", never an error thrown out of here.
-- rpm's version rules (what a requirement matches) are cargoship.facts.rpm_evr's.
local M = {}

M.MAX_ENTRIES = 65536            -- rpm's own bound on a header's tags (hdrchkTags)
M.MAX_DATA = 64 * 1024 * 1024    -- bytes of one header's data store

local RPMLIB, MISSINGOK = 1 << 24, 1 << 19
local SIG_SHA256 = 273

local TAG = { name = 1000, version = 1001, release = 1002, epoch = 1003, arch = 1022, oldfilenames = 1027,
  providename = 1047, requireflags = 1048, requirename = 1049, requireversion = 1050, provideflags = 1112,
  provideversion = 1113, dirindexes = 1116, basenames = 1117, dirnames = 1118 }

-- type -> size of one element (strings: 0, read up to their NUL)
local TYPES = { [0] = 1, [1] = 1, [2] = 1, [3] = 2, [4] = 4, [5] = 8, [6] = 0, [7] = 1, [8] = 0, [9] = 0 }
local ALIGN = { [3] = 2, [4] = 4, [5] = 8 }

local Reader = {}
Reader.__index = Reader

function Reader:take(n, what)
  local s = n > 0 and self.f:read(n) or ""
  if not s or #s < n then
    error({ at = self.pos, why = string.format("file ends inside the %s (%d bytes wanted, %d there)", what, n,
      s and #s or 0) })
  end
  self.pos = self.pos + n
  return s
end

local function fail(at, fmt, ...) error({ at = at, why = string.format(fmt, ...) }) end

-- one header structure (rpm's "header intro", index, data store) -> {[tag] = value} of the
-- wanted tags (every entry's place is checked; only those are decoded)
function Reader:header(what, wanted)
  local start = self.pos
  local intro = self:take(16, what .. " intro")
  if intro:sub(1, 3) ~= "\x8e\xad\xe8" then fail(start, "no %s here (magic 8e ad e8 missing)", what) end
  local n, size = string.unpack(">I4I4", intro, 9)
  if n < 1 or n > M.MAX_ENTRIES then fail(start + 8, "%s claims %d index entries (1..%d)", what, n, M.MAX_ENTRIES) end
  if size > M.MAX_DATA then fail(start + 12, "%s claims %d bytes of data (at most %d)", what, size, M.MAX_DATA) end
  local index = self:take(16 * n, what .. " index")
  local store_at = self.pos
  local data = self:take(size, what .. " data")
  local tags = {}
  for i = 0, n - 1 do
    local at = start + 16 + 16 * i
    local tag, typ, off, count = string.unpack(">I4I4I4I4", index, 16 * i + 1)
    local esize = TYPES[typ]
    if not esize then fail(at, "%s entry %d (tag %d) has unknown type %d", what, i, tag, typ) end
    if off >= size and not (off == size and count == 0) then
      fail(at, "%s entry %d (tag %d): offset %d is outside its %d-byte data", what, i, tag, off, size)
    end
    if count > size then
      fail(at, "%s entry %d (tag %d): count %d exceeds its %d-byte data", what, i, tag, count, size)
    end
    local v
    if not wanted[tag] then
      v = nil
    elseif esize == 0 then
      if typ == 6 and count ~= 1 then fail(at, "%s entry %d (tag %d): a string with count %d", what, i, tag, count) end
      v = {}
      local p = off + 1
      for k = 1, count do
        local z = data:find("\0", p, true)
        if not z then fail(store_at + p - 1, "%s entry %d (tag %d): string %d runs past the data", what, i, tag, k) end
        v[k] = data:sub(p, z - 1)
        p = z + 1
      end
      if typ == 6 then v = v[1] end
    else
      if ALIGN[typ] and off % ALIGN[typ] ~= 0 then
        fail(at, "%s entry %d (tag %d): offset %d not aligned to %d", what, i, tag, off, ALIGN[typ])
      end
      if off + esize * count > size then
        fail(at, "%s entry %d (tag %d): %d values at offset %d run past the %d-byte data", what, i, tag, count, off,
          size)
      end
      if typ == 3 or typ == 4 or typ == 5 then
        v = {}
        local fmt = typ == 3 and ">I2" or typ == 4 and ">I4" or ">i8"
        for k = 1, count do v[k] = string.unpack(fmt, data, off + 1 + esize * (k - 1)) end
      else
        v = data:sub(off + 1, off + count)
      end
    end
    tags[tag] = v
  end
  return tags, 16 + 16 * n + size
end

local function deps(h, names, flags, versions, where)
  local n, f, v = h[names] or {}, h[flags] or {}, h[versions] or {}
  if type(n) ~= "table" or type(f) ~= "table" or type(v) ~= "table" then
    error({ at = where, why = "a dependency tag of the wrong type" })
  end
  local out = {}
  for i, name in ipairs(n) do
    if type(name) ~= "string" or math.type(f[i] or 0) ~= "integer" or type(v[i] or "") ~= "string" then
      error({ at = where, why = "a dependency tag of the wrong type" })
    end
    out[i] = { name = name, flags = f[i] or 0, version = v[i] ~= "" and v[i] or nil }
  end
  return out
end

local function str(h, tag, what, at)
  local v = h[tag]
  if type(v) ~= "string" then fail(at, "main header has no %s string", what) end
  return v
end

local function parse(r, path)
  local lead = r:take(96, "lead")
  if lead:sub(1, 4) ~= "\xed\xab\xee\xdb" then fail(0, "not an rpm file (lead magic ed ab ee db missing)") end
  local sig, sig_len = r:header("signature header", { [SIG_SHA256] = true })
  local pad = (8 - sig_len % 8) % 8
  r:take(pad, "signature header padding")
  local main_at = r.pos
  local wanted = {}
  for _, t in pairs(TAG) do wanted[t] = true end
  local h = r:header("main header", wanted)
  local info = { path = path, name = str(h, TAG.name, "Name", main_at), version = str(h, TAG.version, "Version",
    main_at), release = str(h, TAG.release, "Release", main_at), arch = type(h[TAG.arch]) == "string" and
    h[TAG.arch] or nil }
  local digest = sig[SIG_SHA256]
  info.sha256header = type(digest) == "string" and digest:match("^%x+$") and #digest == 64 and digest or nil
  local e = h[TAG.epoch]
  info.epoch = type(e) == "table" and e[1] or nil
  info.provides = deps(h, TAG.providename, TAG.provideflags, TAG.provideversion, main_at)
  info.requires = {}
  for _, d in ipairs(deps(h, TAG.requirename, TAG.requireflags, TAG.requireversion, main_at)) do
    if d.flags & (RPMLIB | MISSINGOK) == 0 and not d.name:find("^rpmlib%(") then
      info.requires[#info.requires + 1] = d
    end
  end
  info.files = {}
  local base, dirs, idx = h[TAG.basenames], h[TAG.dirnames], h[TAG.dirindexes]
  if type(base) == "table" then
    if type(dirs) ~= "table" or type(idx) ~= "table" or #idx ~= #base then
      fail(main_at, "main header: file names without matching dir names and indexes")
    end
    for i, b in ipairs(base) do
      local d = math.type(idx[i]) == "integer" and dirs[idx[i] + 1]
      if type(d) ~= "string" or type(b) ~= "string" then
        fail(main_at, "main header: file %d names dir %s of %d", i, tostring(idx[i]), #dirs)
      end
      info.files[d .. b] = true
    end
  elseif type(h[TAG.oldfilenames]) == "table" then
    for _, p in ipairs(h[TAG.oldfilenames]) do info.files[p] = true end
  end
  return info
end

function M.read(path)
  local f, oerr = io.open(path, "rb")
  if not f then return nil, tostring(oerr) end
  local r = setmetatable({ f = f, pos = 0 }, Reader)
  local ok, res = pcall(parse, r, path)
  f:close()
  if ok then return res end
  if type(res) == "table" then return nil, string.format("%s: byte %d: %s", path, res.at, res.why) end
  return nil, path .. ": " .. tostring(res)
end

return M
