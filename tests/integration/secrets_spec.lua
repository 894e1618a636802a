-- Integration spec: while a real apply writes secret files, no argv on a host or here holds a secret or its hash.
--
-- Every local user can read every process's argv (`ps -eo args`, /proc/PID/cmdline), and sudo
-- logs the commands it runs: a token, a password or the sha256 of a file holding one (a weak
-- password is an offline guess away from its hash) must never be a word of a command. A
-- sampler on every host (and one on this machine, where cargoship runs) reads every
-- process's cmdline in a tight loop while `cargoship apply` runs a custom phase that writes
-- secret files; the spec then looks for the secrets and their hashes in what was seen. The
-- sampler proves it was fast enough by having seen the write commands themselves.
local util = require "cargoship.util"
local lab = require "integration.lab"

local q = util.quote

-- perl (Essential on Debian, there on every lab host): no process per sweep, so a sweep of
-- /proc takes about a millisecond and a command living a few milliseconds is seen. Every
-- distinct cmdline is printed once, NUL bytes as spaces, entries separated by "\n\30\n".
local SAMPLER = [[
my ($stop, $out) = @ARGV;
my (%seen, $n);
until (-e $stop) {
  $n++;
  opendir(my $d, "/proc") or die "/proc: $!";
  for my $p (grep { /^\d+$/ && $_ != $$ } readdir($d)) {
    open(my $f, "<", "/proc/$p/cmdline") or next;
    local $/;
    my $c = <$f>;
    close $f;
    next unless defined $c && length $c;
    $c =~ tr/\0/ /;
    $seen{$c} = 1;
  }
  closedir $d;
  select(undef, undef, undef, 0.001);
}
open(my $o, ">", "$out.tmp") or die "$out: $!";
print $o "sweeps $n\n\36\n";
print $o "$_\n\36\n" for sort keys %seen;
close $o;
rename("$out.tmp", $out) or die "$out: $!";
]]

local FILES = 12          -- secret files per host: as many short write commands to catch
local DIR = "/etc/cs-secrets"

local work, cluster, phases_dir
local hosts = {}
local secrets = {}        -- contents written, each holding a secret word
local secret_word

local function read(path) return lab.read(path) end

local function ssh(h, cmd, stdin_file)
  return lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " " .. h.name .. " " .. q(cmd)
    .. (stdin_file and (" <" .. q(stdin_file)) or " </dev/null"))
end

local function write_cluster(file)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: secrets",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs(hosts) do
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n        user: root\n"
      .. "        keyPath: %s", i == 1 and "controller" or "worker", h.address, lab.key)
  end
  lab.write(file, table.concat(lines, "\n") .. "\n")
end

-- A custom phase writing FILES secret files on every host, marked secret, mode 0600.
local function write_phase()
  local list = {}
  for i, c in ipairs(secrets) do list[i] = string.format("%q", c) end
  lab.write(phases_dir .. "/secrets.lua", table.concat({
    "-- luacheck: read globals action",
    "local CONTENTS = { " .. table.concat(list, ", ") .. " }",
    "return { id = 'write_secrets', title = 'Write secrets', after = 'acquire_lock',",
    "  reads = { 'connection' }, creates = { 'secrets' },",
    "  assess = function()",
    "    local out = {}",
    "    for i, c in ipairs(CONTENTS) do",
    "      out[i] = action.write { path = " .. string.format("%q", DIR) .. " .. '/s' .. i, content = c,",
    "        mode = '0600', dir_mode = '0700', secret = true, say = 'write secret ' .. i }",
    "    end",
    "    return out",
    "  end }",
  }, "\n") .. "\n")
end

