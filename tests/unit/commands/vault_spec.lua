-- `cargoship vault` edits a cluster file's secrets in place: only the values change (diffed),
-- real ansible-vault and age read what it writes, wrong keys fail at file:line.
local support = require "unit.commands.support"
local config = require "cargoship.config"
local secrets = require "cargoship.secrets"
local util = require "cargoship.util"
local yaml = require "cargoship.yaml"

local q = util.quote

-- stdin a /dev/null of its own: Ansible refuses a non-blocking stdin, and the one ctest hands
-- every test is shared with the lab specs' ssh clients beside it (ctest -j), which set it so
local function sh(cmd)
  local p = assert(io.popen(cmd .. " </dev/null 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

-- Written for this issue: comments, an anchor, a flow mapping, a block CA, odd characters.
local CLUSTER = [[
# cluster with registry secrets
apiVersion: zarf.dev/v1alpha1
kind: ZarfCluster
metadata:
  name: lab   # the name
spec:
  config:
    loadbalancer: lab-api.example.internal
    registries:
      - name: docker.io
        auth:
          user: puller        # who pulls
          pass: "s3cr€t \"pass\"\tend"
      - name: reg.example:5000
        auth: {user: u2, pass: p-2, token: tok-2}
        tls:
          ca: &ca |
            -----BEGIN CERTIFICATE-----
            MIIBszCCAVmgAwIBAgIUQ2Vy
            -----END CERTIFICATE-----

      # a comment after the block
  hosts:
    - role: controller
      ssh:
        address: 192.0.2.10
]]

local VALUES = {
  { 1, "auth", "user", "puller" },
  { 1, "auth", "pass", "s3cr€t \"pass\"\tend" },
  { 2, "auth", "user", "u2" },
  { 2, "auth", "pass", "p-2" },
  { 2, "auth", "token", "tok-2" },
  { 2, "tls", "ca", "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2Vy\n-----END CERTIFICATE-----\n" },
}

local function value_at(text, v)
  local docs = assert(yaml.load(text))
  return docs[1].spec.config.registries[v[1]][v[2]][v[3]]
end

local dir, file, recipient
setup(function()
  dir = support.temp_dir()
  file = dir .. "/cluster.yaml"
  write(dir .. "/pw", "pw-one\n")
  write(dir .. "/pw2", "pw-two\n")
  assert(select(2, sh("age-keygen -o " .. q(dir .. "/id.txt"))) == 0, "age-keygen is missing: run contrib/deps.sh")
  assert(select(2, sh("ssh-keygen -q -t ed25519 -N '' -C op@lab -f " .. q(dir .. "/ssh"))) == 0)
  recipient = (sh("age-keygen -y " .. q(dir .. "/id.txt")):gsub("%s+$", ""))
end)
teardown(function() support.remove_tree(dir) end)

before_each(function()
  write(file, CLUSTER)
  assert(os.execute("chmod 0640 " .. q(file)))
end)

-- Every line diff(1) reports as removed from the original must hold an encryptable value
-- (the CA's block lines included): nothing else may change.
local function assert_only_values_changed(before_path, after_path)
  local out = sh("diff " .. q(before_path) .. " " .. q(after_path))
  local removed = 0
  for line in out:gmatch("[^\n]+") do
    if line:sub(1, 2) == "< " then
      removed = removed + 1
      local l = line:sub(3)
      local ok = l:match("^%s+user:") or l:match("^%s+pass:") or l:match("^%s+auth: {") or l:match("^%s+ca: &ca")
        or l:match("^%s+%-%-%-%-%-") or l:match("^%s+MIIB")
      assert.is_truthy(ok, "diff removed a line that holds no secret: " .. l)
    end
  end
  assert.is_true(removed > 0)
end

describe("cargoship vault encrypt", function()
  it("encrypts to age recipients in place, records them, keeps the mode, and age -d reads it", function()
    local code, out, err = support.run({ "vault", "encrypt", "-r", recipient, "-R", dir .. "/ssh.pub", file })
    assert.equal(0, code, err)
    assert.matches("6 values encrypted", out)
    local text = read(file)
    assert.equal("640", (sh("stat -c %a " .. q(file)):gsub("%s", "")))
    write(dir .. "/orig.yaml", CLUSTER)
    assert_only_values_changed(dir .. "/orig.yaml", file)
    -- comments and the anchor are where they were
    assert.matches("user: |        # who pulls\n", text, 1, true)
    assert.matches("ca: &ca |\n", text, 1, true)
    assert.matches("      # a comment after the block\n", text, 1, true)
    local docs = assert(yaml.load(text))
    local rec = docs[1].metadata.encryption.age
    assert.same({ recipient, (read(dir .. "/ssh.pub"):gsub("%s+$", "")) }, { rec.recipients[1], rec.recipients[2] })
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", rec.lastModified)
    for _, v in ipairs(VALUES) do
      local ct = value_at(text, v)
      assert.equal("age", secrets.kind(ct))
      write(dir .. "/v.age", ct)
      for _, id in ipairs({ "id.txt", "ssh" }) do
        local plain, rc = sh("age -d -i " .. q(dir .. "/" .. id) .. " " .. q(dir .. "/v.age"))
        assert.equal(0, rc, plain)
        assert.equal(v[4], plain)
      end
    end
    -- and back: decrypting restores the original byte for byte
    code, out, err = support.run({ "vault", "decrypt", "--age-identity-file", dir .. "/ssh", file })
    assert.equal(0, code, err)
    assert.matches("6 values decrypted", out)
    assert.equal(CLUSTER, read(file))
  end)

  it("encrypts with Ansible Vault, which ansible-vault decrypt reads", function()
    local code, _, err = support.run({ "vault", "encrypt", "--vault-password-file", dir .. "/pw", file })
    assert.equal(0, code, err)
    local text = read(file)
    assert.is_nil(text:find("encryption:", 1, true))
    for _, v in ipairs(VALUES) do
      write(dir .. "/v.vault", value_at(text, v))
      local plain, rc = sh("ansible-vault decrypt --vault-password-file " .. q(dir .. "/pw") .. " --output - "
        .. q(dir .. "/v.vault"))
      assert.equal(0, rc, plain)
      assert.equal(v[4], plain)
    end
    code, _, err = support.run({ "vault", "decrypt", file }, { CARGOSHIP_VAULT_PASSWORD = "pw-one" })
    assert.equal(0, code, err)
    assert.equal(CLUSTER, read(file))
  end)

  it("decrypts values made by the real tools, mixed in one file", function()
    write(dir .. "/p", "from-tools")
    sh("ansible-vault encrypt --vault-password-file " .. q(dir .. "/pw") .. " --output " .. q(dir .. "/c") .. " "
      .. q(dir .. "/p"))
    local vault_text = read(dir .. "/c")
    local age_text = sh("age -a -R " .. q(dir .. "/ssh.pub") .. " " .. q(dir .. "/p"))
    local function block(s) return "|\n" .. s:gsub("[^\n]+", "            %0") end
    local text = CLUSTER:gsub('pass: "s3cr€t \\"pass\\"\\tend"', function() return "pass: " .. block(vault_text) end)
      :gsub("user: puller        # who pulls", function() return "user: " .. block(age_text):gsub("\n$", "") end)
    write(file, text)
    local c, errs = config.load(file, { decrypt = { vault_password_file = dir .. "/pw",
      age_identity_files = { dir .. "/ssh" }, required = true } })
    assert.is_truthy(c, errs and config.format_errors(errs))
    assert.equal("from-tools", c.registries[1].auth.pass)
    assert.equal("from-tools", c.registries[1].auth.user)
    assert.is_truthy(#c.secrets >= 1)
    local listed = {}
    for _, s in ipairs(c.secrets) do listed[s] = true end
    assert.is_true(listed["from-tools"])
  end)
end)

describe("wrong or missing keys", function()
  before_each(function()
    local code, _, err = support.run({ "vault", "encrypt", "--vault-password-file", dir .. "/pw", file })
    assert.equal(0, code, err)
  end)

  it("vault decrypt with a wrong password names each value's file:line and writes nothing", function()
    local before = read(file)
    local code, _, err = support.run({ "vault", "decrypt", "--vault-password-file", dir .. "/pw2", file })
    assert.equal(1, code)
    assert.matches(file .. ":12:17: spec.config.registries%[0%].auth.user: cannot decrypt this Ansible Vault value:"
      .. " wrong vault password", err)
    assert.matches("nothing was written", err)
    assert.equal(before, read(file))
  end)

  it("validate and apply's load fail at the value's file:line with a wrong age identity", function()
    write(file, CLUSTER)
    assert.equal(0, (support.run({ "vault", "encrypt", "-r", recipient, file })))
    sh("age-keygen -o " .. q(dir .. "/other.txt"))
    local code, _, err = support.run({ "validate", "--age-identity-file", dir .. "/other.txt", file })
    assert.equal(1, code)
    assert.matches(file .. ":%d+:%d+: spec.config.registries%[1%].tls.ca: cannot decrypt this age value: no identity"
      .. " matches", err)
  end)

  it("apply's load needs a key for every value; validate leaves them encrypted", function()
    local c, errs = config.load(file, { decrypt = { env = function() return nil end, required = true } })
    assert.is_nil(c)
    assert.matches("no vault password was given %(%-%-vault%-password%-file", errs[1].message)
    assert.equal(12, errs[1].line)
    c = assert(config.load(file, { decrypt = { env = function() return nil end } }))
    assert.equal(6, #c.encrypted)
    assert.equal("ansible-vault", secrets.kind(c.registries[1].auth.pass))
  end)

  it("rekey moves Ansible Vault values to the new password", function()
    local code, out, err = support.run({ "vault", "rekey", "--vault-password-file", dir .. "/pw",
      "--new-vault-password-file", dir .. "/pw2", file })
    assert.equal(0, code, err)
    assert.matches("6 values rekeyed", out)
    assert.is_nil(config.load(file, { decrypt = { vault_password_file = dir .. "/pw", required = true } }))
    local c = assert(config.load(file, { decrypt = { vault_password_file = dir .. "/pw2", required = true } }))
    assert.equal("tok-2", c.registries[2].auth.token)
  end)
end)

describe("the loader's decrypt step", function()
  it("checks a decrypted tls.ca as a PEM certificate, at the value's line", function()
    local av = require "cargoship.secrets.ansible_vault"
    local ct = av.encrypt("not a certificate\n", "pw-one"):gsub("[^\n]+", "            %0")
    write(file, (CLUSTER:gsub("ca: &ca |\n.-%-%-%-%-%-END CERTIFICATE%-%-%-%-%-\n", function()
      return "ca: |\n" .. ct end)))
    local c, errs = config.load(file, { decrypt = { vault_password_file = dir .. "/pw" } })
    assert.is_nil(c)
    assert.equal(1, #errs)
    assert.equal(17, errs[1].line)
    assert.matches("spec.config.registries%[1%].tls.ca: after decryption: expected a PEM block", errs[1].text)
  end)

  it("names an unreadable identity file", function()
    assert.equal(0, (support.run({ "vault", "encrypt", "-r", recipient, file })))
    local c, errs = config.load(file, { decrypt = { age_identity_files = { dir .. "/nope" }, required = true } })
    assert.is_nil(c)
    assert.matches("cannot read the age identity file: .*nope", errs[1].message)
    assert.equal("spec.config.registries[0].auth.user", errs[1].path)
    local docs = assert(yaml.load(read(file)))
    assert.equal(yaml.where(docs[1].spec.config.registries[1].auth, "user"), errs[1].line)
  end)
end)

describe("decrypted values stay secret", function()
  it("apply registers every decrypted value for redaction before touching a host", function()
    assert.equal(0, (support.run({ "vault", "encrypt", "--vault-password-file", dir .. "/pw", file })))
    local apply = require "cargoship.commands.apply"
    local args = require "cargoship.cli.args"
    local saved = apply.pipeline
    -- a pipeline this build cannot load stops apply right after the cluster is loaded
    apply.pipeline = { name = "test", phases = { { 1, "unit.no_such_phase" } } }
    local redacted = {}
    local ctx = {
      log = { redact = function(_, v) if v then redacted[v] = true end end,
        debug = function() end, verbose = function() end, file_path = function() end },
      stderr = support.capture(), stdout = support.capture(), env = function() end,
      exit = require("cargoship.cli").EXIT, command = "apply",
      options = { vault_password_file = dir .. "/pw", age_identity_file = {} },
    }
    local ok, code = pcall(apply.run, ctx, { positional = { file }, options = args.apply_defaults({}, apply.options) })
    apply.pipeline = saved
    assert.is_true(ok, code)
    assert.equal(2, code, ctx.stderr.text())
    for _, v in ipairs(VALUES) do assert.is_true(redacted[v[4]], v[3]) end
  end)

  -- shorter secrets are not masked by substring (masking "u2" everywhere would show what it
  -- is: see log.MIN_MASKED); they are kept out of messages by field instead
  it("the real logger masks those long enough to mask safely, the CA's lines included", function()
    assert.equal(0, (support.run({ "vault", "encrypt", "--vault-password-file", dir .. "/pw", file })))
    local c = assert(config.load(file, { decrypt = { vault_password_file = dir .. "/pw" } }))
    local out = support.capture()
    local logger = require("cargoship.log").new({ stream = out, level = "debug" })
    for _, v in ipairs(c.secrets) do logger:redact(v) end
    logger:info("auth %s:%s token %s ca %s", c.registries[1].auth.user, c.registries[1].auth.pass,
      c.registries[2].auth.token, c.registries[2].tls.ca)
    local masked = 0
    for _, v in ipairs(VALUES) do
      if #v[4] >= require("cargoship.log").MIN_MASKED then
        assert.is_nil(out.text():find(v[4], 1, true), v[3])
        masked = masked + 1
      end
    end
    assert.is_true(masked >= 2, "the long pass and the CA are masked")
    assert.matches("******", out.text(), 1, true)
  end)
end)

describe("vault rekey with age", function()
  it("moves age values to the new recipients and rewrites the record", function()
    assert.equal(0, (support.run({ "vault", "encrypt", "-r", recipient, file })))
    local ssh_pub = (read(dir .. "/ssh.pub"):gsub("%s+$", ""))
    local code, out, err = support.run({ "vault", "rekey", "--age-identity-file", dir .. "/id.txt", "-r", ssh_pub,
      file })
    assert.equal(0, code, err)
    assert.matches("6 values rekeyed", out)
    assert.matches("recipients changes from", err)
    local docs = assert(yaml.load(read(file)))
    assert.same({ ssh_pub }, { table.unpack(docs[1].metadata.encryption.age.recipients) })
    assert.is_nil(config.load(file, { decrypt = { age_identity_files = { dir .. "/id.txt" }, required = true } }))
    local c = assert(config.load(file, { decrypt = { age_identity_files = { dir .. "/ssh" }, required = true } }))
    assert.equal("p-2", c.registries[2].auth.pass)
  end)
end)

describe("vault usage", function()
  it("refuses an unknown action and encrypt without any key", function()
    assert.equal(2, (support.run({ "vault", "scramble", file })))
    local code, _, err = support.run({ "vault", "encrypt", file })
    assert.equal(1, code)
    assert.matches("no vault password was given", err)
    assert.equal(CLUSTER, read(file))
  end)

  it("takes the key flags before or after the command name", function()
    assert.equal(0, (support.run({ "vault", "encrypt", file, "--vault-password-file", dir .. "/pw" })))
    local code, out, err = support.run({ "--vault-password-file", dir .. "/pw", "vault", "decrypt", file })
    assert.equal(0, code, err)
    assert.matches("6 values decrypted", out)
    assert.equal(CLUSTER, read(file))
  end)

  it("documents every flag in --help", function()
    local code, out = support.run({ "vault", "--help" })
    assert.equal(0, code)
    for _, flag in ipairs({ "--age-recipient", "--age-recipients-file", "--vault-id", "--new-vault-password-file",
      "--vault-password-file", "--age-identity-file", "encrypt", "decrypt", "rekey" }) do
      assert.matches(flag, out, 1, true)
    end
  end)
end)
