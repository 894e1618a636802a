-- Spec support: the fixture packages (tests/fixtures/packages/<name>/distro.yaml), built by `package create` and read.
--
-- of(name) -> pkg: the directory built with the real builder (cargoship.package.build) into a
-- temp archive, read back with the real reader (cargoship.package.read): the shape apply gets,
-- never a hand-written table. Built once per spec run; release() removes every temp file.
local util = require "cargoship.util"

local M = {}

M.DIR = (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/tests/fixtures/packages"

local built, workdir = {}, nil

function M.of(name)
  if built[name] then return built[name] end
  if not workdir then
    local p = assert(io.popen("mktemp -d \"${TMPDIR:-/tmp}/cargoship-fixtures.XXXXXX\""))
    workdir = p:read("l")
    p:close()
  end
  local archive = assert(require("cargoship.package.build").create(M.DIR .. "/" .. name, { out = workdir }))
  local pkg = assert(require("cargoship.package").read(archive))
  built[name] = pkg
  return pkg
end

function M.release()
  for name, pkg in pairs(built) do
    require("cargoship.package").release(pkg)
    built[name] = nil
  end
  if workdir then os.execute("rm -rf " .. util.quote(workdir)) end
  workdir = nil
end

return M