-- The distinct cmdlines a sampler saw, and its sweep count.
local function seen(text)
  local list = {}
  for entry in text:gmatch("(.-)\n\30\n") do list[#list + 1] = entry end
  local sweeps = tonumber((list[1] or ""):match("^sweeps (%d+)"))
  table.remove(list, 1)
  return list, sweeps
end

describe("secrets while a real apply writes them", function()
  setup(function()
    assert.is_truthy(lab.bin, "CARGOSHIP_BIN is not set")
    work = os.tmpname()
    os.remove(work)
    phases_dir = work .. "/phases"
    assert(os.execute("mkdir -p " .. q(phases_dir) .. " " .. q(work .. "/home/.ssh") .. " && cp "
      .. q(lab.known_hosts) .. " " .. q(work .. "/home/.ssh/known_hosts")))
    for i, h in ipairs(lab.hosts()) do
      if i <= 4 then hosts[i] = h end
    end
    cluster = work .. "/cluster.yaml"
    write_cluster(cluster)
    lab.write(work .. "/sampler.pl", SAMPLER)
  end)
  teardown(function()
    for _, h in ipairs(hosts) do ssh(h, "touch /run/cs-sampler.stop; rm -rf " .. DIR) end
    os.execute("touch " .. q(work .. "/sampler.stop"))
    os.execute("sleep 0.5; rm -rf " .. q(work))
  end)

  it("puts no secret and no hash of one in any process's argv, on the hosts or here; files are 0600 root", function()
    -- a word nobody else writes, so a hit can only be this run's
    secret_word = string.format("csSecret%08x%08x", math.random(0, 0x7fffffff), math.floor(util.now() * 1000) % 1e8)
    for i = 1, FILES do secrets[i] = "token: " .. secret_word .. "-" .. i .. "\n" end
    write_phase()
    local needles = { secret_word }
    for _, c in ipairs(secrets) do needles[#needles + 1] = util.sha256(c) end
    -- the samplers: one per host, one here
    for _, h in ipairs(hosts) do
      assert.are.equal(0, (ssh(h, "rm -rf " .. DIR .. " /run/cs-sampler.*; cat >/run/cs-sampler.pl",
        work .. "/sampler.pl")))
      local code, out = ssh(h, "nohup perl /run/cs-sampler.pl /run/cs-sampler.stop /run/cs-sampler.out "
        .. ">/dev/null 2>&1 </dev/null & echo started")
      assert.are.equal(0, code, out)
    end
    os.execute("nohup perl " .. q(work .. "/sampler.pl") .. " " .. q(work .. "/sampler.stop") .. " "
      .. q(work .. "/sampler.out") .. " >/dev/null 2>&1 </dev/null &")
    os.execute("sleep 0.5")
    local code, out = lab.sh("HOME=" .. q(work .. "/home") .. " " .. q(lab.bin) .. " -v apply --confirm --phases "
      .. q(phases_dir) .. " " .. q(cluster))
    assert.are.equal(0, code, out)
    -- stop the samplers and collect what they saw
    for _, h in ipairs(hosts) do ssh(h, "touch /run/cs-sampler.stop") end
    os.execute("touch " .. q(work .. "/sampler.stop"))
    local reports = {}
    for _, h in ipairs(hosts) do
      local text
      for _ = 1, 50 do
        local c, o = ssh(h, "cat /run/cs-sampler.out 2>/dev/null")
        if c == 0 and o ~= "" then text = o break end
        os.execute("sleep 0.1")
      end
      assert.is_truthy(text, h.name .. ": the sampler wrote nothing")
      reports[#reports + 1] = { where = h.name, text = text }
    end
    local here
    for _ = 1, 50 do
      here = read(work .. "/sampler.out")
      if here ~= "" then break end
      os.execute("sleep 0.1")
    end
    reports[#reports + 1] = { where = "the operator's machine", text = here }
    for _, r in ipairs(reports) do
      local list, sweeps = seen(r.text)
      assert.is_true((sweeps or 0) > 10, r.where .. ": the sampler swept /proc only " .. tostring(sweeps) .. " times")
      local writes = 0
      for _, cmdline in ipairs(list) do
        if cmdline:find(DIR, 1, true) then writes = writes + 1 end
        for _, needle in ipairs(needles) do
          assert.is_nil(cmdline:find(needle, 1, true), string.format("%s: a process's argv holds %s: %s", r.where,
            needle == secret_word and "the secret" or ("the sha256 " .. needle), cmdline:sub(1, 400)))
        end
      end
      io.stderr:write(string.format("[secrets] %s: %d sweeps of /proc, %d distinct cmdlines, %d of them write "
        .. "commands\n", r.where, sweeps or 0, #list, writes))
      if r.where ~= "the operator's machine" then
        -- the sampler was fast enough to see the write commands: the absence above means something
        assert.is_true(writes > 0, r.where .. ": the sampler saw no write command in " .. #list .. " cmdlines")
      end
    end
    -- the log says nothing of them either, and the files are private to root
    assert.is_nil(out:find(secret_word, 1, true), "the log holds the secret")
    for _, h in ipairs(hosts) do
      local _, st = ssh(h, "stat -c '%a %U %G' " .. DIR .. "/s1 " .. DIR .. "/s" .. FILES .. " && cat " .. DIR
        .. "/s" .. FILES)
      assert.are.equal("600 root root\n600 root root\n" .. secrets[FILES], st, h.name)
    end
  end)
end)
