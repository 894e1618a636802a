-- In-place edits in the corners of YAML: flow mappings, anchors, tags, aliases, folded and
-- chomped blocks, UTF-8 before the value, a second document, no final newline.
local support = require "unit.commands.support"
local config = require "cargoship.config"
local yaml = require "cargoship.yaml"

local ENV = { CARGOSHIP_VAULT_PASSWORD = "pw" }
local KEYS = { env = function(n) return ENV[n] end, required = true }

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

local dir
setup(function() dir = support.temp_dir() end)
teardown(function() support.remove_tree(dir) end)

-- Encrypts, checks the values decrypt to `want` and that decrypting restores `text` exactly
-- (or `back` when the value's quoting cannot be known again).
local function round_trip(text, want, back, extra)
  local file = dir .. "/c.yaml"
  write(file, text)
  local argv = { "vault", "encrypt", file }
  for _, a in ipairs(extra or {}) do table.insert(argv, 3, a) end
  local code, out, err = support.run(argv, ENV)
  assert.equal(0, code, err)
  assert.matches("encrypted", out)
  local enc = read(file)
  local c, errs = config.load(file, { decrypt = KEYS })
  assert.is_truthy(c, errs and config.format_errors(errs))
  for i, w in pairs(want) do
    for k, v in pairs(w) do
      local block = (k == "ca") and c.registries[i].tls or c.registries[i].auth
      assert.equal(v, block[k])
    end
  end
  code, out, err = support.run({ "vault", "decrypt", file }, ENV)
  assert.matches("decrypted", out)
  assert.equal(0, code, err)
  assert.equal(back or text, read(file))
  return enc
end

local HEAD = "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata:\n  name: lab\n"
local HOSTS = "  hosts:\n    - role: controller\n      localhost: true\n"

describe("vault edits", function()
  it("keeps flow mappings flow, and quotes what they hold", function()
    local text = HEAD .. "spec:\n" .. HOSTS .. "  config:\n    loadbalancer: lb.example\n"
      .. "    registries: [{name: r, auth: {user: \"ü ser\", pass: 'it''s'}}]\n"
    local enc = round_trip(text, { { user = "ü ser", pass = "it's" } }, (text:gsub("'it''s'", '"it\'s"')))
    assert.matches("registries: [{name: r, auth: {user: \"$ANSIBLE_VAULT;1.1;AES256\\n", enc, 1, true)
  end)

  it("keeps anchors, tags and chomping, and skips aliases (their anchor carries the change)", function()
    local text = HEAD .. "spec:\n  config:\n    loadbalancer: lb.example # ünïcödé before\n    registries:\n"
      .. "      - name: a\n        auth:\n          user: &u !!str shared\n          pass: |-\n            no newline\n"
      .. "            at the end\n      - name: b\n        auth:\n          user: *u\n          pass: >\n"
      .. "            folded\n            text\n\n" .. HOSTS
    -- a folded block comes back as the literal block of the same value
    local back = text:gsub(">\n            folded\n            text\n", "|\n            folded text\n")
    local enc = round_trip(text, { { user = "shared", pass = "no newline\nat the end" }, { user = "shared",
      pass = "folded text\n" } }, back)
    assert.matches("user: &u !!str |\n", enc, 1, true)
    assert.matches("user: *u\n", enc, 1, true)
  end)

  it("writes values that a literal block cannot carry as double-quoted strings", function()
    local text = HEAD .. "spec:\n  config:\n    loadbalancer: lb.example\n    registries:\n      - name: a\n"
      .. "        auth:\n          user: \"  leading\"\n          pass: \"new\\nline, bell\\a\"\n" .. HOSTS
    round_trip(text, { { user = "  leading", pass = "new\nline, bell\a" } }, (text:gsub("\\a", "\\x07")))
  end)

  it("finds the cluster in a second document and keeps a file without a final newline so", function()
    local text = "# first\nkind: Other\n---\n" .. HEAD .. "spec:\n" .. HOSTS .. "  config:\n    loadbalancer: lb\n"
      .. "    registries:\n      - name: a\n        auth: {token: t0k}"
    round_trip(text, { { token = "t0k" } })
  end)

  it("records age recipients inside a flow metadata mapping", function()
    local p = io.popen("age-keygen 2>/dev/null")
    local id = p:read("a")
    p:close()
    local rec = assert(id:match("public key: (age1%w+)"), "age-keygen is missing: run contrib/deps.sh")
    local file = dir .. "/f.yaml"
    local text = "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: lab}\nspec:\n  config:\n"
      .. "    loadbalancer: lb\n    registries:\n      - {name: a, auth: {token: tk}}\n" .. HOSTS
    write(file, text)
    assert.equal(0, (support.run({ "vault", "encrypt", "-r", rec, file })))
    local enc = read(file)
    assert.matches("metadata: {name: lab, encryption: {age: {recipients: [\"" .. rec .. "\"], lastModified: \"",
      enc, 1, true)
    local docs = assert(yaml.load(enc))
    assert.equal(rec, docs[1].metadata.encryption.age.recipients[1])
    assert.is_truthy(config.load(file, { decrypt = { env = function() end } }))
  end)
end)

describe("yaml.spans", function()
  it("gives byte ranges, UTF-8 included, for keys, scalars and collections", function()
    local text = "a: \"héé\"  # c\nb:\n  - x: 1\n"
    local nodes = assert(yaml.spans(text))
    local seen = {}
    for _, n in ipairs(nodes) do
      seen[#seen + 1] = n.kind .. " " .. table.concat(n.path, ".") .. " " .. text:sub(n.start, n.stop - 1)
    end
    assert.same({ "map  " .. text, "key a a", "scalar a \"héé\"", "key b b", "seq b - x: 1\n", "map b.1 x: 1\n",
      "key b.1.x x", "scalar b.1.x 1" }, seen)
  end)

  it("reports a syntax error instead of nodes", function()
    local nodes, why = yaml.spans("a: [1, 2\n")
    assert.is_nil(nodes)
    assert.matches("^%d+:%d+: ", why)
  end)
end)
