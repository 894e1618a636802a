-- target_archive.lua - fuzz target: the package reader's archive half, the C entry points as they are
-- (archive.list, archive.extract whole and of one member) on a hostile archive: path traversal,
-- links out of the tree, huge members, a decompression bomb (the harness caps a file at 256 KiB:
-- past it, a write fails with EFBIG, which extract must report like any error).
-- Oracle: nothing is ever written outside the destination, no link or device is ever created, a
-- failure is nil + a message; every listed entry of a successful extract exists. A finding: any raise.
local archive = require "cargoship.archive"
local fuzz = require "fuzz"

local function run(_, path, scratch)
  local box = scratch .. "/box"
  fuzz.rmtree(box)
  fuzz.mkdir(box)
  local dest = box .. "/d"
  fuzz.mkdir(dest)
  local list, lerr = archive.list(path)
  assert(list or type(lerr) == "string", "list failed without a message")
  local entries, err = archive.extract(path, dest)
  local tree = fuzz.tree(box)
  for rel, kind in pairs(tree) do
    assert(rel == "d" or rel:sub(1, 2) == "d/", "written outside the destination: " .. rel)
    assert(kind == "file" or kind == "dir", "extract created a " .. kind .. ": " .. rel)
  end
  if entries then
    for _, e in ipairs(entries) do
      local parts = { "d" }   -- the name as the file system spells it: no empty or "." components
      for p in e.name:gmatch("[^/]+") do
        if p ~= "." then parts[#parts + 1] = p end
      end
      assert(tree[table.concat(parts, "/")], "listed but not extracted: " .. e.name)
    end
  else
    assert(type(err) == "string", "extract failed without a message")
  end
  -- one member to a named file (what package verification reads)
  if list then
    for _, e in ipairs(list) do
      if e.type == "file" then
        local one, oerr = archive.extract(path, dest, e.name, box .. "/one")
        assert(one or type(oerr) == "string", "member extract failed without a message")
        break
      end
    end
  end
  fuzz.rmtree(box)
end

return { file = "input.tar", run = run }
