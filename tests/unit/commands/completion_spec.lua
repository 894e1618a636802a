-- Specs of `cargoship completion bash|zsh|fish`: loaded into the real shells, the scripts offer exactly --help's
-- commands and options, and the values and files that go after them.
local cli = require "cargoship.cli"
local util = require "cargoship.util"
local support = require "unit.commands.support"

local q = util.quote

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local function sorted(set)
  local l = {}
  for k in pairs(set) do l[#l + 1] = k end
  table.sort(l)
  return l
end

-- Every option spelling a --help text shows: its left column (-s, --long) and, on the
-- right, "(also X, Y)" and "(the Go tool's X)", in the Options and Global options tables.
local function help_spellings(text)
  local found, in_table = {}, false
  for line in text:gmatch("[^\n]*") do
    if line == "Options:" or line == "Global options:" or line == "Global options (before or after the command):" then
      in_table = true
    elseif line == "" then
      in_table = false
    elseif in_table then
      local short, long = line:match("^  %-(%w), %-%-([%w-]+)")
      long = long or line:match("^      %-%-([%w-]+)")
      assert(long, "not an option line: " .. line)
      found["--" .. long] = true
      if short then found["-" .. short] = true end
      local also = line:match("%(also ([^)]*)%)")
      for a in (also or ""):gmatch("[^, ]+") do found[a] = true end
      local go = line:match("%(the Go tool's (%-%-?[%w-]+)%)")
      if go then found[go] = true end
    end
  end
  return found
end

-- Every command word `cargoship --help` lists: names, and their "(also v)" aliases.
local function help_commands(text)
  local found, in_list = {}, false
  for line in text:gmatch("[^\n]*") do
    if line == "Commands:" then in_list = true
    elseif line == "" then in_list = false
    elseif in_list then
      found[line:match("^  (%S+)")] = true
      for a in (line:match("%(also ([^)]*)%)$") or ""):gmatch("[^, ]+") do found[a] = true end
    end
  end
  return found
end

local commands = cli.load_commands()
local dir, scripts = support.temp_dir(), {}

setup(function()
  for _, shell in ipairs { "bash", "zsh", "fish" } do
    local code, out, err = support.run { "completion", shell }
    assert.are.equal(0, code, err)
    scripts[shell] = dir .. "/cargoship." .. shell
    write(scripts[shell], out)
  end
end)

teardown(function() support.remove_tree(dir) end)

-- The options --help shows for cmd (nil: before a command, the global ones).
local function help_set(cmd)
  local _, out = support.run(cmd and { cmd, "--help" } or { "--help" })
  return help_spellings(out)
end

describe("cargoship completion", function()
  it("refuses a shell it does not know, and completes its own SHELL argument", function()
    local code, out, err = support.run { "completion", "tcsh" }
    assert.are.equal(2, code)
    assert.are.equal("", out)
    assert.matches("bash, zsh or fish", err, 1, true)
    code = support.run { "completion" }
    assert.are.equal(2, code)
  end)
end)

describe("the words completion offers for a command's operands", function()
  -- an operand's `choices` are a second list beside the command's own check: each must pass it
  it("are each accepted by the command, as a word it does not know is not", function()
    local seen = 0
    for _, cmd in ipairs(commands) do
      for i, a in ipairs(cmd.arguments or {}) do
        for _, word in ipairs(a.choices or {}) do
          local argv = { cmd.name }
          for j = 1, i - 1 do argv[#argv + 1] = "x" .. j end
          argv[#argv + 1] = word
          if cmd.arguments[i + 1] and not cmd.arguments[i + 1].optional then argv[#argv + 1] = dir .. "/missing" end
          if cmd.name == "schema" then argv[#argv + 1] = "-o"; argv[#argv + 1] = dir .. "/schema.json" end
          local code, _, err = support.run(argv)
          assert.is_nil(err:find("unknown", 1, true), table.concat(argv, " ") .. ": " .. err)
          assert.is_nil(err:find("no completion for shell", 1, true), table.concat(argv, " ") .. ": " .. err)
          assert.is_true(code ~= 2 or cmd.name == "completion", table.concat(argv, " ") .. ": " .. err)
          argv[i + 1] = "bogus"
          _, _, err = support.run(argv)
          assert.is_truthy(err:find("unknown", 1, true) or err:find("no completion", 1, true), err)
          seen = seen + 1
        end
      end
    end
    assert.is_true(seen >= 12, "choices checked: " .. seen)
  end)
end)

-- ---- bash ------------------------------------------------------------------------------------

-- "@@1\na\nb\n@@2\n..." -> { {a = true, b = true}, {...} }
local function by_case(out)
  local results, n = {}, nil
  for line in out:gmatch("[^\n]+") do
    local i = line:match("^@@(%d+)$")
    if i then
      n = tonumber(i)
      results[n] = {}
    else
      results[n][line] = true
    end
  end
  return results
end

-- Runs the bash completion for each case {words...} (the last word is the one at the cursor,
-- split as bash splits: "--output=j" is "--output", "=", "j"). -> list of sets of offers
local function bash_complete(cases)
  local lines = { "source " .. q(scripts.bash),
    -- the function bash calls on Tab, as `complete -p` says the script registered it
    [=[fn=$(complete -p cargoship | sed -n 's/.*-F \([^ ]*\) .*/\1/p')]=],
    [=[[[ -n $fn ]] || { echo "no completion registered for cargoship"; exit 1; }]=] }
  for i, words in ipairs(cases) do
    local quoted = {}
    for j, w in ipairs(words) do quoted[j] = q(w) end
    lines[#lines + 1] = "COMP_WORDS=(cargoship " .. table.concat(quoted, " ") .. "); COMP_CWORD=" .. #words
      .. "; COMP_LINE=\"${COMP_WORDS[*]}\"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); $fn cargoship; echo @@" .. i
      .. "; printf '%s\\n' \"${COMPREPLY[@]}\""
  end
  local file = dir .. "/cases.bash"
  write(file, table.concat(lines, "\n") .. "\n")
  local out, ok = sh("cd " .. q(dir) .. " && bash --norc --noprofile " .. q(file))
  assert(ok, out)
  return by_case(out)
end

describe("cargoship completion bash, loaded into bash", function()
  it("offers every command word --help lists, and nothing else", function()
    local _, top = support.run { "--help" }
    local want = help_commands(top)
    want.help = true -- `cargoship help COMMAND`
    assert.are.same(sorted(want), sorted(bash_complete { { "" } }[1]))
    assert.is_truthy(want.v, "the Go tool's `v`")
    assert.are.same({ "v", "validate", "vault", "verify", "version" }, sorted(bash_complete { { "v" } }[1]))
  end)

  it("offers exactly the options of each command's --help, and the global ones before a command", function()
    local cases, want = { { "-" } }, { help_set(nil) }
    for _, cmd in ipairs(commands) do
      local names = { cmd.name, table.unpack(cmd.aliases or {}) }
      for _, n in ipairs(names) do
        cases[#cases + 1] = { n, "-" }
        want[#want + 1] = help_set(n)
      end
    end
    local got = bash_complete(cases)
    for i, c in ipairs(cases) do
      assert.are.same(sorted(want[i]), sorted(got[i]), "cargoship " .. table.concat(c, " "))
    end
    -- the sets are real: apply's own, its aliases and the Go tool's spellings among them
    local apply_i
    for i, c in ipairs(cases) do if c[1] == "apply" then apply_i = i end end
    for _, s in ipairs { "--dry-run", "-c", "--concurrency", "-w", "--work-concurrency", "--tmpdir", "--config",
      "--update-firewall", "-F", "--verbose", "--log-level" } do
      assert.is_true(got[apply_i][s] or false, "apply completes " .. s)
    end
  end)

  it("offers an option's words, files or directories after it, and skips values to find the command", function()
    os.execute("mkdir -p " .. q(dir .. "/subdir"))
    local got = bash_complete {
      { "apply", "--output", "" },
      { "apply", "--output", "=", "j" },
      { "-l", "" },
      { "--log-level", "=", "" },
      { "--log-file", "version", "ver" },           -- "version" is the log file here, not the command
      { "-v", "--log-file", "x.log", "ap" },
      { "version", "-o", "" },
      { "help", "ap" },
      { "completion", "" },
      { "version", "" },
      { "exec", "--hosts", "" },
      { "apply", "--config", "sub" },
      { "apply", "--phases", "" },
      { "apply", "" },
      { "package", "" },
      { "-v", "vault", "re" },
      { "schema", "" },
    }
    assert.are.same({ "json", "text" }, sorted(got[1]))
    assert.are.same({ "json" }, sorted(got[2]))
    assert.are.same({ "debug", "error", "info", "verbose", "warn" }, sorted(got[3]))
    assert.are.same({ "debug", "error", "info", "verbose", "warn" }, sorted(got[4]))
    assert.are.same({ "verify", "version" }, sorted(got[5]))
    assert.are.same({ "apply" }, sorted(got[6]))
    assert.are.same({ "json", "text" }, sorted(got[7]))
    assert.are.same({ "apply" }, sorted(got[8]))
    assert.are.same({ "bash", "fish", "zsh" }, sorted(got[9]))
    assert.are.same({}, sorted(got[10]))                  -- version takes no operand
    assert.are.same({}, sorted(got[11]))                  -- host names are not files
    assert.are.same({ "subdir" }, sorted(got[12]))
    assert.are.same({ "subdir" }, sorted(got[13]))        -- a DIR: directories only
    assert.is_true(got[14]["cases.bash"] and got[14]["subdir"] or false)
    assert.are.same({ "create", "inspect", "verify" }, sorted(got[15]))
    assert.are.same({ "rekey" }, sorted(got[16]))
    assert.are.same({ "cluster", "distro", "inventory", "package" }, sorted(got[17]))
  end)
end)

-- ---- fish ------------------------------------------------------------------------------------

-- `complete -C LINE` in a real fish with the script loaded. -> list of sets
local function fish_complete(lines)
  local parts = { "source " .. q(scripts.fish) }
  for i, l in ipairs(lines) do
    parts[#parts + 1] = "echo @@" .. i .. "; complete -C " .. q(l) .. " | string replace -r '\\t.*' ''"
  end
  parts[#parts + 1] = "exit 0"
  local file = dir .. "/cases.fish"
  write(file, table.concat(parts, "\n") .. "\n")
  local out, ok = sh("cd " .. q(dir) .. " && HOME=" .. q(dir) .. " fish --no-config " .. q(file))
  assert(ok, out)
  return by_case(out)
end

local has_fish = os.execute("command -v fish >/dev/null 2>&1")
local has_zsh = os.execute("command -v zsh >/dev/null 2>&1")

describe("cargoship completion fish, loaded into fish", function()
  it("is installed (contrib/deps.sh installs fish)", function()
    assert.is_truthy(has_fish, "fish is missing: run contrib/deps.sh")
  end)

  it("offers every command word and exactly each command's --help options", function()
    if not has_fish then return end
    local _, top = support.run { "--help" }
    local want_cmds = help_commands(top)
    want_cmds.help = true
    local lines, want = { "cargoship ", "cargoship -" }, { want_cmds, help_set(nil) }
    for _, cmd in ipairs(commands) do
      lines[#lines + 1] = "cargoship " .. cmd.name .. " -"
      want[#want + 1] = help_set(cmd.name)
    end
    -- fish may list a bare "-" with its short options only; "--" has the long ones: ask both
    local asked = { table.unpack(lines) }
    for i = 2, #lines do asked[#asked + 1] = lines[i] .. "-" end
    local got = fish_complete(asked)
    for i = 2, #lines do
      for k in pairs(got[#lines + i - 1]) do got[i][k] = true end
    end
    for i, l in ipairs(lines) do
      assert.are.same(sorted(want[i]), sorted(got[i]), l)
    end
  end)

  it("offers an option's words and files, and skips values to find the command", function()
    if not has_fish then return end
    os.execute("mkdir -p " .. q(dir .. "/subdir"))
    local got = fish_complete { "cargoship apply --output ", "cargoship -l ", "cargoship --log-file version ver",
      "cargoship version -o ", "cargoship completion ", "cargoship exec --hosts ", "cargoship apply --config sub",
      "cargoship help ap" }
    assert.are.same({ "json", "text" }, sorted(got[1]))
    assert.are.same({ "debug", "error", "info", "verbose", "warn" }, sorted(got[2]))
    assert.are.same({ "verify", "version" }, sorted(got[3]))
    assert.are.same({ "json", "text" }, sorted(got[4]))
    assert.are.same({ "bash", "fish", "zsh" }, sorted(got[5]))
    assert.are.same({}, sorted(got[6]))
    assert.are.same({ "subdir/" }, sorted(got[7]))
    assert.are.same({ "apply" }, sorted(got[8]))
  end)
end)

-- ---- zsh -------------------------------------------------------------------------------------

-- An interactive zsh in a pty (zsh/zpty) with compinit and the script loaded; LINE and Tab
-- are typed. Prints "BUFFER:<the line after Tab>", then every word the completion offered
-- (compadd is wrapped to record them before the builtin takes them).
local ZSH_DRIVER = [=[
zmodload zsh/zpty
script=$1 line=$2 rec=$3 fpath_dir=$4
if [[ -n $fpath_dir ]]; then load="fpath=(${(q)fpath_dir} \$fpath)"; else load=; fi
zpty -b z zsh -f -i
zpty -w z "PS1='%%%% '; $load; autoload -Uz compinit; compinit -u -D; [[ -n \"$load\" ]] || source ${(q)script}
compadd() { local i=\${@[(i)--]}; print -rl -- \"\${(@)@[i+1,-1]}\" >> ${(q)rec}.words; builtin compadd \"\$@\" }
dumpbuf() { print -r -- \"BUFFER:\$BUFFER\" > ${(q)rec}.buf }; zle -N dumpbuf; bindkey '^Xd' dumpbuf
print READY"
zpty -r z out '*READY*'
zpty -n -w z "${line}"$'\t'
sleep 0.3
zpty -n -w z $'\C-xd'
for i in {1..50}; do [[ -s $rec.buf ]] && break; sleep 0.1; done
zpty -d z
cat $rec.buf
[[ -f $rec.words ]] && cat $rec.words
exit 0
]=]

local function zsh_complete(line, fpath_dir)
  local driver, rec = dir .. "/drive.zsh", dir .. "/rec"
  write(driver, ZSH_DRIVER)
  os.remove(rec .. ".buf")
  os.remove(rec .. ".words")
  local out, ok = sh("cd " .. q(dir) .. " && HOME=" .. q(dir) .. " timeout 30 zsh -f " .. q(driver) .. " "
    .. q(scripts.zsh) .. " " .. q(line) .. " " .. q(rec) .. " " .. q(fpath_dir or ""))
  assert(ok, out)
  local buffer = out:match("BUFFER:([^\n]*)")
  assert(buffer, "zsh never showed the line after Tab: " .. out)
  local words = {}
  for w in out:gsub("^[^\n]*\n?", ""):gmatch("[^\n]+") do words[w] = true end
  return buffer, words
end

describe("cargoship completion zsh, loaded into an interactive zsh", function()
  it("is installed (contrib/deps.sh installs zsh)", function()
    assert.is_truthy(has_zsh, "zsh is missing: run contrib/deps.sh")
  end)

  it("completes a command, an option and an option's value in the line", function()
    if not has_zsh then return end
    assert.are.equal("cargoship apply ", (zsh_complete("cargoship ap")))
    assert.are.equal("cargoship apply --dry-run ", (zsh_complete("cargoship apply --dry")))
    assert.are.equal("cargoship apply --output json ", (zsh_complete("cargoship apply --output j")))
    assert.are.equal("cargoship apply --output=json ", (zsh_complete("cargoship apply --output=j")))
    assert.are.equal("cargoship -v --log-level debug ", (zsh_complete("cargoship -v --log-level deb")))
    assert.are.equal("cargoship completion fish ", (zsh_complete("cargoship completion f")))
  end)

  it("works saved as _cargoship in a directory of $fpath, as compinit loads it", function()
    if not has_zsh then return end
    local fp = dir .. "/fpath"
    os.execute("mkdir -p " .. q(fp) .. " && cp " .. q(scripts.zsh) .. " " .. q(fp .. "/_cargoship"))
    assert.are.equal("cargoship apply --output ", (zsh_complete("cargoship apply --outp", fp)))
  end)

  it("offers every command word and exactly each command's --help options", function()
    if not has_zsh then return end
    local _, top = support.run { "--help" }
    local want = help_commands(top)
    want.help = true
    local _, words = zsh_complete("cargoship ")
    assert.are.same(sorted(want), sorted(words))
    for _, name in ipairs { "apply", "version", "exec" } do
      _, words = zsh_complete("cargoship " .. name .. " -")
      assert.are.same(sorted(help_set(name)), sorted(words), name)
    end
  end)
end)
