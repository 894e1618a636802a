-- cargoship.cli.completion: shell completion scripts (bash, zsh, fish) generated from the command registry.
--
-- The scripts hold no list of their own: every command name, alias, option spelling and
-- option value comes from the same tables `--help` renders (cli.COMMANDS, each command's
-- `options` and `arguments`, cli.GLOBAL_OPTIONS), so a script cannot drift from --help.
-- All three shells decide alike: the command is the first word that is neither an option
-- nor an option's value; before it the global options complete, after it the command's
-- own and the global ones (a command's own option wins where both name one, as in the
-- parser); after an option that takes a value come its words (`check = {...}`), files
-- (FILE, PATH, OUT, CLUSTER, PACKAGE) or directories (DIR); "--" ends the options.
local args = require "cargoship.cli.args"

local M = {}

M.SHELLS = { "bash", "zsh", "fish" }

-- What a value metavariable completes to: files, directories, or nothing we can know.
local FILE_VALUES = { FILE = "file", PATH = "file", OUT = "file", CLUSTER = "file", PACKAGE = "file", DIR = "dir" }

-- Every spelling of one option: --long, -s, its aliases and the Go tool's name.
function M.spellings(opt)
  local list = { "--" .. opt.long }
  if opt.short then list[#list + 1] = "-" .. opt.short end
  for _, a in ipairs(args.alias_list(opt)) do list[#list + 1] = a end
  return list
end

local function row(opt)
  local r = { spellings = M.spellings(opt), long = opt.long, help = (opt.help or ""):match("^[^;(]*"):gsub("%s+$", "") }
  if opt.value then
    if type(opt.check) == "table" then
      r.kind, r.words = "words", opt.check
    else
      r.kind = FILE_VALUES[opt.value] or "none"
    end
  end
  return r
end

-- The options a command line accepts after `cmd` (all of them before a command: cmd nil),
-- merged as cli.lua merges them: the command's own, then the global ones it does not name.
local function option_rows(cmd, globals)
  local rows, own = {}, {}
  for _, opt in ipairs(cmd and cmd.options or {}) do
    rows[#rows + 1] = row(opt)
    own[opt.long] = true
  end
  for _, opt in ipairs(globals) do
    if not own[opt.long] then
      local r = row(opt)
      r.global = true
      rows[#rows + 1] = r
    end
  end
  return rows
end

-- M.model(commands, globals) -> {names = every command word, commands = {{name, names,
-- summary, options = rows, args = {{choices, rest}}}}, top = rows before a command}.
-- `help` is a command word too: `cargoship help COMMAND`.
function M.model(commands, globals)
  local m = { names = {}, commands = {}, top = option_rows(nil, globals) }
  local cmd_names = {}
  for _, cmd in ipairs(commands) do
    local names = { cmd.name }
    for _, a in ipairs(cmd.aliases or {}) do names[#names + 1] = a end
    for _, n in ipairs(names) do m.names[#m.names + 1] = n end
    cmd_names[#cmd_names + 1] = cmd.name
    local list = {}
    for i, a in ipairs(cmd.arguments or {}) do list[i] = { choices = a.choices, rest = a.rest } end
    m.commands[#m.commands + 1] = { name = cmd.name, names = names, summary = cmd.summary,
      options = option_rows(cmd, globals), args = list }
  end
  m.names[#m.names + 1] = "help"
  m.commands[#m.commands + 1] = { name = "help", names = { "help" }, summary = "show a command's help",
    options = {}, args = { { choices = cmd_names } } }
  return m
end

local function all_spellings(rows, valued_only)
  local out = {}
  for _, r in ipairs(rows) do
    if not valued_only or r.kind then
      for _, s in ipairs(r.spellings) do out[#out + 1] = s end
    end
  end
  return table.concat(out, " ")
end

-- ---- bash and zsh: one shape, the shells' own words for offering -------------------------

-- The functions both shells share: command words, option spellings, which take values.
local function sh_tables(m)
  local L = {}
  L[#L + 1] = "_cargoship_names='" .. table.concat(m.names, " ") .. "'"
  L[#L + 1] = "_cargoship_command() { # a command word -> REPLY: its command ('' when unknown)"
  L[#L + 1] = "  case $1 in"
  for _, c in ipairs(m.commands) do
    L[#L + 1] = "    " .. table.concat(c.names, "|") .. ") REPLY=" .. c.name .. " ;;"
  end
  L[#L + 1] = "    *) REPLY= ;;"
  L[#L + 1] = "  esac"
  L[#L + 1] = "}"
  for _, which in ipairs { { "_cargoship_options", false, "every spelling of its options" },
    { "_cargoship_valued", true, "the spellings that take a value" } } do
    L[#L + 1] = which[1] .. "() { # a command ('' before one) -> REPLY: " .. which[3]
    L[#L + 1] = "  case $1 in"
    L[#L + 1] = "    '') REPLY='" .. all_spellings(m.top, which[2]) .. "' ;;"
    for _, c in ipairs(m.commands) do
      L[#L + 1] = "    " .. c.name .. ") REPLY='" .. all_spellings(c.options, which[2]) .. "' ;;"
    end
    L[#L + 1] = "    *) REPLY= ;;"
    L[#L + 1] = "  esac"
    L[#L + 1] = "}"
  end
  L[#L + 1] = [=[
_cargoship_takes_value() { # a command, an option word -> true when the next word is its value
  local REPLY k
  _cargoship_valued "$1"
  REPLY=" $REPLY "
  case $2 in
    --*=*) return 1 ;;
    --*) [[ $REPLY == *" $2 "* ]] ;;
    -*) for ((k = 1; k < ${#2}; k++)); do
          if [[ $REPLY == *" -${2:$k:1} "* ]]; then ((k == ${#2} - 1)); return; fi
        done
        return 1 ;;
    *) return 1 ;;
  esac
}]=]
  return table.concat(L, "\n")
end

-- The value and positional functions; `offer` renders one offer in the shell's words.
local function sh_offers(m, offer)
  local L = {}
  L[#L + 1] = "_cargoship_value() { # a command, an option spelling, the word -> offers its values"
  L[#L + 1] = '  case "$1 $2" in'
  local function value_arm(pattern, r)
    L[#L + 1] = "    " .. pattern .. ") " .. offer(r.kind, r.words) .. "; return ;;"
  end
  for _, c in ipairs(m.commands) do
    for _, r in ipairs(c.options) do
      if r.kind and not r.global then
        local pats = {}
        for i, s in ipairs(r.spellings) do pats[i] = "'" .. c.name .. " " .. s .. "'" end
        value_arm(table.concat(pats, "|"), r)
      end
    end
  end
  L[#L + 1] = "  esac"
  L[#L + 1] = "  case $2 in"
  for _, r in ipairs(m.top) do
    if r.kind then value_arm(table.concat(r.spellings, "|"), r) end
  end
  L[#L + 1] = "  esac"
  L[#L + 1] = "}"
  L[#L + 1] = "_cargoship_arg() { # a command, a positional's number, the word -> offers what goes there"
  L[#L + 1] = '  case "$1 $2" in'
  for _, c in ipairs(m.commands) do
    local rest = false
    for i, a in ipairs(c.args) do
      L[#L + 1] = "    '" .. c.name .. " " .. i .. "') " .. offer(a.choices and "words" or "file", a.choices) .. " ;;"
      rest = rest or a.rest
    end
    L[#L + 1] = "    '" .. c.name .. " '*) " .. (rest and offer("file") or ":") .. " ;;"
  end
  L[#L + 1] = "    *) " .. offer("file") .. " ;;"
  L[#L + 1] = "  esac"
  L[#L + 1] = "}"
  return table.concat(L, "\n")
end

local BASH_MAIN = [=[
_cargoship() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= w o i n=0 skip= dashdash= REPLY
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    if [[ -z $dashdash && $w == = ]]; then skip=1; continue; fi   # bash splits --opt=VALUE at '='
    if [[ -z $dashdash && $w == -- ]]; then [[ -n $cmd ]] && dashdash=1; continue; fi
    if [[ -z $dashdash && $w == -?* ]]; then
      _cargoship_takes_value "$cmd" "$w" && [[ ${COMP_WORDS[i+1]} != = ]] && skip=1
      continue
    fi
    if [[ -z $cmd ]]; then _cargoship_command "$w"; cmd=${REPLY:-?}; else n=$((n + 1)); fi
  done
  if [[ -n $skip ]]; then
    o=$prev
    [[ $o == = ]] && o=${COMP_WORDS[COMP_CWORD-2]}
    [[ $o == -[!-]* ]] && o=-${o: -1}
    _cargoship_value "$cmd" "$o" "$cur"
  elif [[ -z $dashdash && $cur == = ]] && _cargoship_takes_value "$cmd" "$prev"; then
    _cargoship_value "$cmd" "$prev" ""
  elif [[ -z $dashdash && $cur == -* ]]; then
    _cargoship_options "$cmd"
    mapfile -t COMPREPLY < <(compgen -W "$REPLY" -- "$cur")
  elif [[ -z $cmd ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$_cargoship_names" -- "$cur")
  else
    _cargoship_arg "$cmd" $((n + 1)) "$cur"
  fi
}
complete -F _cargoship cargoship]=]

local function bash_offer(kind, words)
  if kind == "words" then
    return "mapfile -t COMPREPLY < <(compgen -W '" .. table.concat(words, " ") .. "' -- \"$3\")"
  elseif kind == "file" or kind == "dir" then
    return "compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -" .. (kind == "dir" and "d" or "f")
      .. " -- \"$3\")"
  end
  return ":"
end

function M.bash(m)
  return table.concat({
    "# bash completion for cargoship, generated by `cargoship completion bash` from the tables",
    "# `cargoship --help` shows. Load it: source <(cargoship completion bash)",
    sh_tables(m), sh_offers(m, bash_offer), BASH_MAIN }, "\n") .. "\n"
end

local ZSH_MAIN = [=[
_cargoship() {
  local cur=${words[CURRENT]} cmd= w o i n=0 skip= dashdash= REPLY
  for ((i = 2; i < CURRENT; i++)); do
    w=${words[i]}
    if [[ -n $skip ]]; then skip=; continue; fi
    if [[ -z $dashdash && $w == -- ]]; then [[ -n $cmd ]] && dashdash=1; continue; fi
    if [[ -z $dashdash && $w == -?* ]]; then
      _cargoship_takes_value "$cmd" "$w" && skip=1
      continue
    fi
    if [[ -z $cmd ]]; then _cargoship_command "$w"; cmd=${REPLY:-?}; else n=$((n + 1)); fi
  done
  if [[ -n $skip ]]; then
    o=${words[CURRENT-1]}
    [[ $o == -[!-]* ]] && o=-${o[-1]}
    _cargoship_value "$cmd" "$o"
  elif [[ -z $dashdash && $cur == --*=* ]] && _cargoship_takes_value "$cmd" "${cur%%=*}"; then
    o=${cur%%=*}
    compset -P '*='
    _cargoship_value "$cmd" "$o"
  elif [[ -z $dashdash && $cur == -* ]]; then
    _cargoship_options "$cmd"
    compadd -- ${=REPLY}
  elif [[ -z $cmd ]]; then
    compadd -- ${=_cargoship_names}
  else
    _cargoship_arg "$cmd" $((n + 1))
  fi
}
# as a file in $fpath (named _cargoship) compinit loads it and calls it; sourced, it registers
if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
  _cargoship "$@"
else
  compdef _cargoship cargoship
fi]=]

local function zsh_offer(kind, words)
  if kind == "words" then return "compadd -- " .. table.concat(words, " ") end
  if kind == "file" then return "_files" end
  if kind == "dir" then return "_files -/" end
  return ":"
end

function M.zsh(m)
  return table.concat({
    "#compdef cargoship",
    "# zsh completion for cargoship, generated by `cargoship completion zsh` from the tables",
    "# `cargoship --help` shows. Load it after compinit: source <(cargoship completion zsh),",
    "# or save it as _cargoship in a directory of $fpath.",
    sh_tables(m), sh_offers(m, zsh_offer), ZSH_MAIN }, "\n") .. "\n"
end

-- ---- fish: its own `complete` lines, conditioned on where the cursor is --------------------

local FISH_HEAD = [=[
# fish completion for cargoship, generated by `cargoship completion fish` from the tables
# `cargoship --help` shows. Load it: cargoship completion fish | source
# (or save it as ~/.config/fish/completions/cargoship.fish)
complete -c cargoship -e
complete -c cargoship -f
function __cargoship_takes_value -a cmd word -d 'true when the word after this option is its value'
    set -l valued (__cargoship_valued $cmd)
    switch $word
        case '--*=*'
            return 1
        case '--*'
            contains -- $word $valued
            return
        case '-*'
            set -l len (string length -- $word)
            for k in (seq 2 $len)
                if contains -- -(string sub -s $k -l 1 -- $word) $valued
                    test $k = $len
                    return
                end
            end
    end
    return 1
end
function __cargoship_where -d 'the command on the line and how many of its positionals precede the cursor'
    set -l words (commandline -opc)
    set -e words[1]
    set -l cmd ''
    set -l n 0
    set -l skip 0
    set -l dashdash 0
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        if test $dashdash = 0; and test "$w" = --
            test -n "$cmd"; and set dashdash 1
            continue
        end
        if test $dashdash = 0; and string match -q -- '-?*' $w
            __cargoship_takes_value "$cmd" $w; and set skip 1
            continue
        end
        if test -z "$cmd"
            set cmd (__cargoship_command $w); or set cmd '?'
        else
            set n (math $n + 1)
        end
    end
    echo $cmd
    echo $n
end
function __cargoship_is -a want -d 'true when the command on the line is want (empty: none yet)'
    set -l w (__cargoship_where)
    test "$w[1]" = "$want"
end
function __cargoship_arg -a want num rest -d 'true when the cursor is at positional num of command want'
    set -l w (__cargoship_where)
    test "$w[1]" = "$want"; or return 1
    set -l at (math $w[2] + 1)
    test $at = $num; or begin; test -n "$rest"; and test $at -ge $num; end
end]=]

local function fish_quote(s)
  return "'" .. s:gsub("\\", "\\\\"):gsub("'", "\\'") .. "'"
end

local function fish_option(L, cond, r)
  local parts = { "complete -c cargoship" }
  if cond then parts[#parts + 1] = "-n " .. fish_quote(cond) end
  for _, s in ipairs(r.spellings) do
    local l, sh = s:match("^%-%-(.+)$"), s:match("^%-(%w)$")
    parts[#parts + 1] = l and ("-l " .. l) or ("-s " .. sh)
  end
  if r.kind == "words" then
    parts[#parts + 1] = "-x -a " .. fish_quote(table.concat(r.words, " "))
  elseif r.kind == "file" or r.kind == "dir" then
    parts[#parts + 1] = "-r -F"
  elseif r.kind then
    parts[#parts + 1] = "-x"
  end
  if r.help ~= "" then parts[#parts + 1] = "-d " .. fish_quote(r.help) end
  L[#L + 1] = table.concat(parts, " ")
end

function M.fish(m)
  local L = { FISH_HEAD }
  L[#L + 1] = "function __cargoship_command -a word -d 'the command a word names'"
  L[#L + 1] = "    switch $word"
  for _, c in ipairs(m.commands) do
    L[#L + 1] = "        case " .. table.concat(c.names, " ")
    L[#L + 1] = "            echo " .. c.name
  end
  L[#L + 1] = "        case '*'"
  L[#L + 1] = "            return 1"
  L[#L + 1] = "    end"
  L[#L + 1] = "end"
  L[#L + 1] = "function __cargoship_valued -a cmd -d 'the option spellings of a command that take a value'"
  L[#L + 1] = "    switch \"$cmd\""
  L[#L + 1] = "        case ''"
  L[#L + 1] = "            printf '%s\\n' " .. all_spellings(m.top, true)
  for _, c in ipairs(m.commands) do
    L[#L + 1] = "        case " .. c.name
    local valued = all_spellings(c.options, true)
    if valued ~= "" then L[#L + 1] = "            printf '%s\\n' " .. valued end
  end
  L[#L + 1] = "    end"
  L[#L + 1] = "end"
  -- before a command: the global options and the command words
  for _, r in ipairs(m.top) do fish_option(L, "__cargoship_is ''", r) end
  for _, c in ipairs(m.commands) do
    for _, n in ipairs(c.names) do
      L[#L + 1] = "complete -c cargoship -n " .. fish_quote("__cargoship_is ''") .. " -a " .. n .. " -d "
        .. fish_quote(c.summary)
    end
  end
  for _, c in ipairs(m.commands) do
    local cond = "__cargoship_is " .. c.name
    for _, r in ipairs(c.options) do fish_option(L, cond, r) end
    for i, a in ipairs(c.args) do
      local at = "__cargoship_arg " .. c.name .. " " .. i .. (a.rest and " rest" or "")
      if a.choices then
        L[#L + 1] = "complete -c cargoship -n " .. fish_quote(at) .. " -a " .. fish_quote(table.concat(a.choices, " "))
      else
        L[#L + 1] = "complete -c cargoship -n " .. fish_quote(at) .. " -F"
      end
    end
  end
  return table.concat(L, "\n") .. "\n"
end

-- M.script(shell, commands, globals) -> the script text | nil, message
function M.script(shell, commands, globals)
  local gen = ({ bash = M.bash, zsh = M.zsh, fish = M.fish })[shell]
  if not gen then return nil, "no completion for shell '" .. tostring(shell) .. "' (bash, zsh or fish)" end
  return gen(M.model(commands, globals))
end

return M
