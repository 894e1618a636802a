-- Spec: `cargoship --help`, README's command table and docs/go-tool.md list every command of the registry.
local cli = require "cargoship.cli"
local support = require "unit.commands.support"

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

local function read(path)
  local f = assert(io.open(SRC .. "/" .. path))
  local s = f:read("a")
  f:close()
  return s
end

local function escape(s) return (s:gsub("%p", "%%%0")) end

-- Does a table row of `text` name `word` as a command: "`word ", "`word`" or "`cargoship word"?
local function in_a_row(text, word)
  for line in text:gmatch("[^\n]+") do
    if line:match("^|") then
      local w = escape(word)
      if line:match("`" .. w .. "[ `]") or line:match("`cargoship " .. w .. "[ `]") then return true end
    end
  end
  return false
end

-- README's "What is in this build" table: its first cells.
local function readme_table()
  local text = read("README.md")
  local tbl = assert(text:match("## What is in this build\n\n(.-)\n\n"), "README: no command table")
  local cells = {}
  for line in tbl:gmatch("[^\n]+") do cells[#cells + 1] = line:match("^|([^|]*)") end
  return table.concat(cells, "\n")
end

describe("every command is listed", function()
  local commands = cli.load_commands()

  it("in `cargoship --help`, aliases too", function()
    local _, out = support.run { "--help" }
    for _, cmd in ipairs(commands) do
      assert.matches("\n  " .. escape(cmd.name) .. " +" .. escape(cmd.summary), out)
      for _, a in ipairs(cmd.aliases or {}) do assert.matches("(also " .. a .. ")", out, 1, true) end
    end
  end)

  it("in README's command table, aliases too", function()
    local cells = readme_table()
    for _, cmd in ipairs(commands) do
      local rows = "|" .. cells:gsub("\n", " |\n|") .. " |"
      assert.is_true(in_a_row(rows, cmd.name), "README's table lacks " .. cmd.name)
      for _, a in ipairs(cmd.aliases or {}) do
        assert.is_true(in_a_row(rows, a), "README's table lacks the alias " .. a)
      end
    end
  end)

  it("in docs/go-tool.md's table, aliases too", function()
    local text = read("docs/go-tool.md")
    for _, cmd in ipairs(commands) do
      assert.is_true(in_a_row(text, cmd.name), "docs/go-tool.md lacks " .. cmd.name)
      for _, a in ipairs(cmd.aliases or {}) do
        assert.is_true(in_a_row(text, a), "docs/go-tool.md lacks the alias " .. a)
      end
    end
  end)
end)
