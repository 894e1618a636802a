-- Specs for `cargoship sha256sum` of URLs: fetched from a loopback HTTP(S) server this spec starts itself
-- (127.0.0.1, a port the kernel picks; never any other address), hashed as the body streams.
local support = require "unit.commands.support"
local util = require "cargoship.util"

local q = util.quote

-- A loopback server: files of DIR, /redirect -> /blob, /status/N answers N; TLS when given a
-- cert and key. Prints its port on the first line of stdout.
local SERVER = [[
import http.server, ssl, sys, functools
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/redirect":
            self.send_response(302); self.send_header("Location", "/blob"); self.end_headers(); return
        if self.path.startswith("/status/"):
            self.send_error(int(self.path[8:])); return
        super().do_GET()
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=sys.argv[1]))
if len(sys.argv) > 2:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
]]

local write = require("unit.files").write

local read = require("unit.files").read

-- starts the server; -> {pid, port}
local function serve(dir, tls)
  write(dir .. "/server.py", SERVER)
  local args = q(dir .. "/www")
  if tls then args = args .. " " .. q(dir .. "/cert.pem") .. " " .. q(dir .. "/key.pem") end
  local out = dir .. (tls and "/tls.port" or "/http.port")
  local p = assert(io.popen("python3 -u " .. q(dir .. "/server.py") .. " " .. args .. " >" .. q(out)
    .. " 2>" .. q(out .. ".err") .. " & echo $!"))
  local pid = tonumber(p:read("l"))
  p:close()
  for _ = 1, 100 do
    local port = (read(out) or ""):match("^(%d+)\n")
    if port then return { pid = pid, port = tonumber(port) } end
    os.execute("sleep 0.05")
  end
  error("the loopback server did not start: " .. tostring(read(out .. ".err")))
end

