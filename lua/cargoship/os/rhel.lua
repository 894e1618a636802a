-- cargoship.os.rhel: Enterprise Linux (RHEL and its rebuilds): rpm/dnf, firewalld, SELinux and fapolicyd.
local action = require "cargoship.action"
local linux = require "cargoship.os.linux"
local shell = require "cargoship.shell"

local M = linux:extend {
  id = "rhel",
  title = "Red Hat Enterprise Linux",
  ids = { "rhel" },
  package_type = "rpm",
  package_manager = "dnf",
  firewall = "firewalld",
  enterprise_linux = true,
  paths = { ca_anchors = "/etc/pki/ca-trust/source/anchors" },
  update_ca = "update-ca-trust extract",
}

-- EL 7 and older (and Amazon Linux 2, which matches through ID_LIKE) have yum only.
function M:pm()
  local major = tonumber((self.version_id or ""):match("^(%d+)"))
  if major and major < 8 then return "yum" end
  return "dnf"
end

function M.query_packages(_, names)
  return linux.words_command(shell.fmt("rpm -q --qf %s", "%{NAME}\t%{VERSION}-%{RELEASE}\n"), names)
end

function M:install_packages(names) return linux.words_command(self:pm() .. " install -y", names) end

-- Staged files come from the distro package, whose checksums were verified at build and
-- load; air-gapped hosts often lack the vendor's signing keys.
function M:install_files(paths)
  return linux.words_command(self:pm() .. " install -y --nogpgcheck", paths)
end

-- rpm's own transaction test of staged files on the host (nothing installed).
function M.simulate_files(_, paths) return linux.words_command("rpm -U --test --", paths) end

-- The requirements of files not on the host yet (read locally: cargoship.package.rpm), each
-- asked of the host's rpm database: "C <i> <0|1>" (a package provides the name or file) and
-- that package's Provides as "P <i> name<TAB>flags<TAB>version" (the caller judges the
-- version). "R" when a repository is configured (/etc/yum.repos.d/*.repo, as phase 9 looks):
-- the install may fetch what rpm lacks, and dnf cannot be asked without writing its cache and
-- log (a dry run writes nothing), so what rpm lacks is then not foretold. reqs = { {name}, ... }
function M.simulate_requires(_, reqs)
  if not reqs or #reqs == 0 then return nil, "no requirements" end
  local l = { "ls /etc/yum.repos.d/*.repo >/dev/null 2>&1 && echo R" }
  for i, r in ipairs(reqs) do
    -- i is a number of ours, never a word from outside
    l[#l + 1] = shell.fmt("if rpm -q --whatprovides --qf %s -- %s 2>/dev/null; then echo 'C " .. i .. " 0'; else"
      .. " echo 'C " .. i .. " 1'; fi", "[P " .. i .. " %{PROVIDENAME}\\t%{PROVIDEFLAGS}\\t%{PROVIDEVERSION}\\n]",
      r.name)
  end
  l[#l + 1] = "true"
  return table.concat(l, "\n")
end
-- What a staged file is, to tell it from another of its size at the same target: the header
-- digest rpm prints after checking it (empty when the header does not match its digest).
function M.package_identity(_, path)
  return shell.fmt("rpm -qp --qf %s -- %s 2>/dev/null", "%{SHA256HEADER}", path)
end
function M:remove_packages(names) return linux.words_command(self:pm() .. " remove -y", names) end
-- An rpm transaction cut short leaves two versions of a package in the database: dnf
-- removes the older; yum finishes (or undoes) its journalled transaction.
function M:repair_packages()
  if self:pm() == "yum" then return "yum-complete-transaction -y" end
  return "dnf -y remove --duplicates"
end
function M:hold_packages(names) return linux.words_command(self:pm() .. " versionlock add", names) end
function M:unhold_packages(names) return linux.words_command(self:pm() .. " versionlock delete", names) end

-- Pinning needs the versionlock plugin, which minimal installs lack: without it the
-- packages are installed unpinned and the host says so (distro-package.md §12).
function M:install_local(paths, names)
  local out, why = linux.install_local(self, paths, nil)
  if not out then return nil, why end
  if names and #names > 0 then
    local pm = self:pm()
    out[#out + 1] = action.run { finish = 60,
      cmd = string.format("if %s versionlock list >/dev/null 2>&1; then %s; else echo %s >&2; fi", pm,
        self:hold_packages(names), shell.quote("warning: the " .. pm .. " versionlock plugin is absent: "
          .. table.concat(names, " ") .. " not pinned")),
      say = "pin " .. table.concat(names, ", ") .. " (where versionlock is available)" }
  end
  return out
end

return M
