-- Specs of cargoship.json: stable output, and always valid UTF-8 whatever bytes come in.
local json = require "cargoship.json"

describe("json.encode", function()
  it("sorts keys and marks arrays", function()
    assert.are.equal('{"a":[],"b":[1,2],"c":null}', json.encode({ c = json.null, b = { 1, 2 }, a = json.array() }))
  end)

  it("keeps valid UTF-8 as it is", function()
    assert.are.equal('"é—\u{10FFFF}"', json.encode("é—\u{10FFFF}"))
  end)

  it("replaces every byte that starts no valid character with U+FFFD", function()
    local cases = {
      { "\255", "\u{FFFD}" },                       -- never valid
      { "a\233b", "a\u{FFFD}b" },                    -- Latin-1 é
      { "ab\226\130", "ab\u{FFFD}\u{FFFD}" },        -- cut inside a character
      { "\128\128x", "\u{FFFD}\u{FFFD}x" },          -- stray continuation bytes
      { "\192\175", "\u{FFFD}\u{FFFD}" },            -- overlong "/"
      { "\237\160\128", "\u{FFFD}\u{FFFD}\u{FFFD}" } -- a surrogate
    }
    for _, c in ipairs(cases) do
      local out = json.encode(c[1])
      assert.are.equal('"' .. c[2] .. '"', out)
      assert.truthy(utf8.len(out))
    end
  end)

  it("escapes control characters", function()
    assert.are.equal('"a\\u0000b\\n"', json.encode("a\0b\n"))
  end)
end)

describe("json.write", function()
  it("writes the very text encode makes, in runs, never the whole at once", function()
    local doc = { hosts = {}, name = "c\n1", n = 1.5, none = json.null, empty = json.array() }
    for i = 1, 3000 do doc.hosts[i] = { host = "h" .. i, ok = i % 2 == 0, writes = i, error = json.null } end
    local runs = {}
    json.write({ write = function(_, s) runs[#runs + 1] = s end }, doc)
    assert.is_true(#runs > 2, "written in one piece")
    local whole = table.concat(runs)
    assert.are.equal(json.encode(doc), whole)
    for _, r in ipairs(runs) do assert.is_true(#r < #whole / 2) end
    assert.are.equal("h3000", require("cjson").decode(whole).hosts[3000].host)
  end)
end)
