-- cargoship.commands.vault: encrypts, decrypts or rekeys a cluster file's secret values in place.
local args = require "cargoship.cli.args"
local secrets = require "cargoship.secrets"
local edit = require "cargoship.secrets.edit"
local errors = require "cargoship.config.errors"

local M = {}

M.name = "vault"
M.summary = "encrypt, decrypt or rekey the secret values of a cluster file in place"
M.usage = [[
Usage: cargoship vault encrypt|decrypt|rekey [options] CLUSTER

Edits the encryptable values of the cluster file CLUSTER in place:
spec.config.registries[].auth.user, .auth.pass, .auth.token and .tls.ca. Every other
byte of the file stays as written (comments, order, anchors, blank lines); the file is
replaced atomically (a temporary file beside it, renamed over it) and keeps its mode.
Values are told apart by their header, so one file may mix Ansible Vault and age.

  encrypt  encrypts every plaintext value. With --age-recipient or --age-recipients-file
           the values become armored age (to every recipient named) and
           metadata.encryption.age records the recipients and the time; otherwise they
           become Ansible Vault 1.1 AES256 (1.2 with --vault-id) with the vault password
           (--vault-password-file, else CARGOSHIP_VAULT_PASSWORD, else
           ANSIBLE_VAULT_PASSWORD). Values already encrypted are left alone.
  decrypt  replaces every encrypted value by its plaintext, with the vault password and
           the --age-identity-file identities; metadata.encryption.age is removed when
           no age value is left.
  rekey    decrypts every encrypted value and encrypts it again in the same format: Ansible
           Vault values with --new-vault-password-file, age values to the recipients
           named (metadata.encryption.age is rewritten). A format with no new key given
           is left alone; at least one must be given.

The values are as ansible-vault and age themselves read and write them: ansible-vault
decrypt and age -d read what this writes. The file must be a valid cluster file (as
validate says) before and after; a value that cannot be decrypted is an error naming its
file:line, and nothing is written. Decrypted text is never printed. The keys to read
existing values come from the global --vault-password-file and --age-identity-file (see
docs/secrets.md for the formats supported).

Exit codes: 0 done (or nothing to do), 1 a value or the file failed, 2 usage.]]

M.options = {
  { long = "age-recipient", short = "r", value = "RECIPIENT", check = args.checks.nonempty, multiple = true,
    help = "encrypt with age to RECIPIENT: an age1... key or an \"ssh-ed25519 AAAA... [comment]\" line" },
  { long = "age-recipients-file", short = "R", value = "FILE", check = args.checks.nonempty, multiple = true,
    help = "encrypt with age to every recipient in FILE, one a line (# comments), as age -R reads" },
  { long = "vault-id", value = "ID", check = args.checks.nonempty,
    help = "label new Ansible Vault values with ID ($ANSIBLE_VAULT;1.2;AES256;ID)" },
  { long = "new-vault-password-file", value = "FILE", check = args.checks.nonempty,
    help = "rekey: the new Ansible Vault password" },
}
M.arguments = { { name = "ACTION", choices = { "encrypt", "decrypt", "rekey" } }, { name = "CLUSTER" } }

local ACTIONS = { encrypt = true, decrypt = true, rekey = true }

local function fail(ctx, msg)
  ctx.stderr:write("cargoship vault: ", msg, "\n")
  return ctx.exit.failure
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

