-- target_yaml.lua - fuzz target: the YAML loader (yaml.load, yaml.spans, yaml.dump of what loaded).
-- Fine: documents, or nil + "name:line:col: message", "syntax". A finding: any raise, an unlocated error.
local yaml = require "cargoship.yaml"

local function run(data)
  local docs, msg, code = yaml.load(data, "fuzz.yaml")
  if not docs then
    assert(code == "syntax", "load failed without the syntax code: " .. tostring(code))
    assert(type(msg) == "string" and msg:match("^fuzz%.yaml:%d+:%d+: ."), "unlocated load error: " .. tostring(msg))
  else
    assert(type(docs.n) == "number", "no document count")
    for i = 1, docs.n do
      -- what loaded dumps again (dump raises only on values no YAML text can give)
      local text = yaml.dump(docs[i])
      assert(type(text) == "string", "dump gave no text")
      if docs[i] ~= nil then yaml.where(docs, i) end
    end
  end
  local spans, serr = yaml.spans(data)
  assert(spans or type(serr) == "string", "spans failed without a message")
end

return { run = run }
