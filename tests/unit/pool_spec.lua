-- Specs of cargoship.pool: bounded concurrency, per-item results and errors, cancellation.
local loop = require "cargoship.loop"
local pool = require "cargoship.pool"

describe("pool.map", function()
  it("keeps at most N items in flight and returns results in item order", function()
    local inside, most = 0, 0
    local items = {}
    for i = 1, 25 do items[i] = i end
    local ok, results = loop.run(function()
      return pool.map(items, 4, function(item)
        inside = inside + 1
        most = math.max(most, inside)
        loop.sleep(0.001 * (item % 3))
        inside = inside - 1
        return item * 2, "x"
      end)
    end)
    assert.is_true(ok)
    assert.are.equal(4, most)
    for i = 1, 25 do
      assert.is_true(results[i].ok)
      assert.are.equal(i * 2, results[i][1])
      assert.are.equal("x", results[i][2])
    end
  end)

  it("reports each item's error without stopping the others", function()
    local _, results = loop.run(function()
      return pool.map({ 1, 2, 3 }, 2, function(item)
        if item == 2 then error("bad item", 0) end
        return item
      end)
    end)
    assert.is_true(results[1].ok)
    assert.are.same({ ok = false, err = "bad item", code = "error" }, results[2])
    assert.is_true(results[3].ok)
  end)

  it("starts no new item after cancellation and cancels those in flight", function()
    local started, cleaned = 0, 0
    loop.run(function()
      local t = loop.spawn(function()
        local items = {}
        for i = 1, 50 do items[i] = i end
        pool.map(items, 5, function()
          started = started + 1
          loop.defer(function() cleaned = cleaned + 1 end)
          loop.sleep(30)
        end)
      end)
      loop.sleep(0.01)
      t:cancel()
      local ok, _, code = t:join(5)
      assert.is_false(ok)
      assert.are.equal("cancelled", code)
    end)
    assert.are.equal(5, started)
    assert.are.equal(5, cleaned)
  end)

  it("each() raises the first failing item", function()
    local ok, err = loop.run(function()
      return pool.each({ 1, 2 }, 0, function(i) if i == 2 then error("two", 0) end end)
    end)
    assert.is_false(ok)
    assert.matches("item 2: two", err)
  end)
end)
