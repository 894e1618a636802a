-- Specs of runtime/yaml.c as Lua sees it: load, load_file, positions, null, dump round-trips.
local yaml = require "cargoship.yaml"

local function write_temp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

-- Deep equality of loaded data: NaN equals NaN, integers and floats stay apart.
local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then
    if a ~= a and b ~= b then return true end
    return a == b and math.type(a) == math.type(b)
  end
  for k, v in pairs(a) do
    if not same(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

describe("yaml.load", function()
  it("gives a list of documents with n", function()
    local docs = assert(yaml.load("a: 1\n---\n- x\n"))
    assert.are.equal(2, docs.n)
    assert.are.same({ a = 1 }, docs[1])
    assert.are.same({ "x" }, docs[2])
  end)

  it("resolves plain scalars with the core schema, and keeps quoted ones strings", function()
    local d = assert(yaml.load([[
null1: ~
null2:
bool: True
int: -42
hex: 0xff
octal: 0o17
float: 2.5
exp: 1e3
inf: -.inf
word: yes
quoted: "42"
single: 'true'
folded: >-
  a
  b
str: !!str 0x10
flt: !!float 7
]]))[1]
    assert.is_true(yaml.is_null(d.null1))
    assert.is_true(yaml.is_null(d.null2))
    assert.are.equal("null", tostring(d.null1))
    assert.is_true(d.bool)
    assert.are.equal(math.tointeger(-42), d.int)
    assert.are.equal(255, d.hex)
    assert.are.equal(15, d.octal)
    assert.are.equal(2.5, d.float)
    assert.are.equal("float", math.type(d.exp))
    assert.are.equal(-math.huge, d.inf)
    assert.are.equal("yes", d.word)
    assert.are.equal("42", d.quoted)
    assert.are.equal("true", d.single)
    assert.are.equal("a b", d.folded)
    assert.are.equal("0x10", d.str)
    assert.are.equal("float", math.type(d.flt))
    assert.is_false(yaml.is_null(false))
    assert.is_false(yaml.is_null(nil))
  end)

  it("keeps mapping keys as their text", function()
    local d = assert(yaml.load("1: a\ntrue: b\n~: c\n"))[1]
    assert.are.same({ ["1"] = "a", ["true"] = "b", ["~"] = "c" }, d)
  end)

  it("names the file, line and column of a duplicate key", function()
    local d, err, code = yaml.load("a: 1\nb:\n  c: 1\n  c: 2\n", "hosts.yaml")
    assert.is_nil(d)
    assert.are.equal('hosts.yaml:4:3: duplicate key "c" (first at line 3)', err)
    assert.are.equal("syntax", code)
  end)

  it("names <string> when no name is given", function()
    local _, err = yaml.load("a: [")
    assert.matches("^<string>:%d+:%d+: ", err)
  end)

  it("raises on misuse", function()
    assert.has_error(function() yaml.load() end)
    assert.has_error(function() yaml.load({}) end)
    assert.has_error(function() yaml.where("x") end)
  end)
end)

describe("yaml positions", function()
  local docs = assert(yaml.load([[
cluster:
  name: demo
  hosts:
    - address: 10.0.0.1
      role: controller
    - {address: 10.0.0.2, role: worker}
]], "cluster.yaml"))
  local cluster = docs[1].cluster

  it("gives where a container starts", function()
    assert.are.same({ 2, 3 }, { yaml.where(cluster) })
    assert.are.same({ 4, 5 }, { yaml.where(cluster.hosts) })
    assert.are.same({ 6, 7 }, { yaml.where(cluster.hosts[2]) })
  end)

  it("gives where a value sits, by key or index", function()
    assert.are.same({ 2, 9 }, { yaml.where(cluster, "name") })
    assert.are.same({ 4, 7 }, { yaml.where(cluster.hosts, 1) })
    assert.are.same({ 5, 13 }, { yaml.where(cluster.hosts[1], "role") })
    assert.are.same({ 6, 17 }, { yaml.where(cluster.hosts[2], "address") })
  end)

  it("gives where a key is written", function()
    assert.are.same({ 5, 7 }, { yaml.key_where(cluster.hosts[1], "role") })
    assert.are.same({ 6, 27 }, { yaml.key_where(cluster.hosts[2], "role") })
  end)

  it("gives the document's name, and nil for what yaml did not make", function()
    assert.are.equal("cluster.yaml", yaml.name(cluster.hosts[2]))
    assert.is_nil(yaml.where({}))
    assert.is_nil(yaml.name({}))
    assert.is_nil(yaml.where(cluster, "missing"))
    assert.is_nil(yaml.key_where(cluster, "missing"))
  end)

  it("keeps the metadata in each container's own metatable, as plain data", function()
    local meta = getmetatable(cluster).__yaml
    assert.are.equal(2, meta.line)
    assert.are.equal(3, meta.col)
    assert.are.equal("map", meta.kind)
    assert.are.same({ line = 2, col = 3 }, meta.keys.name)
    assert.are.same({ line = 2, col = 9 }, meta.values.name)
    assert.are_not.equal(getmetatable(cluster.hosts[1]), getmetatable(cluster.hosts[2]))
    assert.is_nil(getmetatable(cluster).__index)
    assert.is_nil(getmetatable(cluster).__newindex)
  end)
end)

describe("yaml.load_file", function()
  it("loads a file under its path", function()
    local path = write_temp("a: [1, 2]\n")
    local docs = yaml.load_file(path)
    os.remove(path)
    assert.are.same({ a = { 1, 2 } }, docs[1])
    assert.are.equal(path, yaml.name(docs[1]))
  end)

  it("reports syntax errors with the path", function()
    local path = write_temp("a: 1\n  b: 2\n")
    local docs, err, code = yaml.load_file(path)
    os.remove(path)
    assert.is_nil(docs)
    assert.are.equal(path, err:sub(1, #path))
    assert.matches("^:2:%d+: ", err:sub(#path + 1))
    assert.are.equal("syntax", code)
  end)

  it("gives nil, \"path: read: ...\", \"io\" for an unreadable file", function()
    local docs, err, code = yaml.load_file("/nonexistent/cluster.yaml")
    assert.is_nil(docs)
    assert.are.equal("/nonexistent/cluster.yaml: read: No such file or directory", err)
    assert.are.equal("io", code)
  end)
end)

describe("yaml.dump", function()
  local awkward = { "yes", "no", "on", "0x10", "0o7", "0777", "1e3", "1.5", "-1", ".inf", "~", "a: b", "#x",
    " lead", "trail ", "multi\nline", "two\n\n", "", "null", "Null", "true", "<<", "- x", "[a]", "{a}",
    "*a", "&a", "!t", "%p", "@a", "`a`", "'q'", '"q"', "tab\there", "cr\r", "é ü", "\0nul", "---", "...",
    "a #b", "x:", "? y" }

  it("round-trips a nested structure with awkward strings", function()
    local value = {
      strings = awkward,
      numbers = { 0, -7, math.maxinteger, math.mininteger, 0.1, -0.0, 1e300, 3.0, math.huge },
      flags = { on = true, off = false, none = yaml.null },
      nested = { a = { b = { c = { "deep", { x = 1 } } } } },
      empty = {},
      ["key: with colon"] = "v",
      ["multi\nkey"] = "v",
      [""] = "empty key",
    }
    local text = yaml.dump(value)
    local docs = assert(yaml.load(text))
    assert.is_true(same(value, docs[1]), text)
  end)

  it("quotes every awkward string so that it loads back as that string", function()
    for _, s in ipairs(awkward) do
      local docs = assert(yaml.load(yaml.dump(s)))
      assert.are.equal(s, docs[1])
      docs = assert(yaml.load(yaml.dump({ [s] = s })))
      assert.are.equal(s, docs[1][s])
    end
  end)

  it("writes block style with sorted keys", function()
    assert.are.equal("a: 1\nb:\n- x\n- 'yes'\nc: {}\n", yaml.dump({ c = {}, b = { "x", "yes" }, a = 1 }))
  end)

  it("keeps a loaded empty list a list: `a: []` loads and dumps as `a: []`; a bare {} stays a mapping", function()
    local docs = assert(yaml.load("a: []\nb: {}\nc:\n- []\n"))
    assert.are.equal("a: []\nb: {}\nc:\n- []\n", yaml.dump(docs[1]))
    assert.are.equal("a: {}\n", yaml.dump({ a = {} }))
  end)

  it("round-trips random structures", function()
    math.randomseed(7)
    local pieces = { "a", " ", "\n", ":", "#", "'", '"', "-", "0", "1", ".", "é", "\t", "yes", "null" }
    local function rstring()
      local t = {}
      for i = 1, math.random(0, 8) do t[i] = pieces[math.random(#pieces)] end
      return table.concat(t)
    end
    local function rvalue(depth)
      local r = math.random(depth > 3 and 4 or 6)
      if r == 1 then return rstring() end
      if r == 2 then return math.random(-1000, 1000) end
      if r == 3 then return math.random() * 1e6 end
      if r == 4 then return math.random(2) == 1 end
      local t = {}
      for i = 1, math.random(0, 4) do
        if r == 5 then t[i] = rvalue(depth + 1) else t[rstring()] = rvalue(depth + 1) end
      end
      return t
    end
    for _ = 1, 500 do
      local v = rvalue(0)
      local text = yaml.dump(v)
      local docs = assert(yaml.load(text))
      assert.is_true(same(v, docs[1]), text)
    end
  end)

  it("raises on what YAML cannot carry", function()
    local cyclic = {}
    cyclic.self = cyclic
    assert.has_error(function() yaml.dump(cyclic) end, "yaml.dump: a table contains itself")
    assert.has_error(function() yaml.dump({ f = print }) end, "yaml.dump: cannot dump a function")
    assert.has_error(function() yaml.dump("\255") end)
    assert.has_error(function() yaml.dump({ [1] = "a", ["1"] = "b" }) end)
  end)
end)
