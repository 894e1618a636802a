-- Interop with Debian's real ansible-vault and age, keys and ciphertexts made at test time:
-- theirs decrypt here, ours decrypt there, and wrong keys fail clearly.
local secrets = require "cargoship.secrets"
local av = require "cargoship.secrets.ansible_vault"
local age = require "cargoship.secrets.age"
local util = require "cargoship.util"
local support = require "unit.commands.support"

local q = util.quote

-- stdin a /dev/null of its own: Ansible refuses a non-blocking stdin, and the one ctest hands
-- every test is shared with the lab specs' ssh clients beside it (ctest -j), which set it so
local function sh(cmd)
  local p = assert(io.popen(cmd .. " </dev/null 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

local function tool(name)
  local _, code = sh("command -v " .. name)
  assert(code == 0, name .. " is missing: run contrib/deps.sh (Debian packages ansible-core and age)")
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

local dir
setup(function()
  tool("ansible-vault"); tool("age"); tool("age-keygen"); tool("ssh-keygen")
  dir = support.temp_dir()
  write(dir .. "/pw", "correct horse\n")
  assert(select(2, sh("age-keygen -o " .. q(dir .. "/id.txt"))) == 0)
  assert(select(2, sh("ssh-keygen -q -t ed25519 -N '' -C op@lab -f " .. q(dir .. "/ssh"))) == 0)
end)
teardown(function() support.remove_tree(dir) end)

local SECRETS = { "s3cr€t \"pass\"", "line one\nline two\n", "", string.rep("x", 70000) }

describe("ansible-vault interop", function()
  it("decrypts what ansible-vault encrypt wrote, 1.1 and 1.2 (vault id)", function()
    for i, s in ipairs(SECRETS) do
      local plain, ct = dir .. "/p" .. i, dir .. "/c" .. i
      write(plain, s)
      local out, code = sh("ansible-vault encrypt --vault-password-file " .. q(dir .. "/pw") .. " --output "
        .. q(ct) .. " " .. q(plain))
      assert.equal(0, code, out)
      assert.equal(s, av.decrypt(read(ct), "correct horse"))
    end
    local out, code = sh("ansible-vault encrypt --vault-id dev@" .. q(dir .. "/pw") .. " --output "
      .. q(dir .. "/c12") .. " " .. q(dir .. "/p1"))
    assert.equal(0, code, out)
    local text = read(dir .. "/c12")
    assert.matches("^%$ANSIBLE_VAULT;1%.2;AES256;dev\n", text)
    assert.equal(SECRETS[1], av.decrypt(text, "correct horse"))
  end)

  it("writes what ansible-vault decrypt reads", function()
    for i, s in ipairs(SECRETS) do
      local ct = dir .. "/ours" .. i
      write(ct, av.encrypt(s, "correct horse", i == 2 and "prod" or nil))
      local out, code = sh("ansible-vault decrypt --vault-password-file " .. q(dir .. "/pw") .. " --output "
        .. q(dir .. "/back" .. i) .. " " .. q(ct))
      assert.equal(0, code, out)
      assert.equal(s, read(dir .. "/back" .. i))
    end
  end)

  it("says the password is wrong, and never decrypts with it", function()
    local plain, why = av.decrypt(av.encrypt("x", "right"), "wrong")
    assert.is_nil(plain)
    assert.matches("wrong vault password", why)
  end)
end)

describe("age interop", function()
  local function recipient()
    return (sh("age-keygen -y " .. q(dir .. "/id.txt")):gsub("%s+$", ""))
  end

  it("decrypts what age -a wrote, to an X25519 and an ssh-ed25519 key", function()
    for i, s in ipairs(SECRETS) do
      write(dir .. "/ap" .. i, s)
      local out, code = sh("age -a -r " .. q(recipient()) .. " -R " .. q(dir .. "/ssh.pub") .. " -o "
        .. q(dir .. "/ac" .. i) .. " " .. q(dir .. "/ap" .. i))
      assert.equal(0, code, out)
      local text = read(dir .. "/ac" .. i)
      assert.equal(s, age.decrypt(text, assert(age.parse_identities(read(dir .. "/id.txt")))))
      assert.equal(s, age.decrypt(text, assert(age.parse_identities(read(dir .. "/ssh")))))
    end
  end)

  it("writes what age -d reads, with either identity", function()
    local rs = { assert(age.parse_recipient(recipient())), assert(age.parse_recipient(read(dir .. "/ssh.pub"))) }
    for i, s in ipairs(SECRETS) do
      write(dir .. "/ao" .. i, age.encrypt(s, rs))
      for _, id in ipairs({ "id.txt", "ssh" }) do
        -- a redirect, not -o: age creates no -o file for an empty plaintext
        local out, code = sh("age -d -i " .. q(dir .. "/" .. id) .. " " .. q(dir .. "/ao" .. i) .. " > "
          .. q(dir .. "/ab" .. i))
        assert.equal(0, code, out)
        assert.equal(s, read(dir .. "/ab" .. i))
      end
    end
  end)

  it("names no match for a wrong identity, and refuses a tampered header", function()
    local other = dir .. "/other.txt"
    sh("age-keygen -o " .. q(other))
    local text = age.encrypt("x", { assert(age.parse_recipient(recipient())) })
    local plain, why = age.decrypt(text, assert(age.parse_identities(read(other))))
    assert.is_nil(plain)
    assert.matches("no identity matches", why)
    plain = age.decrypt(text:gsub("YWdl", "YWdm", 1), assert(age.parse_identities(read(dir .. "/id.txt"))))
    assert.is_nil(plain)
  end)

  it("round-trips bech32 keys as age-keygen prints them", function()
    local r = assert(age.parse_recipient(recipient()))
    assert.equal(recipient(), age.recipient_string(r))
    local ids = assert(age.parse_identities(read(dir .. "/id.txt")))
    assert.equal(recipient(), age.recipient_string({ kind = "X25519", pk = ids[1].pk }))
  end)
end)

describe("secrets.kind", function()
  it("tells the formats apart by header", function()
    assert.equal("ansible-vault", secrets.kind("  $ANSIBLE_VAULT;1.1;AES256\n00"))
    assert.equal("age", secrets.kind("\n-----BEGIN AGE ENCRYPTED FILE-----\n"))
    assert.is_nil(secrets.kind("plain"))
  end)
end)
