-- Specs for reading a distro.yaml's type, version and architectures (cargoship.package).
local package_reader = require "cargoship.package"

local dir

local function write(name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local HEAD = "apiVersion: zarf.dev/v1alpha1\nkind: ZarfDistro\n"

describe("cargoship.package.read", function()
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)
  teardown(function()
    os.execute("rm -rf " .. dir)
  end)

  it("reads type, version and the built architectures", function()
    local p = write("built.yaml", HEAD .. [[
metadata: {name: demo-rke2, version: 1.35.4-rke2r1, architecture: amd64}
build: {architectures: [amd64, arm64], version: 1.35.4-rke2r1}
spec:
  type: rke2
  version: 1.35.4-rke2r1
  config: {}
]])
    local got = package_reader.read(p)
    assert.same({ type = "rke2", version = "1.35.4-rke2r1", architectures = { "amd64", "arm64" },
                  name = "demo-rke2", file = p, engine = {} },
                { type = got.type, version = got.version, architectures = got.architectures, name = got.name,
                  file = got.file, engine = got.engine })
    -- no checksums.txt and no aggregate: a definition, not a built package (no files to upload)
    assert.is_false(got.built)
    assert.same({ sysctl = {}, env = {}, kernel = {}, files = {},
                  selinux = { modules = {}, booleans = {}, file_contexts = {} } }, got.os)
  end)

  -- `key:` with no value is a YAML null; the schema lets a section be null, so the reader must read it
  -- as absent (a fuzz finding: imageConfig null raised "attempt to index a cargoship.yaml.null value").
  it("reads a section left empty (YAML null) as absent, never raising", function()
    local sections = {
      "  config:\n    imageConfig:\n", "  config:\n    engine:\n", "  config:\n    os:\n",
      "  config:\n    manifests:\n", "  config:\n", "  values:\n", "  config:\n    files:\n",
      "  config:\n    imageConfig:\n      images:\n      path:\n",
    }
    for i, body in ipairs(sections) do
      local p = write("null" .. i .. ".yaml",
        HEAD .. "metadata: {name: n}\nspec:\n  type: k3s\n  version: 1.35.2-k3s1\n" .. body)
      local ok, got, why = pcall(package_reader.read, p)
      assert(ok, body .. ": raised " .. tostring(got))
      assert(got or (type(why) == "string" and why:find(p, 1, true)), body .. ": " .. tostring(why))
      if got then
        assert.same({}, got.images, body)
        assert.same("none", got.image_config.compression, body)
        assert.same({}, got.files, body)
      end
    end
  end)

  it("checks spec.config.os and normalizes it for the prepare phases", function()
    local p = write("os.yaml", HEAD .. [[
metadata: {name: o}
spec:
  type: rke2
  version: 1.35.4-rke2r1
  config:
    os:
      sysctl: {net.ipv4.ip_forward: 1, vm.max_map_count: "262144"}
      env: {HTTPS_PROXY: "http://proxy:3128"}
      kernel: [br_netfilter, overlay]
      fapolicyd: "allow perm=any all : all\n"
      selinux:
        modules: [{name: cargoship-rke2, cil: "(allow a b (file (read)))"}]
        booleans: {container_manage_cgroup: true}
        fileContexts: [{path: "/var/lib/rancher(/.*)?", type: container_var_lib_t}]
      files:
        - {source: rpms/container-selinux-2.229.0-1.el9.noarch.rpm, target: /tmp/container-selinux.rpm,
           shasum: abababababababababababababababababababababababababababababababab, selector: {package: rpm}}
]])
    local pkg = assert(package_reader.read(p))
    assert.same({ ["net.ipv4.ip_forward"] = "1", ["vm.max_map_count"] = "262144" }, pkg.os.sysctl)
    assert.same({ "br_netfilter", "overlay" }, pkg.os.kernel)
    assert.equal("allow perm=any all : all\n", pkg.os.fapolicyd)
    assert.same({ { name = "cargoship-rke2", priority = 400, cil = "(allow a b (file (read)))" } },
      pkg.os.selinux.modules)
    assert.same({ { path = "/var/lib/rancher(/.*)?", type = "container_var_lib_t", file_type = "all" } },
      pkg.os.selinux.file_contexts)
    assert.same({ index = 1, target = "/tmp/container-selinux.rpm", basename = "container-selinux.rpm",
      sha256 = ("ab"):rep(32),
                  package = "rpm", source = dir .. "/os/0/container-selinux.rpm" }, pkg.os.files[1])
    local bad = write("bad-os.yaml", HEAD .. [[
metadata: {name: o}
spec: {type: rke2, version: 1.35.4-rke2r1, config: {os: {kernel: ["rm -rf /"]}}}
]])
    local none, why = package_reader.read(bad)
    assert.is_nil(none)
    assert.matches('spec.config.os.kernel[0]: expected a kernel module name, got string "rm -rf /"', why, 1, true)
  end)

  it("carries spec.config.engine for the engine configurers to render", function()
    local p = write("engine.yaml", HEAD .. [[
metadata: {name: e}
spec:
  type: k3s
  version: 1.35.5-k3s1
  config:
    engine:
      config: {disable: [traefik], write-kubeconfig-mode: "0644"}
]])
    local pkg = assert(package_reader.read(p))
    assert.same({ config = { disable = { "traefik" }, ["write-kubeconfig-mode"] = "0644" } }, pkg.engine)
    local e = require("distros.engine").for_package(pkg)
    local cfg = require("cargoship.yaml").load(e:render_config({ name = "cp1", role = "controller" }, {}).content)[1]
    assert.equal("0644", cfg["write-kubeconfig-mode"])
  end)

  it("falls back to metadata.architectures, metadata.architecture, then amd64", function()
    local p = write("multi.yaml", HEAD .. "metadata: {name: m, architectures: [arm64, riscv64]}\n"
      .. "spec: {type: k3s, version: 1.35.2-k3s1, config: {}}\n")
    assert.same({ "arm64", "riscv64" }, package_reader.read(p).architectures)
    p = write("single.yaml", HEAD .. "metadata: {name: s, architecture: arm64}\n"
      .. "spec: {type: upstream, version: 1.35.3, config: {}}\n")
    assert.same({ "arm64" }, package_reader.read(p).architectures)
    p = write("none.yaml", HEAD .. "metadata: {name: n}\nspec: {type: upstream, version: 1.35.3, config: {}}\n")
    assert.same({ "amd64" }, package_reader.read(p).architectures)
  end)

  it("finds distro.yaml in a package directory and skips other documents", function()
    os.execute("mkdir -p " .. dir .. "/pkg")
    write("pkg/distro.yaml", "kind: Other\n---\n" .. HEAD .. "metadata: {name: d}\n"
      .. "spec: {type: k3s, version: 1.35.2-k3s1, config: {}}\n")
    local d = package_reader.read(dir .. "/pkg")
    assert.equal("k3s", d.type)
    assert.equal(dir .. "/pkg/distro.yaml", d.file)
  end)

  it("refuses an unknown type, a missing version and a file with no ZarfDistro", function()
    local d, why = package_reader.read(write("bad-type.yaml", HEAD .. "metadata: {name: t}\n"
      .. "spec: {type: microk8s, version: 1.35.3}\n"))
    assert.is_nil(d)
    assert.matches('bad-type.yaml:4:14: spec.type: expected one of "rke2", "k3s", "upstream", got string "microk8s"',
      why, 1, true)
    d, why = package_reader.read(write("bad-version.yaml", HEAD .. "metadata: {name: t}\nspec: {type: rke2}\n"))
    assert.is_nil(d)
    assert.matches('bad-version.yaml:4:7: spec: missing required field "version"', why, 1, true)
    d, why = package_reader.read(write("bad-version.yaml", HEAD
      .. "metadata: {name: t}\nspec: {type: rke2, version: one}\n"))
    assert.is_nil(d)
    assert.matches('spec.version: expected a version like 1.35.4-rke2r1, got string "one"', why, 1, true)
    d, why = package_reader.read(write("cluster.yaml", "kind: ZarfCluster\n"))
    assert.is_nil(d)
    assert.matches("no document with kind: ZarfDistro", why, 1, true)
    d, why = package_reader.read(dir .. "/missing.yaml")
    assert.is_nil(d)
    assert.is_string(why)
  end)
end)