-- The recipients named on the command line. -> list of {text, r} | nil, why
local function recipients(o)
  local out = {}
  local function add(text, where)
    local r, why = secrets.age.parse_recipient(text)
    if not r then return nil, where .. why end
    out[#out + 1] = { text = text:match("^%s*(.-)%s*$"), r = r }
    return true
  end
  for _, t in ipairs(o.age_recipient or {}) do
    local ok, why = add(t, "--age-recipient: ")
    if not ok then return nil, why end
  end
  for _, path in ipairs(o.age_recipients_file or {}) do
    local text, err = read_file(path)
    if not text then return nil, "--age-recipients-file: " .. tostring(err) end
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      if line:match("%S") and not line:match("^%s*#") then
        local ok, why = add(line, path .. ": ")
        if not ok then return nil, why end
      end
    end
  end
  return out
end

-- The cluster document of the index: the one with kind: ZarfCluster.
local function cluster_doc(ix)
  for _, n in ipairs(ix.nodes) do
    if n.kind == "scalar" and #n.path == 1 and n.path[1] == "kind" and n.value == "ZarfCluster" then return n.doc end
  end
  return 1
end

-- Every encryptable value written in the file: {node, key, path (for messages), value}.
local function targets(ctx, ix, doc, cluster)
  local list = {}
  for i = 1, #(cluster.registries or {}) do
    for _, f in ipairs(secrets.FIELDS) do
      local p = { "spec", "config", "registries", i, f.block, f.key }
      local shown = errors.join(errors.join(errors.join("spec.config.registries", i), f.block), f.key)
      local n = edit.find(ix, "scalar", doc, p)
      if n then
        list[#list + 1] = { node = n, key = edit.find(ix, "key", doc, p), path = shown, value = n.value }
      elseif edit.find(ix, "alias", doc, p) then
        ctx.log:warn("%s: %s is an alias; it changes with the anchor it names", cluster.file, shown)
      end
    end
  end
  return list
end

local function where(file, t)
  return string.format("%s:%d:%d: %s", file, t.node.line, t.node.col, t.path)
end

local function render_encryption(indent, recips, now)
  local lines = { indent .. "encryption:", indent .. "  age:", indent .. "    recipients:" }
  for _, r in ipairs(recips) do
    lines[#lines + 1] = indent .. "      - \"" .. r.text:gsub('[\\"]', "\\%0") .. "\""
  end
  lines[#lines + 1] = indent .. "    lastModified: \"" .. now .. "\""
  return table.concat(lines, "\n") .. "\n"
end

local function line_start(text, pos)
  while pos > 1 and text:sub(pos - 1, pos - 1) ~= "\n" do pos = pos - 1 end
  return pos
end

-- The edit that records (recips) or removes (nil) metadata.encryption. -> edit | nil, why
local function encryption_edit(ix, doc, recips, now)
  local text = ix.text
  local meta = edit.find(ix, "map", doc, { "metadata" })
  if not meta then return nil, "metadata is not a mapping" end
  local key = edit.find(ix, "key", doc, { "metadata", "encryption" })
  local val
  for _, kind in ipairs({ "map", "scalar", "seq", "alias" }) do
    val = val or edit.find(ix, kind, doc, { "metadata", "encryption" })
  end
  if meta.flow then
    local flow = nil
    if recips then
      local r = {}
      for i, x in ipairs(recips) do r[i] = '"' .. x.text:gsub('[\\"]', "\\%0") .. '"' end
      flow = "encryption: {age: {recipients: [" .. table.concat(r, ", ") .. "], lastModified: \"" .. now .. "\"}}"
    end
    if key and val then
      if not flow then return nil, "metadata is a flow mapping; remove metadata.encryption by hand" end
      return { from = key.start, to = val.stop, text = flow }
    end
    if not flow then return nil end
    return { from = meta.stop - 1, to = meta.stop - 1, text = ", " .. flow }
  end
  local indent = string.rep(" ", meta.col - 1)
  local block = recips and render_encryption(indent, recips, now) or ""
  if key and val then
    return { from = line_start(text, key.start), to = edit.line_end(text, val), text = block }
  end
  if not recips then return nil end
  local last
  for _, n in ipairs(ix.nodes) do
    if n.doc == doc and #n.path >= 2 and n.path[1] == "metadata" and (not last or n.stop > last.stop) then last = n end
  end
  local at = last and edit.line_end(text, last) or edit.line_end(text, meta)
  if at > #text and text:sub(-1) ~= "\n" then block = "\n" .. block end
  return { from = at, to = at, text = block }
end

-- What each target becomes. -> list of {t, value, kind} | nil, errors
local function plan(ctx, action, list, keys)
  local ring, out, errs = keys.ring, {}, {}
  for _, t in ipairs(list) do
    local kind = secrets.kind(t.value)
    local new
    if action == "encrypt" and not kind then
      if t.value:find("${", 1, true) then
        ctx.log:warn("%s: holds ${...}; encrypting it would freeze the reference, left as is", where(ctx.file, t))
      elseif keys.recipients then
        new = { value = secrets.age.encrypt(t.value, keys.recipients), kind = "age" }
      else
        new = { value = secrets.ansible_vault.encrypt(t.value, keys.password, keys.vault_id), kind = "ansible-vault" }
      end
    elseif kind and action ~= "encrypt" then
      local rekey_it = action == "decrypt" or (kind == "age" and keys.recipients)
        or (kind == "ansible-vault" and keys.new_password)
      if rekey_it then
        local plain, why = secrets.decrypt(t.value, ring)
        if not plain then
          errs[#errs + 1] = string.format("%s: cannot decrypt this %s value: %s", where(ctx.file, t),
            secrets.KIND_NAMES[kind], why)
        elseif action == "decrypt" then
          new = { value = plain, kind = false }
        elseif kind == "age" then
          new = { value = secrets.age.encrypt(plain, keys.recipients), kind = "age" }
        else
          new = { value = secrets.ansible_vault.encrypt(plain, keys.new_password, keys.vault_id), kind = kind }
        end
      end
    end
    if new then out[#out + 1] = { t = t, value = new.value, kind = new.kind } end
  end
  if #errs > 0 then return nil, errs end
  return out
end

-- The keys the action needs, from the flags and the environment. -> keys | nil, why
local function gather_keys(ctx, action, o)
  local keys = { ring = secrets.keyring(secrets.load_options(ctx)), vault_id = o.vault_id }
  local recips, why = recipients(o)
  if not recips then return nil, why end
  if #recips > 0 then
    keys.recipients, keys.recipient_list = {}, recips
    for i, r in ipairs(recips) do keys.recipients[i] = r.r end
  end
  if action == "decrypt" and keys.recipients then return nil, "decrypt takes no recipients" end
  if action == "encrypt" and not keys.recipients then
    keys.password, why = keys.ring:password()
    if not keys.password then return nil, why .. "; or name age recipients with --age-recipient" end
  end
  if action == "rekey" then
    if o.new_vault_password_file then
      keys.new_password, why = secrets.ansible_vault.read_password_file(o.new_vault_password_file)
      if not keys.new_password then return nil, "--new-vault-password-file: " .. why end
    end
    if not (keys.new_password or keys.recipients) then
      return nil, "rekey needs --new-vault-password-file and/or --age-recipient/--age-recipients-file"
    end
  end
  return keys
end

-- Loads path as validate does, decrypting nothing. -> cluster | nil (errors reported)
local function load_valid(ctx, path, text, when)
  local config = require "cargoship.config"
  local cluster, errs = config.load_string(text, path, { env = ctx.env, decrypt = { env = function() return nil end } })
  if cluster then return cluster end
  ctx.stderr:write(config.format_errors(errs), "\n")
  ctx.stderr:write(string.format("cargoship vault: %s: %d error%s %s; nothing was written\n", path, #errs,
    #errs == 1 and "" or "s", when))
  return nil
end

-- The new text must stay a valid cluster file and hold exactly the intended values at the
-- edited paths, read as YAML (no ${VAR} expansion: the bytes themselves must be right).
local function verify(ctx, path, text, changes, doc)
  if not load_valid(ctx, path, text, "after the edit (a bug: please report it)") then return false end
  local docs = require("cargoship.yaml").load(text, path)
  for _, c in ipairs(changes) do
    local v = docs and docs[doc]
    for _, k in ipairs(c.t.node.path) do v = type(v) == "table" and v[k] or nil end
    if v ~= c.value then
      ctx.stderr:write("cargoship vault: internal error: ", c.t.path, " would not read back as written;",
        " nothing was written\n")
      return false
    end
  end
  return true
end

function M.run(ctx, a)
  local action, path = a.positional[1], a.positional[2]
  if not ACTIONS[action] then
    ctx.stderr:write("cargoship vault: unknown action '", tostring(action), "': expected encrypt, decrypt or rekey\n")
    return ctx.exit.usage
  end
  local text, err = read_file(path)
  if not text then return fail(ctx, "cannot read " .. path .. ": " .. tostring(err)) end
  local cluster = load_valid(ctx, path, text, "in the file")
  if not cluster then return ctx.exit.failure end
  local keys, why = gather_keys(ctx, action, a.options)
  if not keys then return fail(ctx, why) end
  local ix, perr = edit.index(text)
  if not ix then return fail(ctx, path .. ": " .. perr) end
  local doc = cluster_doc(ix)
  local list = targets(ctx, ix, doc, cluster)
  local changes, errs = plan({ log = ctx.log, file = path }, action, list, keys)
  if not changes then
    for _, e in ipairs(errs) do ctx.stderr:write(e, "\n") end
    return fail(ctx, string.format("%d value%s could not be decrypted; nothing was written", #errs,
      #errs == 1 and "" or "s"))
  end
  local edits, age_left = {}, false
  for _, c in ipairs(changes) do
    edits[#edits + 1] = edit.replace_scalar(ix, c.t.node, c.t.key, c.value)
    c.t.done = true
  end
  for _, t in ipairs(list) do
    if secrets.kind(t.value) == "age" and not t.done then age_left = true end
    if t.done then
      for _, c in ipairs(changes) do
        if c.t == t and c.kind == "age" then age_left = true end
      end
    end
  end
  if #changes == 0 then
    ctx.stdout:write(path, ": nothing to ", action, "\n")
    return ctx.exit.ok
  end
  local new_age = false
  for _, c in ipairs(changes) do new_age = new_age or c.kind == "age" end
  local now = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(ctx.now()))
  local enc
  if new_age then
    local before = cluster.encryption and cluster.encryption.recipients or {}
    local named = {}
    for i, r in ipairs(keys.recipient_list) do named[i] = r.text end
    if #before > 0 and table.concat(before, "\n") ~= table.concat(named, "\n") then
      ctx.log:warn("%s: metadata.encryption.age.recipients changes from %s to %s", path,
        table.concat(before, ", "), table.concat(named, ", "))
    end
    enc, why = encryption_edit(ix, doc, keys.recipient_list, now)
  elseif action == "decrypt" and not age_left then
    enc, why = encryption_edit(ix, doc, nil, now)
  end
  if why then return fail(ctx, path .. ": " .. why) end
  if enc then edits[#edits + 1] = enc end
  local new_text
  new_text, why = edit.apply(text, edits)
  if not new_text then return fail(ctx, why) end
  if not verify(ctx, path, new_text, changes, doc) then return ctx.exit.failure end
  local ok, werr = require("cargoship.fs").replace(path, new_text)
  if not ok then return fail(ctx, werr) end
  for _, c in ipairs(changes) do
    local verb = action == "decrypt" and "decrypted" or (action == "rekey" and "rekeyed" or "encrypted")
    ctx.log:info("%s %s (%s)", verb, where(path, c.t), c.kind and secrets.KIND_NAMES[c.kind] or "now plaintext")
  end
  ctx.stdout:write(string.format("%s: %d value%s %s\n", path, #changes, #changes == 1 and "" or "s",
    action == "decrypt" and "decrypted" or (action == "rekey" and "rekeyed" or "encrypted")))
  return ctx.exit.ok
end

return M