describe("cargoship sha256sum of URLs", function()
  local dir, http, https, blob
  setup(function()
    dir = support.temp_dir()
    assert(os.execute("mkdir -p " .. q(dir .. "/www")))
    blob = {}
    for i = 1, 5000 do blob[i] = string.format("line %d of the blob\n", i) end
    blob = table.concat(blob)
    write(dir .. "/www/blob", blob)
    -- 64 MiB of zeros (sparse): big enough that holding it whole would show in the RSS
    assert(os.execute("truncate -s 64M " .. q(dir .. "/www/big")))
    assert(os.execute("openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -days 1 -keyout "
      .. q(dir .. "/key.pem") .. " -out " .. q(dir .. "/cert.pem") .. " >/dev/null 2>&1"))
    assert(os.execute("mkdir -p " .. q(dir .. "/tree/bin") .. " && printf 'the engine\\n' > "
      .. q(dir .. "/tree/bin/rke2") .. " && tar -czf " .. q(dir .. "/www/rke2.tar.gz") .. " -C "
      .. q(dir .. "/tree") .. " bin/rke2"))
    http, https = serve(dir), serve(dir, true)
  end)
  teardown(function()
    for _, s in ipairs({ http, https }) do if s then os.execute("kill " .. s.pid) end end
    support.remove_tree(dir)
  end)

  local function url(path, tls) return string.format("%s://127.0.0.1:%d%s", tls and "https" or "http",
    (tls and https or http).port, path) end

  it("prints the bare hash of one URL, as the Go tool does, equal to coreutils' hash of the file", function()
    local code, out, err = support.run({ "sha256sum", url("/blob") })
    assert.equal(0, code, err)
    assert.equal(util.sha256(blob) .. "\n", out)
    local p = assert(io.popen("sha256sum " .. q(dir .. "/www/blob")))
    assert.equal(p:read("l"):match("^%x+"), out:sub(1, 64))
    p:close()
    assert.matches("a remote source", err, 1, true)
  end)

  it("prints coreutils' HASH  NAME lines for several operands, which sha256sum -c accepts", function()
    local code, out = support.run({ "sha256sum", url("/blob"), dir .. "/www/blob", url("/redirect") })
    assert.equal(0, code)
    local sum = util.sha256(blob)
    assert.equal(string.format("%s  %s\n%s  %s\n%s  %s\n", sum, url("/blob"), sum, dir .. "/www/blob", sum,
      url("/redirect")), out)
    write(dir .. "/sums", string.format("%s  %s\n", sum, dir .. "/www/blob"))
    assert.is_true(os.execute("sha256sum -c --quiet " .. q(dir .. "/sums")))
  end)

  it("fails on a status of 400 or more, naming the URL and the status, and hides user-info", function()
    local code, out, err = support.run({ "sha256sum", url("/status/404"), url("/blob") })
    assert.equal(1, code)
    assert.equal(util.sha256(blob) .. "  " .. url("/blob") .. "\n", out) -- the others are still printed
    assert.matches("cargoship sha256sum: " .. url("/status/404") .. ": HTTP 404\n", err, 1, true)
    code, out, err = support.run({ "sha256sum", (url("/status/503"):gsub("//", "//ops:s3cret@")) })
    assert.equal(1, code)
    assert.matches("http://***@127.0.0.1:" .. http.port .. "/status/503: HTTP 503", err, 1, true)
    assert.equal("", out)
    assert.is_nil(err:find("s3cret", 1, true))
  end)

  it("names a TLS failure (a certificate no CA signed) and a refused connection", function()
    local code, _, err = support.run({ "sha256sum", url("/blob", true) })
    assert.equal(1, code)
    assert.matches(url("/blob", true) .. ": TLS: SSL certificate problem", err, 1, true)
    -- the same server with its certificate trusted: TLS is really spoken, and the hash is right
    local env = "CURL_CA_BUNDLE=" .. q(dir .. "/cert.pem") .. " "
    local p = assert(io.popen(env .. q(os.getenv("CARGOSHIP_BIN")) .. " sha256sum " .. q(url("/blob", true))
      .. " 2>/dev/null"))
    assert.equal(util.sha256(blob), p:read("l"))
    p:close()
    code, _, err = support.run({ "sha256sum", "http://127.0.0.1:1/x" })
    assert.equal(1, code)
    assert.matches("http://127.0.0.1:1/x: cannot connect: ", err, 1, true)
  end)

  it("names a host name that does not resolve (in a network namespace of its own: no packet leaves)", function()
    if not os.execute("unshare -rn true 2>/dev/null") then
      pending("unshare -rn is not permitted here: the DNS failure is not exercised")
      return
    end
    local p = assert(io.popen("unshare -rn " .. q(os.getenv("CARGOSHIP_BIN"))
      .. " sha256sum http://no-such-host.invalid/x 2>&1; echo \"exit $?\""))
    local out = p:read("a")
    p:close()
    assert.matches("http://no-such-host.invalid/x: cannot resolve the host name (DNS): ", out, 1, true)
    assert.matches("exit 1\n", out, 1, true)
  end)

  it("-e MEMBER hashes one member of an archive, local or fetched (as the Go tool's --extract-path)", function()
    local want = util.sha256("the engine\n")
    local code, out = support.run({ "sha256sum", "-e", "bin/rke2", url("/rke2.tar.gz") })
    assert.same({ 0, want .. "\n" }, { code, out })
    code, out = support.run({ "sha256sum", "--extract-path", "bin/rke2", dir .. "/www/rke2.tar.gz" })
    assert.same({ 0, want .. "\n" }, { code, out })
    local err
    code, out, err = support.run({ "sha256sum", "-e", "bin/k3s", url("/rke2.tar.gz") })
    assert.same({ 1, "" }, { code, out })
    assert.matches(url("/rke2.tar.gz") .. ": --extract-path bin/k3s: ", err, 1, true)
    -- nothing is left behind in the temporary directory
    local p = assert(io.popen("ls -d \"${TMPDIR:-/tmp}\"/cargoship-sum.* 2>/dev/null | wc -l"))
    assert.equal("0", p:read("l"))
    p:close()
  end)

  it("refuses schemes other than http and https without running curl", function()
    local code, _, err = support.run({ "sha256sum", "file:///etc/passwd" })
    assert.equal(1, code)
    assert.matches("file:///etc/passwd: only http:// and https:// URLs are fetched", err, 1, true)
  end)

  it("streams the body: 64 MiB hashed in a process whose peak RSS stays far below it", function()
    -- under ASan (the Debug build) freed buffers wait in a 256 MiB quarantine, which is RSS: keep it small here
    local p = assert(io.popen("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1 "
      .. "/usr/bin/time -f 'rss %M' " .. q(os.getenv("CARGOSHIP_BIN")) .. " sha256sum "
      .. q(url("/big")) .. " 2>&1"))
    local out = p:read("a")
    p:close()
    local zeros = util.sha256_hasher()
    local mib = string.rep("\0", 1 << 20)
    for _ = 1, 64 do zeros:update(mib) end
    assert.matches("\n" .. zeros:finish() .. "\n", "\n" .. out, 1, true)
    local rss = tonumber(out:match("rss (%d+)"))
    assert.truthy(rss and rss < 32 * 1024, "peak RSS " .. tostring(rss) .. " KiB")
    print(string.format("\n# sha256sum of a 64 MiB URL: peak RSS %d KiB", rss))
  end)
end)
