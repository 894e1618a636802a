-- cargoship.os.fedora: Fedora, under rhel: the same rpm/dnf, firewalld and SELinux tooling EL phases need.
--
-- Why rhel and not linux: every Enterprise Linux phase (container-selinux, SELinux policy,
-- fapolicyd, RPM uploads) applies to Fedora as it does to RHEL, and the Go tool treats Fedora
-- as Enterprise Linux for RPM uploads. Its differences (no yum era, dnf5 from 41 on, which
-- keeps the `dnf versionlock` spelling) are overridden here, not re-stated from scratch.
local rhel = require "cargoship.os.rhel"

local M = rhel:extend {
  id = "fedora",
  title = "Fedora",
  ids = { "fedora" },
}

function M.pm() return "dnf" end

return M
