-- tests/helper.lua: busted helper; points Lua at the source tree and the built runtime module.
local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local build = os.getenv("CARGOSHIP_BUILD_DIR") or (src .. "/build")
package.path = table.concat({
  src .. "/lua/?.lua", src .. "/lua/?/init.lua", src .. "/?.lua", src .. "/?/init.lua",
  src .. "/tests/?.lua", package.path }, ";")
package.cpath = build .. "/lib/?.so;" .. package.cpath
package.loaded["cargoship.build"] = {
  version = os.getenv("CARGOSHIP_VERSION") or "0.0.0",
  root = src,
}
