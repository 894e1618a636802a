/* test_yaml.c - the yaml family from C: positions, errors, aliases, merges, and fuzzing. */
#include "cs.h"
#include "ctest.h"

#include <stdint.h>
#include <stdlib.h>

#define FUZZ_CASES 20000

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "cargoship.yaml", luaopen_cargoship_yaml, 0);
  lua_setglobal(L, "yaml");
  return L;
}

/* Calls yaml.load(text, name) from C; leaves its results on the stack, returns their count. */
static int c_load(lua_State *L, const char *text, size_t len, const char *name) {
  int top = lua_gettop(L);
  lua_getglobal(L, "yaml");
  lua_getfield(L, -1, "load");
  lua_remove(L, -2);
  lua_pushlstring(L, text, len);
  lua_pushstring(L, name);
  lua_call(L, 2, LUA_MULTRET);
  return lua_gettop(L) - top;
}

static void check_c_api(lua_State *L) {
  int n = c_load(L, "a: 1\na: 2\n", 10, "dup.yaml");
  CHECK(n == 3 && lua_isnil(L, -3), "a duplicate key gives nil, message, code to a C caller");
  CHECK_STR(lua_tostring(L, -2), "dup.yaml:2:1: duplicate key \"a\" (first at line 1)",
            "the duplicate key message names file:line:col and the first occurrence");
  CHECK_STR(lua_tostring(L, -1), "syntax", "the code of bad input is \"syntax\"");
  lua_pop(L, n);
  n = c_load(L, "k: v\n", 5, "ok.yaml");
  CHECK(n == 1 && lua_istable(L, -1), "a good document gives one table");
  lua_pop(L, n);
}

static void check_positions(lua_State *L) {
  CHECK_LUA(L, "positions of nested nodes, keys and values (1-based line and column)",
    "local docs = assert(yaml.load('top:\\n  list:\\n    - a\\n    - {k: v, n: [1, 2]}\\n', 'p.yaml'))\n"
    "local top = docs[1].top\n"
    "local l, c = yaml.where(docs[1]); if l ~= 1 or c ~= 1 then return false, 'root ' .. l .. ':' .. c end\n"
    "l, c = yaml.where(top); if l ~= 2 or c ~= 3 then return false, 'top ' .. l .. ':' .. c end\n"
    "l, c = yaml.key_where(top, 'list'); if l ~= 2 or c ~= 3 then return false, 'key list' end\n"
    "l, c = yaml.where(top, 'list'); if l ~= 3 or c ~= 5 then return false, 'value list' end\n"
    "l, c = yaml.where(top.list, 2); if l ~= 4 or c ~= 7 then return false, 'item 2' end\n"
    "local m = top.list[2]\n"
    "l, c = yaml.key_where(m, 'n'); if l ~= 4 or c ~= 14 then return false, 'key n ' .. l .. ':' .. c end\n"
    "l, c = yaml.where(m.n, 2); if l ~= 4 or c ~= 21 then return false, 'n[2] ' .. l .. ':' .. c end\n"
    "return yaml.name(m.n) == 'p.yaml' and yaml.where({}) == nil, 'name or plain table'");
  CHECK_LUA(L, "every container has its own metatable, without __index or __newindex",
    "local d = assert(yaml.load('a: {x: 1}\\nb: {x: 1}\\n'))[1]\n"
    "local ma, mb = getmetatable(d.a), getmetatable(d.b)\n"
    "if ma == mb then return false, 'shared metatable' end\n"
    "if ma.__index or ma.__newindex then return false, 'metatable has __index/__newindex' end\n"
    "d.a.y = 2; return rawget(d.a, 'y') == 2 and ma.__yaml.kind == 'map' and ma.__yaml.line == 1");
}

