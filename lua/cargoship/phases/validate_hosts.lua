-- Phase "Validate hosts": the preflight; sudo, unique names and addresses, architecture, firewall rules, clock skew.
--
-- Every problem on every host is collected and reported together, each naming its host,
-- so one run shows the whole list. Checks:
--   sudo      the login user (when not root) runs `sudo -n` without a password;
--   names     node names (config hostname, else the machine's) unique, case-insensitively;
--   addresses private addresses unique;
--   arch      the host's architecture is one the distro package carries (without a
--             package: one the engines ship, amd64/arm64/riscv64);
--   firewall  rules and legacy policies can be expressed by the front end the host would
--             use (os.firewall.rule_problems): firewalld needs 0.9+ for forward/out rules and
--             policies and zone names in forward rules; ufw has no sctp/dccp; ufw/nftables
--             forward rules name interfaces; host.policy is firewalld-only. A host with no
--             usable front end is only warned about (the firewall phase leaves it alone);
--   clock     each host within max_clock_skew (default 30 s) of the median host clock;
--   cidrs     the private address outside the engine's pod and service CIDRs.
-- And what a later phase would fail on (issue 23), from host.facts.predict (gathered with the
-- facts) and one probe of the join address per host whose engine this run starts, batched
-- with the sudo check: a dry run reports each as foretold (ctx:predict: "would fail", exit
-- 3, and a real run refuses the plan); a real run's own pass fails the host on it.
local predict = require "cargoship.phases.lib.predict"
local preflight = require "cargoship.phases.lib.preflight"

local M = {
  id = "validate_hosts",
  title = "Validate hosts",
  dry_run = "read_only",
  reads = { "connection", "os", "facts" },
  creates = {},
}

function M.prepare(ctx)
  return ctx.hosts
end

-- Sent ahead (facts/prefetch.lua) with phase 5's reads: the join probe and the sudo check cost no
-- round trip of their own. The join target is built from phase 3's facts of every host (the
-- leader's address, the forecast): asked before they are in (the batches before phases 2 and 3),
-- it says nothing, or it would send a probe of a wrong target (the leader's bare name).
function M.prefetch(ctx, host)
  for _, h in ipairs(ctx.hosts) do
    if not (h.facts and h.facts.private_address) then return nil end
  end
  return (predict.probe_cmds(ctx, host))
end

-- Everything that needs no round trip -> list of {host = Host, message}. Pure, for specs.
M.problems = preflight.problems

function M.run(ctx, hosts)
  -- sudo and the join address in one round trip per host (none for a root login with nothing to join)
  local sudo, joins, targets = predict.probe_hosts(ctx, hosts)
  local problems = {}
  for _, h in ipairs(hosts) do
    if sudo[h] then preflight.add(problems, h, sudo[h]) end
  end
  for _, p in ipairs(M.problems(ctx, hosts)) do problems[#problems + 1] = p end
  for _, h in ipairs(hosts) do
    for _, why in ipairs(predict.foretold(h, joins[h], targets[h])) do
      if ctx.dry_run then ctx:predict(h, why) else preflight.add(problems, h, why) end
    end
  end
  ctx.validation = problems
  if #problems > 0 then
    -- one failure per problem, on its host: the runner logs them and lists them under the hosts
    local failures = {}
    for i, p in ipairs(problems) do failures[i] = { host = p.host, err = p.message } end
    return nil, failures
  end
  ctx.log:info("%d host%s validated", #hosts, #hosts == 1 and "" or "s")
  return true
end

return M
