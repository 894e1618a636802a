-- Phase "Updating hosts file for clusters nodes" (-H/--hosts): one managed block of every node in /etc/hosts.
--
-- Only with --hosts (-H, --update-hosts). Every host gets the same block: one line per
-- node of the cluster, "<private address> <fqdn> <short name> [<node name>]", in
-- cluster-file order, between cargoship's markers (cargoship.os.edit.hosts); every line
-- outside the block is kept byte for byte. assess reads the file once and plans one atomic
-- write of the whole file when it differs: O(N) bytes per host, one round trip to read and
-- one to write whatever N is, never one edit per peer.
local linux = require "cargoship.os.linux"

local M = {
  id = "update_hosts",
  title = "Updating hosts file for clusters nodes",
  reads = { "connection", "os", "facts" },
  creates = { "hosts_file" },
}

-- The file's read, sent ahead with phase 5's batch (facts/prefetch.lua) once the OS is known.
function M.prefetch(ctx, host)
  if not (ctx.options and ctx.options.update_hosts) or not host.os then return nil end
  return { hosts_file = host:read_file_command(host.os.paths.hosts) }
end

function M.prepare(ctx)
  if not (ctx.options and ctx.options.update_hosts) then return {} end
  return ctx.hosts
end

-- The block's nodes, the same for every host (O(N) to build, done per host: no state to keep).
function M.nodes(ctx)
  local nodes = {}
  for _, h in ipairs(ctx.hosts) do
    local f = h.facts or {}
    if not f.private_address then
      error(h.name .. ": no private address was gathered, so /etc/hosts cannot name it", 0)
    end
    nodes[#nodes + 1] = { address = f.private_address, fqdn = f.fqdn, hostname = f.hostname,
                          name = f.node_name or h.name }
  end
  return nodes
end

function M.assess(ctx, host)
  local cfg = host.os or linux
  local path = cfg.paths.hosts
  local current, err, code = host:read_file(path)
  if not current and code ~= "notfound" then error(err, 0) end
  local acts, why = cfg:hosts_actions(current, M.nodes(ctx))
  if not acts then error(host.name .. ": " .. why, 0) end
  return acts
end

return M
