-- tests/lint/layers.lua: who may require whom (design.md §4, the load-bearing walls), as data for the layer lint.
--
-- A module belongs to the first layer whose pattern matches its name. The C runtime's
-- families (runtime/*.c, luaopen_cargoship_<family>) are the layer "runtime"; the checker
-- reads them from the sources, so a new C family is covered the day it is added.
-- A layer with `allow` may require only modules of those layers (and of `modules`, named one
-- by one); a rule with `deny` forbids the layers it lists to every layer but `except`.
-- Only literal requires are read; `require("distros." .. t)` is the engine loader's own way
-- of finding an engine and is not an edge this file can judge.
local M = {}

M.layers = {
  -- the vocabulary every layer shares: action records, shell quoting, JSON and YAML
  -- serialisation (pure functions; cargoship.yaml is C but its dump/load touch no host)
  { name = "vocabulary", match = { "^cargoship%.action$", "^cargoship%.shell$", "^cargoship%.json$", "^cjson$",
                                   "^cargoship%.yaml$", "^cargoship%.digest$" } },
  { name = "runtime", runtime = true },
  { name = "cli", match = { "^cargoship%.cli$", "^cargoship%.cli%.", "^cargoship%.commands%." } },
  { name = "phases", match = { "^cargoship%.phases%." } },
  { name = "engines", match = { "^distros%." } },
  { name = "os", match = { "^cargoship%.os$", "^cargoship%.os%." } },
  { name = "package", match = { "^cargoship%.package$", "^cargoship%.package%." } },
  { name = "facts", match = { "^cargoship%.facts$", "^cargoship%.facts%." } },
  { name = "config", match = { "^cargoship%.config$", "^cargoship%.config%." } },
  { name = "runner", match = { "^cargoship%.pipeline%.", "^cargoship%.pipelines%." } },
  { name = "transport", match = { "^cargoship%.transport$", "^cargoship%.transport%.", "^cargoship%.ssh%." } },
  { name = "other", match = { "." } },
}

M.rules = {
  { deny = { "cli" }, except = { "cli" },
    why = "nothing uses the command line" },
  { layer = "phases", allow = { "vocabulary", "phases", "engines", "os", "package", "facts", "config" },
    modules = { "cargoship.lock" },
    why = "phases use the host and context objects (handed in), facts and the configurers, never the runtime, "
      .. "the transport or the runner: waiting and randomness come from the context" },
  { layer = "engines", allow = { "vocabulary", "engines" },
    why = "engine configurers are pure: facts in, actions and rendered files out" },
  { layer = "os", allow = { "vocabulary", "os" },
    why = "OS configurers are pure: facts in, actions and rendered files out" },
  { layer = "facts", allow = { "vocabulary", "facts" },
    why = "facts are probes through the host object and pure parsers of what the probes print" },
  { layer = "package", allow = { "vocabulary", "package", "engines", "config" },
    modules = { "cargoship.archive", "cargoship.util", "cargoship.fs" },
    why = "the package format may use the archive and hash primitives (and the engines' list of types)" },
  { layer = "config", deny = { "transport", "runner", "phases", "facts" },
    why = "loading a cluster file runs nothing and touches no host" },
}

return M
