-- cargoship.commands.completion: prints the shell completion script for bash, zsh or fish.
local completion = require "cargoship.cli.completion"

local M = {}

M.name = "completion"
M.summary = "print a completion script for bash, zsh or fish (commands, options and their values)"
M.usage = [[
Usage: cargoship completion bash|zsh|fish

Prints a script that teaches the shell cargoship's command line: the commands (and
their aliases), each command's options in every spelling --help shows, the words an
option accepts (text or json for an output format, a log level ...), files where a file
goes. It is generated from the same tables --help is, so it lists exactly the commands
and options of this build.

  bash:  source <(cargoship completion bash)        (e.g. in ~/.bashrc)
  zsh:   source <(cargoship completion zsh)         (after compinit), or save it as
         _cargoship in a directory of $fpath
  fish:  cargoship completion fish | source         or save it as
         ~/.config/fish/completions/cargoship.fish]]
M.options = {}
M.arguments = { { name = "SHELL", choices = completion.SHELLS } }

function M.run(ctx, a)
  local cli = require "cargoship.cli"
  local commands = cli.load_commands()
  local text, err = completion.script(a.positional[1], commands, cli.GLOBAL_OPTIONS)
  if not text then
    ctx.stderr:write("cargoship completion: ", err, "\n")
    return ctx.exit.usage
  end
  ctx.stdout:write(text)
  return ctx.exit.ok
end

return M
