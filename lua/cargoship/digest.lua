-- cargoship.digest: sha256 of a string, the one hash the pure layers (OS and engine configurers) may use.
--
-- A pure function of its argument: part of the shared vocabulary with action records, shell
-- quoting and JSON (tests/lint/layers.lua), so a configurer can name a thing by its content
-- without reaching for the runtime (cargoship.util also opens files and terminals).
local util = require "cargoship.util"

local M = {}

-- M.sha256(s) -> 64 lowercase hex characters
function M.sha256(s)
  if type(s) ~= "string" then error("digest.sha256: string expected, got " .. type(s), 2) end
  return util.sha256(s)
end

return M
