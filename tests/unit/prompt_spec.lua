-- Specs of cargoship.prompt: where an encrypted key's passphrase comes from.
local prompt = require "cargoship.prompt"

describe("prompt.passphrase_source", function()
  it("takes CARGOSHIP_SSH_PASSPHRASE first", function()
    local src = prompt.passphrase_source(function(k) return ({ CARGOSHIP_SSH_PASSPHRASE = "s3" })[k] end, true)
    assert.are.equal("s3", src("/k"))
  end)

  it("asks nobody when not on a terminal and the variable is unset", function()
    local src = prompt.passphrase_source(function() return nil end, false)
    assert.is_nil(src("/k"))
  end)

  it("treats an empty variable as unset", function()
    local src = prompt.passphrase_source(function() return "" end, false)
    assert.is_nil(src("/k"))
  end)
end)
