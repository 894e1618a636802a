-- luacheck configuration: Lua 5.4, no globals anywhere; busted's globals in specs.
std = "lua54"
max_line_length = 120
files["tests"] = { std = "+busted" }
exclude_files = { "build", "build-*" }
