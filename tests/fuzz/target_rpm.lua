-- target_rpm.lua - fuzz target: an .rpm file's headers as the forecast reads them locally (package.rpm.read),
-- then its requirements as a set (facts.rpm_evr.outside, rpm's version rules on hostile versions).
-- Fine: a header, or nil + "<path>: byte N: why" (located). A finding: any raise, an unlocated error.
local rpm = require "cargoship.package.rpm"
local evr = require "cargoship.facts.rpm_evr"

local function run(_, path)
  local info, why = rpm.read(path)
  if not info then
    assert(type(why) == "string", "no reason")
    assert(why:sub(1, #path + 7) == path .. ": byte ", "an error without its byte: " .. why)
    return
  end
  assert(type(info.name) == "string" and type(info.version) == "string", "no name or version")
  for _, r in ipairs(evr.outside({ info })) do
    assert(type(r.text) == "string" and r.by[1] == info.name, "a requirement without its text or package")
  end
  -- the header's own versions against each other: the order is total and antisymmetric
  local vs = { info.version, info.release }
  for _, d in ipairs(info.provides) do vs[#vs + 1] = d.version or "" end
  for i = 1, math.min(#vs, 8) do
    for j = 1, math.min(#vs, 8) do
      assert(evr.vercmp(vs[i], vs[j]) == -evr.vercmp(vs[j], vs[i]), "vercmp not antisymmetric")
    end
  end
end

return { file = "input.rpm", run = run }
