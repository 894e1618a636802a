-- Nothing outside the engine configurers names an engine (a plain grep of lua/): a 4th engine is one module.
local helper_src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

-- The engines' own list of types, and the family and tool names that would stand for one.
local ENGINE_WORDS = { "kubeadm", "rancher" }
for _, t in ipairs(require("distros.engine").TYPES) do ENGINE_WORDS[#ENGINE_WORDS + 1] = t end

-- Lua source with its comments blanked and its strings kept (an engine named in a string is
-- still a switch on it); line breaks stay so that hits carry their line numbers.
local function code_of(text)
  local out, i, n = {}, 1, #text
  local function keep_newlines(s) return (s:gsub("[^\n]", "")) end
  while i <= n do
    local c = text:sub(i, i)
    local long_open = text:match("^%[(=*)%[", i)
    if text:sub(i, i + 1) == "--" then
      local level = text:match("^%-%-%[(=*)%[", i)
      local stop
      if level then
        local _, e = text:find("]" .. level .. "]", i, true)
        stop = e or n
      else
        stop = (text:find("\n", i, true) or (n + 1)) - 1
      end
      out[#out + 1] = keep_newlines(text:sub(i, stop))
      i = stop + 1
    elseif long_open then
      local _, e = text:find("]" .. long_open .. "]", i, true)
      e = e or n
      out[#out + 1] = text:sub(i, e)
      i = e + 1
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = text:sub(j, j)
        if d == "\\" then j = j + 1 elseif d == c or d == "\n" then break end
        j = j + 1
      end
      out[#out + 1] = text:sub(i, j)
      i = j + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

local function lua_files(dir)
  local p = assert(io.popen("find " .. dir .. " -name '*.lua' | sort"))
  local list = {}
  for line in p:lines() do list[#list + 1] = line end
  p:close()
  return list
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- -> {"path:line: word"..} for every engine word (whole word, any case) in code.
-- keep_comments: scan the text as it is (the tree is held to a plain grep: comments too).
local function engine_names_in(files, keep_comments)
  local hits = {}
  for _, path in ipairs(files) do
    local lineno = 0
    local text = keep_comments and read(path) or code_of(read(path))
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      lineno = lineno + 1
      local low = line:lower()
      for _, w in ipairs(ENGINE_WORDS) do
        if low:find("%f[%w_]" .. w .. "%f[^%w_]") then hits[#hits + 1] = string.format("%s:%d: %s", path, lineno, w) end
      end
      if low:find("require%s*%(?%s*[\"']distros[%.\"']") then
        hits[#hits + 1] = string.format("%s:%d: requires an engine configurer", path, lineno)
      end
    end
  end
  return hits
end

describe("engine names", function()
  it("the comment stripper keeps code and strings, drops comments", function()
    local code = code_of('local a = "rke2" -- k3s\n--[[ upstream\n]] b = [[kubeadm]]\n')
    assert.truthy(code:find('"rke2"', 1, true))
    assert.truthy(code:find("[[kubeadm]]", 1, true))
    assert.falsy(code:find("k3s", 1, true))
    assert.falsy(code:find("upstream", 1, true))
    assert.equal(4, select(2, code:gsub("\n", "")) + 1)
  end)

  it("finds an engine named in code, and a require of distros", function()
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "w"))
    f:write('-- rke2 in a comment is fine\nlocal t = { K3S = 1 }\nlocal e = require "distros.engine"\n')
    f:close()
    local hits = engine_names_in({ tmp })
    os.remove(tmp)
    assert.same({ tmp .. ":2: k3s", tmp .. ":3: requires an engine configurer" }, hits)
  end)

  it("appear nowhere under lua/ (code or comments), and the OS layer requires no engine configurer", function()
    local files = lua_files(helper_src .. "/lua")
    assert.is_true(#files > 100, "the Lua tree's files were found")
    local hits = {}
    for _, h in ipairs(engine_names_in(files, true)) do
      -- phases and the runner require the engines (the layer lint says who may); only the OS layer may not
      if not h:find("requires an engine configurer", 1, true) or h:find("/lua/cargoship/os/", 1, true) then
        hits[#hits + 1] = h
      end
    end
    assert.same({}, hits)
  end)
end)