static void check_aliases_and_merges(lua_State *L) {
  CHECK_LUA(L, "an alias is the very table its anchor names",
    "local d = assert(yaml.load('a: &x {k: [1]}\\nb: *x\\nc: [*x, *x]\\n'))[1]\n"
    "return d.a == d.b and d.c[1] == d.a and d.c[2] == d.a and d.a.k[1] == 1");
  CHECK_LUA(L, "merge keys: explicit keys win, earlier mappings over later ones",
    "local d = assert(yaml.load([[\n"
    "one: &one {a: 1, b: 1, c: 1}\n"
    "two: &two {b: 2, d: 2}\n"
    "m:\n"
    "  c: explicit\n"
    "  <<: [*one, *two]\n"
    "single: {<<: *two, d: 3}\n"
    "]]))[1]\n"
    "local m, s = d.m, d.single\n"
    "if m.a ~= 1 or m.b ~= 1 or m.c ~= 'explicit' or m.d ~= 2 then return false, 'list merge' end\n"
    "if m['<<'] ~= nil then return false, 'the merge key itself stayed' end\n"
    "if s.b ~= 2 or s.d ~= 3 then return false, 'single merge' end\n"
    "local l, c = yaml.where(m, 'a'); return l == 1 and c == 15, 'merged value position ' .. tostring(l) .. ':' .. tostring(c)");
  CHECK_LUA(L, "a quoted \"<<\" is an ordinary key",
    "local d = assert(yaml.load('\"<<\": {a: 1}\\n'))[1]; return d['<<'].a == 1");
  CHECK_LUA(L, "an undefined alias is an error with its position",
    "local d, err = yaml.load('a: 1\\nb: *nope\\n', 'al.yaml')\n"
    "return d == nil and err == 'al.yaml:2:4: unknown anchor \"nope\"', err");
  CHECK_LUA(L, "a billion laughs stops at the node limit",
    "local t = {'l0: &l0 [x, x, x, x, x, x, x, x, x, x]'}\n"
    "for i = 1, 9 do t[#t + 1] = ('l%d: &l%d [%s]'):format(i, i, ('*l' .. (i - 1) .. ', '):rep(9) .. '*l' .. (i - 1)) end\n"
    "local d, err, code = yaml.load(table.concat(t, '\\n'), 'lol')\n"
    "return d == nil and code == 'syntax' and err:find('nodes') ~= nil, err");
}

static void check_documents(lua_State *L) {
  CHECK_LUA(L, "a multi-document stream gives every document; docs.n counts them",
    "local d = assert(yaml.load('---\\na: 1\\n---\\n- 2\\n...\\n--- plain\\n---\\n'))\n"
    "return d.n == 4 and d[1].a == 1 and d[2][1] == 2 and d[3] == 'plain' and yaml.is_null(d[4])");
  CHECK_LUA(L, "an empty stream gives docs.n == 0",
    "local a, b = yaml.load(''), yaml.load('# only a comment\\n'); return a.n == 0 and b.n == 0");
  CHECK_LUA(L, "scalars resolve as yaml.v3 does",
    "local d = assert(yaml.load([[\n"
    "v: [~, null, '', true, False, 10, -0x1F, 0o17, 0777, 1_000, 1.5, 1e3, .inf, -.Inf, .nan, yes, '1', \"true\"]\n"
    "lit: |\n"
    "  lit\n"
    "]]))[1]\n"
    "local lit, d = d.lit, d.v\n"
    "local want = {'null', 'null', '', true, false, 10, -31, 15, 511, 1000, 1.5, 1000.0, math.huge, -math.huge}\n"
    "for i, w in ipairs(want) do\n"
    "  local v = d[i]\n"
    "  if w == 'null' then if not yaml.is_null(v) then return false, 'item ' .. i end\n"
    "  elseif v ~= w or math.type(v) ~= math.type(w) then return false, 'item ' .. i .. ': ' .. tostring(v) end\n"
    "end\n"
    "return d[15] ~= d[15] and d[16] == 'yes' and d[17] == '1' and d[18] == 'true' and lit == 'lit\\n'");
  CHECK_LUA(L, "integers past int64: decimal become floats, hex stay strings",
    "local d = assert(yaml.load('[9223372036854775807, 9223372036854775808, 0x10000000000000000]'))[1]\n"
    "return math.type(d[1]) == 'integer' and math.type(d[2]) == 'float' and d[3] == '0x10000000000000000'");
}

/* Inputs that must be refused, each with a well-formed error and no crash. */
static const char *const bad_inputs[] = {
  "a: [1, 2\n", "a: 'open\n", "a: \"open\n", "a:\n  - b\n c: d\n", "a: b: c\n", "- a\nb: c\n",
  "a: *x\n", "a: !foo x\n", "a: !!int abc\n", "a: !!bool yes\n", "a: !!map x\n", "!!seq {a: 1}\n",
  "!!binary aGk=\n", "? [a]\n: b\n", "? {a: 1}\n: b\n", "*a : b\n", "a: 1\na: 2\n", "x: &a [*a]\n",
  "x: &a {k: *a}\n", "<<: 1\n", "<<: [1]\n", "<<: [{a: 1}, x]\n", "a: \x01\n", "a: \xc3\x28\n",
  "\xff\n", "%YAML 2.0\n--- a\n", "%TAG ! !a\n%TAG ! !b\n--- x\n", "\t- a\n", "@a\n", "a: `b`\n",
  "k: \"\\q\"\n", "a: 'x'y\n", "[a, b]]\n", "{a: 1}}\n", "key: - a\n", "&a\n&b x\n", "a: |\n  x\n y\n",
  "!<tag:yaml.org,2002:bogus> x\n", "!!float abc\n",
  "!!null x\n",
};

