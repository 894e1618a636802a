-- Golden-file specs for the engine configurers: node facts and a package in, every file "Configure engine" writes out.
--
-- tests/fixtures/engines/shared/cluster.json is the cluster (nodes, loadbalancer, registries);
-- tests/fixtures/engines/<engine>/package.json the package (type, version, engine section;
-- upstream also the join secret the leader holds); <engine>/<role>/case.json names the node.
-- <engine>/<role>/files/<absolute path> holds each file's exact bytes, and files.txt each
-- file's mode: a file rendered and not in the golden set fails, as does one missing.
-- CARGOSHIP_UPDATE_GOLDEN=1 rewrites the golden files from the configurers (then review the diff).
local cjson = require "cjson"
local engine = require "distros.engine"
local util = require "cargoship.util"

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local DIR = SRC .. "/tests/fixtures/engines"
local UPDATE = os.getenv("CARGOSHIP_UPDATE_GOLDEN") == "1"

local read = require("unit.files").read

local function write(path, content)
  assert(os.execute("mkdir -p " .. util.quote(path:match("^(.*)/[^/]*$"))))
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
end

local function plain(v)
  if v == cjson.null then return nil end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = plain(x) end
  return out
end

local function json(path)
  local s = assert(read(path), path)
  return plain(cjson.decode(s))
end

local shared = json(DIR .. "/shared/cluster.json")
local order = { "cp1", "cp2", "w1" }

local function cluster_view(secret)
  local view = { controllers = {}, nodes = {}, loadbalancer = shared.loadbalancer, registries = shared.registries,
                 secret = secret }
  for _, name in ipairs(order) do
    local n = shared.nodes[name]
    view.nodes[#view.nodes + 1] = n
    if n.role == "controller" then view.controllers[#view.controllers + 1] = n end
  end
  view.leader = shared.nodes.cp1
  return view
end

for _, eng_name in ipairs(engine.TYPES) do
  describe(eng_name .. " configurer, golden files:", function()
    local pkg = json(DIR .. "/" .. eng_name .. "/package.json")
    local e = assert(engine.for_package(pkg))
    for _, role in ipairs({ "leader", "controller", "worker" }) do
      local base = DIR .. "/" .. eng_name .. "/" .. role
      local case = json(base .. "/case.json")
      it(case.description, function()
        local files = e:config_files(shared.nodes[case.node], cluster_view(pkg.secret))
        local modes = {}
        for _, f in ipairs(files) do modes[#modes + 1] = f.mode .. " " .. f.path end
        local listing = table.concat(modes, "\n") .. "\n"
        if UPDATE then
          os.execute("rm -rf " .. util.quote(base .. "/files"))
          write(base .. "/files.txt", listing)
          for _, f in ipairs(files) do write(base .. "/files" .. f.path, f.content) end
        end
        assert.are.equal(read(base .. "/files.txt"), listing, "the set of files and their modes")
        for _, f in ipairs(files) do
          assert.are.equal(read(base .. "/files" .. f.path), f.content, f.path)
        end
      end)
    end
  end)
end
