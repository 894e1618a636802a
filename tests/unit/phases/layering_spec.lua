-- Specs for the house's walls: phases and engines require no runtime module; no engine named outside the configurers.
local engine = require "distros.engine"
local util = require "cargoship.util"

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

local function files(dir)
  local p = assert(io.popen("find " .. util.quote(SRC .. "/" .. dir) .. " -name '*.lua' | sort"))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function lines(path)
  local out = {}
  for l in io.lines(path) do out[#out + 1] = l end
  return out
end

-- The C modules main.c preloads, and the C libraries the build links in.
local C_MODULES = { "cargoship.loop", "cargoship.crypto", "cargoship.fs", "cargoship.ssh", "cargoship.term",
                    "cargoship.util", "cargoship.archive", "cargoship.yaml", "cjson", "lpeg", "lfs" }

-- Known debt, each with its reason; a file fixed leaves the list (the spec checks it still offends).
local KNOWN = {
  ["lua/cargoship/phases/lib/uploads.lua: cargoship.util"] = "hashes and exports the package's local files: the"
    .. " package layer's to wrap",
}

describe("phases", function()
  it("never require the event loop, the CSPRNG or any other C module: the context waits and draws", function()
    local bad, known = {}, {}
    for _, path in ipairs(files("lua/cargoship/phases")) do
      for i, l in ipairs(lines(path)) do
        local code = l:gsub("%-%-.*$", "")
        for _, m in ipairs(C_MODULES) do
          if code:find('require%s*%(?%s*["\']' .. m:gsub("%.", "%%.") .. '["\']') then
            local what = path:sub(#SRC + 2) .. ": " .. m
            if KNOWN[what] then known[what] = true else bad[#bad + 1] = what .. " (line " .. i .. ")" end
          end
        end
      end
    end
    assert.same({}, bad)
    for what in pairs(KNOWN) do assert.is_true(known[what], what .. " no longer offends: drop it from KNOWN") end
  end)
end)

describe("engine configurers", function()
  it("require no runtime module (the YAML codec aside: they render files)", function()
    local bad = {}
    for _, path in ipairs(files("distros")) do
      for i, l in ipairs(lines(path)) do
        local code = l:gsub("%-%-.*$", "")
        for _, m in ipairs(C_MODULES) do
          if m ~= "cargoship.yaml" and code:find('require%s*%(?%s*["\']' .. m:gsub("%.", "%%.") .. '["\']') then
            bad[#bad + 1] = path:sub(#SRC + 2) .. ":" .. i .. ": " .. m
          end
        end
      end
    end
    assert.same({}, bad)
  end)
end)

describe("engine names", function()
  it("appear in no code under lua/ (comments aside) but the firewall's", function()
    local bad = {}
    local words = { "rancher", "kubeadm" }
    for _, t in ipairs(engine.TYPES) do words[#words + 1] = t end
    for _, path in ipairs(files("lua")) do
      local rel = path:sub(#SRC + 2)
      if not rel:match("^lua/cargoship/os/firewall") then
        for i, l in ipairs(lines(path)) do
          local code = l:gsub("%-%-.*$", "")
          for _, w in ipairs(words) do
            if code:find("%f[%w]" .. w .. "%f[^%w]") then bad[#bad + 1] = rel .. ":" .. i .. ": " .. w end
          end
        end
      end
    end
    assert.same({}, bad)
  end)
end)
