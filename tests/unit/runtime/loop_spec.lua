-- Specs of the event loop (runtime/loop.c): ordering, join, cancellation, destructors.
local loop = require "cargoship.loop"

describe("loop", function()
  it("wakes 1,000 sleeping tasks in deadline order in one loop", function()
    local woke = {}
    local ok = loop.run(function()
      local tasks = {}
      for i = 1, 1000 do
        local d = math.random() * 0.3
        tasks[i] = loop.spawn(function()
          local deadline = loop.now() + d
          loop.sleep(d)
          woke[#woke + 1] = deadline
          return i
        end)
      end
      for i = 1, 1000 do
        local jok, v = tasks[i]:join()
        assert.is_true(jok)
        assert.are.equal(i, v)
      end
    end)
    assert.is_true(ok)
    assert.are.equal(1000, #woke)
    -- sleep() reads the clock again after the task's loop.now(), and a preempted process (CI
    -- under load) can put tens of ms between the two readings; a broken order (FIFO or LIFO
    -- wakes, a broken heap) is off by up to the whole 0.3 s spread
    local worst = 0
    for i = 2, #woke do worst = math.max(worst, woke[i - 1] - woke[i]) end
    assert.is_true(worst < 0.05, string.format("a task woke %.3f s before an earlier deadline", worst))
  end)

  it("never wakes a sleeper before its deadline", function()
    local ok, slept = loop.run(function()
      local t0 = loop.now()
      loop.sleep(0.05)
      return loop.now() - t0
    end)
    assert.is_true(ok)
    assert.is_true(slept >= 0.05, "slept " .. slept)
  end)

  it("hands a task's results and its error to join", function()
    loop.run(function()
      local good = loop.spawn(function(a, b) return a + b, "x" end, 2, 3)
      local bad = loop.spawn(function() error("boom", 0) end)
      assert.are.same({ true, 5, "x" }, { good:join() })
      assert.are.same({ false, "boom", "error" }, { bad:join() })
    end)
  end)

  it("times out a join without cancelling the task", function()
    loop.run(function()
      local slow = loop.spawn(function() loop.sleep(0.2); return "late" end)
      local ok, err, code = slow:join(0.01)
      assert.is_false(ok)
      assert.are.equal("timeout", code)
      assert.matches("did not finish", err)
      assert.are.same({ true, "late" }, { slow:join() })
    end)
  end)

  it("cancels a waiting task at its wait and runs its destructors in reverse", function()
    local ran = {}
    loop.run(function()
      local t = loop.spawn(function()
        loop.defer(function() ran[#ran + 1] = "first" end)
        loop.defer(function() ran[#ran + 1] = "second" end)
        loop.sleep(60)
        ran[#ran + 1] = "after sleep"
      end)
      loop.sleep(0.01)
      t:cancel()
      local ok, err, code = t:join(1)
      assert.is_false(ok)
      assert.are.equal("cancelled", err)
      assert.are.equal("cancelled", code)
    end)
    assert.are.same({ "second", "first" }, ran)
  end)

  it("lets destructors wait even though the task was cancelled", function()
    local cleaned = false
    loop.run(function()
      local t = loop.spawn(function()
        loop.defer(function() loop.sleep(0.01); cleaned = true end)
        loop.sleep(60)
      end)
      loop.sleep(0)
      t:cancel()
      t:join()
    end)
    assert.is_true(cleaned)
  end)

  it("finishes shielded work when cancelled during it, then cancels at the next wait", function()
    local steps = {}
    loop.run(function()
      local t = loop.spawn(function()
        local a, b = loop.shield(function(x)
          loop.sleep(0.05)
          steps[#steps + 1] = "slept through the cancel"
          return x, "two"
        end, "one")
        steps[#steps + 1] = a .. " " .. b
        loop.sleep(60)
        steps[#steps + 1] = "not reached"
      end)
      loop.sleep(0.01)
      t:cancel()
      local ok, err, code = t:join()
      steps[#steps + 1] = tostring(ok) .. " " .. tostring(err) .. " " .. tostring(code)
    end)
    assert.are.same({ "slept through the cancel", "one two", "false cancelled cancelled" }, steps)
  end)

  it("passes a shielded function's error on and lifts the shield", function()
    local ok, err = loop.run(function()
      local sok, serr = pcall(loop.shield, function() error("boom", 0) end)
      assert.is_false(sok)
      assert.are.equal("boom", serr)
      loop.current():cancel()
      loop.sleep(1)   -- the shield is gone: this raises at once
    end)
    assert.is_false(ok)
    assert.are.equal("cancelled", err)
  end)

  it("closes to-be-closed variables when a task is cancelled", function()
    local closed = false
    loop.run(function()
      local t = loop.spawn(function()
        local guard <close> = setmetatable({}, { __close = function() closed = true end })
        loop.sleep(60)
        return guard
      end)
      loop.sleep(0)
      t:cancel()
      t:join()
    end)
    assert.is_true(closed)
  end)

  it("cancels the remaining tasks when the main task ends", function()
    local cleaned = 0
    loop.run(function()
      for _ = 1, 10 do
        loop.spawn(function()
          loop.defer(function() cleaned = cleaned + 1 end)
          loop.sleep(60)
        end)
      end
      loop.sleep(0)
    end)
    assert.are.equal(10, cleaned)
  end)

  it("raises when waiting outside a task", function()
    assert.has_error(function() loop.sleep(0) end,
      "cargoship: cannot wait outside a task of the running loop")
  end)

  it("bounds holders with a semaphore", function()
    local inside, most = 0, 0
    loop.run(function()
      local sem = loop.semaphore(3)
      local ts = {}
      for i = 1, 20 do
        ts[i] = loop.spawn(function()
          sem:acquire()
          inside = inside + 1
          most = math.max(most, inside)
          loop.sleep(0.002)
          inside = inside - 1
          sem:release()
        end)
      end
      for _, t in ipairs(ts) do assert.is_true((t:join())) end
    end)
    assert.are.equal(3, most)
  end)

  it("gives up an acquire at its timeout", function()
    loop.run(function()
      local sem = loop.semaphore(0)
      local ok, _, code = sem:acquire(0.01)
      assert.is_nil(ok)
      assert.are.equal("timeout", code)
    end)
  end)
end)
