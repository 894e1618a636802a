-- The SSH runtime when bytes land between the calls of one read: exec under a recv that defers each arrival.
--
-- tests/c/recv_defer.c (LD_PRELOAD) answers the first recv that could read an arrival with
-- EAGAIN. An exec drains stdout, then stderr, then waits for the socket: if the stderr read
-- queued stdout's data and the host's EOF, nothing more ever arrives and the exec waits for
-- good. That hang was seen once under valgrind (integration/leak, stop 31: the exec's channel
-- held 69 unread bytes and the host's EOF and CLOSE, its task waiting on the socket).
local lab = require "integration.lab"

local q = require("cargoship.util").quote

describe("ssh runtime, each arrival deferred by one recv", function()
  it("gets every command's output and exit code, on four hosts at once", function()
    local shim = os.getenv("CARGOSHIP_BUILD_DIR") .. "/tests/cs_recv_defer.so"
    assert(io.open(shim, "rb"), "no " .. shim .. ": build the cs_recv_defer target"):close()
    local script = lab.fanout_script(4, { timeout = 30, tail = 'print("100 commands")', each = [[
      for n = 1, 25 do
        local cmd = n % 2 == 0 and "echo out$0; echo err$0 >&2; exit 3" or "echo out$0"
        local out, e, code = s:exec(cmd:gsub("%$0", n), { timeout = 10 })
        assert(out, a .. ": command " .. n .. ": " .. tostring(e))
        assert(out == "out" .. n .. "\n", a .. ": command " .. n .. ": stdout " .. out)
        assert(e == (n % 2 == 0 and "err" .. n .. "\n" or ""), a .. ": command " .. n .. ": stderr " .. e)
        assert(code == (n % 2 == 0 and 3 or 0), a .. ": command " .. n .. ": exit " .. tostring(code))
      end
      assert(s:close())]] })
    -- a sanitized lua5.4 (tests/sanitize) wants its runtime first in the list: the shim goes first
    local asan = os.getenv("ASAN_OPTIONS")
    local env = "LD_PRELOAD=" .. q(shim) .. " ASAN_OPTIONS="
      .. q((asan and asan .. ":" or "") .. "verify_asan_link_order=0")
    local code, out = lab.sh("timeout -k 5 120 env " .. env .. " lua5.4 " .. q(script) .. " 2>&1")
    os.remove(script)
    assert.are.equal(0, code, out:sub(-2000))
    assert.matches("100 commands", out, 1, true)
  end)
end)