static void check_bad_inputs(lua_State *L) {
  luaL_dostring(L,
    "return function(text)\n"
    "  local ok, d, err, code = pcall(yaml.load, text, 'bad.yaml')\n"
    "  if not ok then return false, 'raised: ' .. tostring(d) end\n"
    "  if d ~= nil then return false, 'accepted' end\n"
    "  return code == 'syntax' and err:match('^bad%.yaml:%d+:%d+: %S') ~= nil, err\n"
    "end");
  int fn = lua_gettop(L);
  for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) {
    lua_pushvalue(L, fn);
    lua_pushstring(L, bad_inputs[i]);
    lua_call(L, 1, 2);
    char what[160];
    snprintf(what, sizeof what, "bad input %zu refused as file:line:col: %s", i + 1,
             lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
    CHECK(lua_toboolean(L, -2), what);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  CHECK_LUA(L, "nesting is bounded: 100,000 '[' and 10,000 '- ' levels give errors, not crashes",
    "local a, e1 = yaml.load(('['):rep(100000), 'deep')\n"
    "local b, e2 = yaml.load(('- '):rep(10000) .. 'x', 'deep')\n"
    "local c, e3 = yaml.load(('{a: '):rep(5000), 'deep')\n"
    "return not a and not b and not c and e1:find('nested deeper') and e2:find('nested deeper')\n"
    "  and e3:find('nested deeper'), tostring(e1) .. ' / ' .. tostring(e2) .. ' / ' .. tostring(e3)");
  CHECK_LUA(L, "512 levels still load",
    "local d = assert(yaml.load(('['):rep(512) .. (']'):rep(512)))\n"
    "local t, n = d[1], 1\n"
    "while t[1] do t, n = t[1], n + 1 end\n"
    "return n == 512, n");
}

static void check_files_and_dump(lua_State *L) {
  CHECK_LUA(L, "load_file: a missing file gives nil, \"path: read: <strerror>\", \"io\"",
    "local d, err, code = yaml.load_file('/nonexistent/x.yaml')\n"
    "return d == nil and err == '/nonexistent/x.yaml: read: No such file or directory' and code == 'io', err");
  CHECK_LUA(L, "load_file: a directory gives an io error too",
    "local d, err, code = yaml.load_file('/'); return d == nil and code == 'io', err");
  CHECK_LUA(L, "load_file: errors in a file carry its path",
    "local path = os.tmpname()\n"
    "local f = assert(io.open(path, 'w')); f:write('ok: 1\\nbad: [\\n'); f:close()\n"
    "local d, err, code = yaml.load_file(path)\n"
    "os.remove(path)\n"
    "return d == nil and code == 'syntax' and err:sub(1, #path + 5) == path .. ':3:1:', err");
  CHECK_LUA(L, "dump raises on what YAML cannot carry, and frees its emitter",
    "local cyc = {}; cyc.self = cyc\n"
    "for _, bad in ipairs({ {f = print}, cyc, {'\\xff'}, {[1] = 'a', ['1'] = 'b'}, {[true] = 1} }) do\n"
    "  local ok, err = pcall(yaml.dump, bad)\n"
    "  if ok or not tostring(err):find('^yaml.dump: ') then return false, tostring(err) end\n"
    "end\n"
    "collectgarbage()\n"
    "return true");
}

/* ---- fuzzing ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static size_t below(size_t n) {
  return n ? (size_t)(rng() % n) : 0;
}

static const char *const seeds[] = {
  "a: 1\nb: [x, y, {c: d}]\nc:\n  - &anc {k: v, n: 2}\n  - *anc\nd:\n  <<: *anc\n  k: w\n",
  "--- !!map\nkey: !!str 12\nf: !!float 1\nlit: |\n  line1\n  line2\nfold: >-\n  a\n  b\n...\n--- [1, 2]\n",
  "x: \"esc \\t \\u00e9 \\x41\"\ny: 'it''s'\nz: ~\nq: .inf\nh: 0x1F\no: 0o17\n? complex\n: value\n",
  "- - - deep\n    - x\n  - y\n- {a: [1, {b: [2, 3]}]}\n",
  "base: &b {x: 1}\nm: {<<: [*b, {y: 2}], z: 3}\nlist: &l [a, b]\nalias: *l\n",
  "%YAML 1.2\n%TAG !e! tag:example.com,2000:\n---\na: b # comment\n# full\nc: \"multi\n  line\"\n",
  "hosts:\n  - name: web1\n    address: 10.0.0.1\n    ssh: {user: root, port: 22}\n    roles: [controller]\n",
  "plain scalar doc\n",
};

static const char interesting[] = ":-[]{}&*!|>'\"#,?%@`\n \t~.0x<=\\";

/* One random edit of buf (length *len, capacity cap). */
static void mutate(char *buf, size_t *len, size_t cap) {
  size_t n = *len, at = below(n + 1);
  switch (below(6)) {
  case 0:   /* overwrite a byte */
    if (n) buf[below(n)] = below(3) ? interesting[below(sizeof interesting - 1)] : (char)below(256);
    break;
  case 1:   /* insert a byte */
    if (n < cap) {
      memmove(buf + at + 1, buf + at, n - at);
      buf[at] = interesting[below(sizeof interesting - 1)];
      *len = n + 1;
    }
    break;
  case 2: { /* delete a span */
    size_t k = below(n - at + 1) % 8;
    memmove(buf + at, buf + at + k, n - at - k);
    *len = n - k;
    break;
  }
  case 3:   /* truncate */
    *len = at;
    break;
  case 4: { /* duplicate a span in place */
    size_t k = below(n - at + 1) % 16;
    if (n + k <= cap) {
      memmove(buf + at + k, buf + at, n - at);
      *len = n + k;
    }
    break;
  }
  default: { /* splice in a piece of another seed */
    const char *s = seeds[below(sizeof seeds / sizeof seeds[0])];
    size_t sl = strlen(s), from = below(sl + 1), k = below(sl - from + 1) % 24;
    if (n + k <= cap) {
      memmove(buf + at + k, buf + at, n - at);
      memcpy(buf + at, s + from, k);
      *len = n + k;
    }
  }
  }
}

static void print_escaped(const char *s, size_t n) {
  printf("     input: \"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 32 && c < 127 && c != '"' && c != '\\') putchar(c);
    else printf("\\x%02x", c);
  }
  printf("\"\n");
}

/* Loads FUZZ_CASES mutated documents; each must load (and then survive dump and load again
 * unchanged) or fail with a well-formed error. */
static void check_fuzz(lua_State *L) {
  luaL_dostring(L,
    "local function same(a, b)\n"
    "  if type(a) ~= 'table' or type(b) ~= 'table' then\n"
    "    return a == b or (a ~= a and b ~= b) or (yaml.is_null(a) and yaml.is_null(b))\n"
    "  end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "return function(text)\n"
    "  local ok, d, err, code = pcall(yaml.load, text, 'fuzz')\n"
    "  if not ok then return false, 'raised: ' .. tostring(d) end\n"
    "  if d == nil then\n"
    "    return code == 'syntax' and type(err) == 'string' and err:match('^fuzz:%d+:%d+: %S') ~= nil, err\n"
    "  end\n"
    "  for i = 1, d.n do\n"
    "    local ok2, out = pcall(yaml.dump, d[i])\n"
    "    if not ok2 then return false, 'dump raised: ' .. tostring(out) end\n"
    "    local back, e2 = yaml.load(out, 'again')\n"
    "    if not back or not same(d[i], back[1]) then return false, 'round trip: ' .. tostring(e2) .. '\\n' .. out end\n"
    "  end\n"
    "  return true\n"
    "end");
  int fn = lua_gettop(L);
  char buf[4096];
  int failures = 0, loaded = 0;
  for (int i = 0; i < FUZZ_CASES; i++) {
    const char *seed = seeds[below(sizeof seeds / sizeof seeds[0])];
    size_t len = strlen(seed);
    memcpy(buf, seed, len);
    for (size_t m = 1 + below(4); m > 0; m--) mutate(buf, &len, sizeof buf);
    lua_pushvalue(L, fn);
    lua_pushlstring(L, buf, len);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK) lua_pushnil(L);
    if (!lua_toboolean(L, -2) && failures++ < 5) {
      printf("     case %d: %s\n", i, lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
      print_escaped(buf, len);
    }
    if (lua_toboolean(L, -2) && lua_isnil(L, -1)) loaded++;
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  printf("     %d of %d mutated documents loaded, the rest were refused\n", loaded, FUZZ_CASES);
  CHECK(failures == 0, "20,000 mutated documents: no crash, well-formed errors, dump round-trips");
}

int main(void) {
  lua_State *L = new_state();
  check_c_api(L);
  check_positions(L);
  check_aliases_and_merges(L);
  check_documents(L);
  check_bad_inputs(L);
  check_files_and_dump(L);
  check_fuzz(L);
  lua_close(L);
  return ct_summary();
}
