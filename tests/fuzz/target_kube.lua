-- target_kube.lua - fuzz target: `kubectl get nodes -o json` as the tool parses it (facts.kube.parse,
-- pipeline.context.parse_nodes, behind ctx:leader_nodes). Fine: a node list, or nil + why. A finding: any raise.
local kube = require "cargoship.facts.kube"
local context = require "cargoship.pipeline.context"

local function run(data)
  local nodes, by_name = kube.parse(data)
  if nodes then
    assert(type(by_name) == "table", "no index by name")
    for _, n in ipairs(nodes) do assert(type(n.name) == "string" and by_name[n.name], "a node without a name") end
  else
    assert(type(by_name) == "string", "no reason")
  end
  local list, why = context.parse_nodes(data)
  if list then
    for _, n in ipairs(list) do assert(type(n.name) == "string" and type(n.addresses) == "table", "bad node") end
  else
    assert(type(why) == "string", "no reason")
  end
end

return { run = run }
