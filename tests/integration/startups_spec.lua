-- Integration spec of handshake pacing: a 50-way `cargoship exec` to one host whose sshd takes 3 handshakes at once.
-- Takes ~5 s on a quiet machine (one lab host; the sshd reloads twice).
--
-- The host's sshd gets `MaxStartups 3` (lab.sh sshd), and the cluster file 50 hosts that all
-- reach that one sshd: 127.0.0.1:P for 50 ports P of a small TCP relay in the lab (sshd
-- itself listens on at most 16 sockets). Paced at 10 at once (the default --max-startups;
-- the 50 share the address, the pacer's endpoint), the sshd drops the 4th and later before
-- its banner; each dropped handshake must be tried again, and no host may fail.
local lab = require "integration.lab"

local PORTS = 50

-- A relay: one listener per port on 127.0.0.1, each connection piped to target:22. Prints the
-- ports, one a line, once all listen.
local RELAY = [[
import asyncio, sys
target, n = sys.argv[1], int(sys.argv[2])
async def pipe(r, w):
    try:
        while True:
            b = await r.read(65536)
            if not b:
                break
            w.write(b)
            await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def serve(cr, cw):
    try:
        sr, sw = await asyncio.open_connection(target, 22)
    except Exception:
        cw.close()
        return
    await asyncio.gather(pipe(cr, sw), pipe(sr, cw))
async def main():
    servers = [await asyncio.start_server(serve, "127.0.0.1", 0) for _ in range(n)]
    print("\n".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
]]

describe("handshake pacing", function()
  local h, dir, ports
  setup(function()
    h = lab.hosts()[1]
    dir = select(2, lab.sh("mktemp -d")):gsub("%s+$", "")
    local code, out = lab.lab("sshd " .. h.name:sub(2) .. " 'MaxStartups 3'")
    assert.are.equal(0, code, out)
    lab.write(dir .. "/relay.py", RELAY)
    lab.sh(string.format("python3 %s/relay.py %s %d >%s/ports 2>%s/relay.err & echo $! >%s/relay.pid",
      dir, h.address, PORTS, dir, dir, dir))
    for _ = 1, 200 do   -- until it listens (up to 10 s)
      ports = {}
      for p in lab.read(dir .. "/ports"):gmatch("%d+") do ports[#ports + 1] = tonumber(p) end
      if #ports == PORTS then break end
      lab.sh("sleep 0.05")
    end
    assert.are.equal(PORTS, #ports, lab.read(dir .. "/relay.err"))
  end)
  teardown(function()
    lab.sh("kill $(cat '" .. dir .. "/relay.pid')")
    lab.lab("sshd " .. h.name:sub(2))   -- back to the defaults
    lab.sh("rm -rf '" .. dir .. "'")
  end)

  it("gets every command of a 50-way exec through a host with MaxStartups 3, no host failed", function()
    -- the host's key under each port ([address]:port, as ssh looks it up)
    local key = lab.read(lab.known_hosts):match("\n?" .. h.name .. ",[^ ]+ ([^\n]+)")
    assert.is_not_nil(key, "no key for " .. h.name .. " in " .. lab.known_hosts)
    local kh, cluster = {}, {
      "apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: startups}\n",
      "spec:\n  config: {loadbalancer: lb.lab.internal}\n  hosts:\n" }
    local relay = { address = "127.0.0.1" }
    for i, port in ipairs(ports) do
      kh[#kh + 1] = string.format("[127.0.0.1]:%d %s", port, key)
      cluster[#cluster + 1] = string.format("    - role: %s\n      hostname: p%d\n      %s\n",
        i == 1 and "controller" or "worker", i, lab.block(relay, { port = port }))
    end
    lab.write(dir .. "/known_hosts", table.concat(kh, "\n") .. "\n")
    lab.write(dir .. "/cluster.yaml", table.concat(cluster))
    local code, out = lab.sh(string.format("%s exec %s/cluster.yaml --known-hosts %s/known_hosts --log-file %s/run.log "
      .. "--concurrency %d -- 'echo got-it'", lab.bin, dir, dir, dir, PORTS))
    assert.are.equal(0, code, out)
    assert.matches(PORTS .. " hosts: " .. PORTS .. " ok, 0 failed", out, 1, true)
    local got = 0
    for _ in out:gmatch("| got%-it\n") do got = got + 1 end
    assert.are.equal(PORTS, got, out)
    -- the sshd did drop handshakes, and they were tried again (else this proved nothing)
    local log = lab.read(dir .. "/run.log")
    assert.matches("handshake dropped", log, 1, true)
  end)
end)
