/* yaml_dump.c - the core schema both ways (what a plain scalar means) and yaml.dump. */
#include "cs_yaml.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Shared with yaml.c, which loads and registers the family. */

#define NULL_MT "cargoship.yaml.null"

static const char NULL_KEY = 'N';

/* ---- yaml.null ---------------------------------------------------------------------- */

static int l_yaml_null_tostring(lua_State *L) {
  lua_pushliteral(L, "null");
  return 1;
}

/* Pushes yaml.null: one per Lua state, however often the family is opened.  [-0, +1, m] */
void cs_yaml_push_null(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &NULL_KEY) != LUA_TNIL) return;
  lua_pop(L, 1);
  lua_newuserdatauv(L, 0, 0);
  if (luaL_newmetatable(L, NULL_MT)) {
    lua_pushcfunction(L, l_yaml_null_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &NULL_KEY);
}

int cs_yaml_is_null(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  cs_yaml_push_null(L);
  int same = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return same;
}

/* ---- plain scalars: the YAML 1.2 core schema as Go's yaml.v3 resolves it ------------- */

static const struct { const char *s, *tag; int v; } words[] = {
  {"~", "null", 0}, {"null", "null", 0}, {"Null", "null", 0}, {"NULL", "null", 0},
  {"true", "bool", 1}, {"True", "bool", 1}, {"TRUE", "bool", 1},
  {"false", "bool", 0}, {"False", "bool", 0}, {"FALSE", "bool", 0},
  {".nan", "float", 0}, {".NaN", "float", 0}, {".NAN", "float", 0},
  {".inf", "float", 1}, {".Inf", "float", 1}, {".INF", "float", 1},
  {"+.inf", "float", 1}, {"+.Inf", "float", 1}, {"+.INF", "float", 1},
  {"-.inf", "float", -1}, {"-.Inf", "float", -1}, {"-.INF", "float", -1},
};

static size_t skip_digits(const char *s, size_t n, size_t *i) {
  size_t start = *i;
  while (*i < n && s[*i] >= '0' && s[*i] <= '9') (*i)++;
  return *i - start;
}

/* yaml.v3's float pattern: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int float_syntax(const char *s, size_t n) {
  size_t i = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) i++;
  size_t whole = skip_digits(s, n, &i);
  if (i < n && s[i] == '.') {
    i++;
    if (skip_digits(s, n, &i) == 0 && whole == 0) return 0;
  } else if (whole == 0) {
    return 0;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (skip_digits(s, n, &i) == 0) return 0;
  }
  return i == n;
}

static int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 99;
}

/* Go's strconv.ParseInt(s, 0, 64): sign, then 0x / 0o / 0b / 0 (octal, as yaml.v3 keeps
 * from YAML 1.1) or decimal. 0 when the syntax is wrong or the value misses int64. */
static int parse_int(const char *s, size_t n, lua_Integer *out) {
  size_t i = 0;
  int neg = 0, base = 10;
  if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (n - i >= 2 && s[i] == '0') {
    char c = (char)(s[i + 1] | 0x20);
    base = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 8;
    i += base == 8 && c != 'o' ? 1 : 2;
  }
  if (i == n) return 0;
  uint64_t v = 0, limit = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
  for (; i < n; i++) {
    int d = digit_value(s[i]);
    if (d >= base || v > (limit - (uint64_t)d) / (uint64_t)base) return 0;
    v = v * (uint64_t)base + (uint64_t)d;
  }
  *out = neg ? (lua_Integer)(0 - v) : (lua_Integer)v;
  return 1;
}

/* A scalar starting with a digit, a sign or '.': pushes the int or float it spells and
 * returns its tag, or pushes nothing and returns "str".  [-0, +(0|1), m] */
static const char *resolve_number(lua_State *L, const char *s, size_t n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < n; i++)
    if (s[i] != '_' || s[0] == '.') luaL_addchar(&b, s[i]);  /* Go drops '_' except after '.' */
  luaL_pushresult(&b);
  size_t pn;
  const char *p = lua_tolstring(L, -1, &pn);
  lua_Integer iv;
  if (s[0] != '.' && parse_int(p, pn, &iv)) {
    lua_pop(L, 1);
    lua_pushinteger(L, iv);
    return "int";
  }
  /* an int too big for int64 falls through to here: decimal ones match the float pattern
   * and become floats, 0x/0o/0b ones stay strings (yaml.v3 does the same past uint64) */
  if (float_syntax(p, pn) && lua_stringtonumber(L, p) != 0) {
    lua_Number d = lua_tonumber(L, -1);
    lua_pop(L, 2);
    if (isinf(d)) return "str";  /* "1e999": Go's ParseFloat refuses it */
    lua_pushnumber(L, d);
    return "float";
  }
  lua_pop(L, 1);
  return "str";
}

/* Pushes the value of the plain scalar s and returns its core tag ("int", "str", ...).
 * [-0, +1, m] */
const char *cs_yaml_resolve(lua_State *L, const char *s, size_t n) {
  if (n == 0) {
    cs_yaml_push_null(L);
    return "null";
  }
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    if (strlen(words[i].s) != n || memcmp(words[i].s, s, n) != 0) continue;
    if (words[i].tag[0] == 'n') cs_yaml_push_null(L);
    else if (words[i].tag[0] == 'b') lua_pushboolean(L, words[i].v);
    else lua_pushnumber(L, words[i].v ? words[i].v * HUGE_VAL : NAN);
    return words[i].tag;
  }
  if (s[0] != '\0' && strchr("0123456789+-.", s[0])) {
    const char *tag = resolve_number(L, s, n);
    if (tag[0] != 's') return tag;
  }
  lua_pushlstring(L, s, n);
  return "str";
}

/* ---- yaml.dump ------------------------------------------------------------------------ */

#define DUMPER_MT "cargoship.yaml.dumper"
#define MAX_DEPTH 512   /* what yaml.load accepts back */

enum { S_VALUE = 1, S_VISITING, S_DUMPER };

typedef struct {
  yaml_emitter_t em;
  int live;
  char *buf;
  size_t len, cap;
} dumper;

typedef struct {
  const char *s;
  size_t n;
} keyname;

static int write_out(void *data, unsigned char *p, size_t n) {
  dumper *d = data;
  if (d->cap - d->len < n) {
    size_t cap = d->cap ? d->cap : 1024;
    while (cap - d->len < n) cap *= 2;
    char *b = realloc(d->buf, cap);
    if (!b) return 0;
    d->buf = b;
    d->cap = cap;
  }
  memcpy(d->buf + d->len, p, n);
  d->len += n;
  return 1;
}

static int l_yaml_dumper_close(lua_State *L) {
  dumper *d = lua_touserdata(L, 1);
  if (d->live) yaml_emitter_delete(&d->em);
  d->live = 0;
  free(d->buf);
  d->buf = NULL;
  return 0;
}

/* Hands ev to the emitter, which owns it from here on; raises when the emitter fails. */
static void emit(lua_State *L, dumper *d, yaml_event_t *ev, int made) {
  if (!made) luaL_error(L, "yaml.dump: out of memory");
  if (!yaml_emitter_emit(&d->em, ev))
    luaL_error(L, "yaml.dump: %s", d->em.problem ? d->em.problem : "out of memory");
}

static void emit_scalar(lua_State *L, dumper *d, const char *s, size_t n, yaml_scalar_style_t style) {
  yaml_event_t ev;
  if (n > INT32_MAX) luaL_error(L, "yaml.dump: string too long");
  /* the only way this fails for valid arguments is a string that is not UTF-8 */
  if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)n, 1, 1, style))
    luaL_error(L, "yaml.dump: a string is not valid UTF-8, which YAML cannot carry");
  emit(L, d, &ev, 1);
}

/* Strings that a reader would take for something else get quotes: whatever yaml.load
 * resolves to a non-string, and what YAML 1.1 readers on the hosts would (yes, on, 0777). */
static int needs_quotes(lua_State *L, const char *s, size_t n) {
  static const char *const yaml11[] = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
                                       "on", "On", "ON", "off", "Off", "OFF", "=", "<<", NULL};
  if (n == 0 || s[0] == '\0' || strchr("0123456789+-.", s[0])) return 1;
  for (int i = 0; yaml11[i]; i++)
    if (strlen(yaml11[i]) == n && memcmp(yaml11[i], s, n) == 0) return 1;
  const char *tag = cs_yaml_resolve(L, s, n);
  lua_pop(L, 1);
  return strcmp(tag, "str") != 0;
}

static void emit_string(lua_State *L, dumper *d, int idx) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
  if (memchr(s, '\n', n)) style = YAML_LITERAL_SCALAR_STYLE;   /* libyaml falls back to "..." */
  else if (needs_quotes(L, s, n)) style = YAML_SINGLE_QUOTED_SCALAR_STYLE;
  emit_scalar(L, d, s, n, style);
}

/* The shortest %g that reads back as the same double, always recognisable as a float. */
static void format_float(char *buf, size_t size, double v) {
  if (isnan(v) || isinf(v)) {
    snprintf(buf, size, "%s", isnan(v) ? ".nan" : v > 0 ? ".inf" : "-.inf");
    return;
  }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  char point = localeconv()->decimal_point[0];
  for (char *p = buf; *p; p++)
    if (*p == point) *p = '.';
  if (!strpbrk(buf, ".e")) strncat(buf, ".0", size - strlen(buf) - 1);
}

/* Pushes the number at idx as YAML text.  [-0, +1, m] */
static void push_number_text(lua_State *L, int idx) {
  char buf[64];
  if (lua_isinteger(L, idx)) snprintf(buf, sizeof buf, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
  else format_float(buf, sizeof buf, (double)lua_tonumber(L, idx));
  lua_pushstring(L, buf);
}

static void emit_value(lua_State *L, dumper *d, int idx, int depth);

/* n when the table at idx holds exactly the keys 1..n (n >= 1), else 0. */
static lua_Integer sequence_length(lua_State *L, int idx) {
  lua_Integer n = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) {
      lua_pop(L, 1);
      return 0;
    }
    n++;
    if (lua_tointeger(L, -1) > max) max = lua_tointeger(L, -1);
  }
  return n == max ? n : 0;
}

static void emit_sequence(lua_State *L, dumper *d, int t, lua_Integer n, int depth) {
  yaml_event_t ev;
  emit(L, d, &ev, yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE));
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, t, i);
    emit_value(L, d, -1, depth + 1);
    lua_pop(L, 1);
  }
  emit(L, d, &ev, yaml_sequence_end_event_initialize(&ev));
}

/* Pushes the YAML text of the key on top (what yaml.load gives back as the key).  [-0, +1, e] */
static void push_key_text(lua_State *L) {
  if (lua_type(L, -1) == LUA_TSTRING) lua_pushvalue(L, -1);
  else if (lua_type(L, -1) == LUA_TNUMBER) push_number_text(L, -1);
  else luaL_error(L, "yaml.dump: a %s cannot be a mapping key", luaL_typename(L, -1));
}

static int compare_names(const void *a, const void *b) {
  const keyname *x = a, *y = b;
  int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* A mapping with its keys sorted bytewise, as text; {} when empty. */
static void emit_mapping(lua_State *L, dumper *d, int t, int depth) {
  lua_newtable(L);   /* key text -> the key itself */
  int bytext = lua_gettop(L);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    push_key_text(L);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, bytext) != LUA_TNIL)
      luaL_error(L, "yaml.dump: two keys read as \"%s\"", lua_tostring(L, -2));
    lua_pop(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, bytext);
    n++;
  }
  keyname *names = lua_newuserdatauv(L, (n ? n : 1) * sizeof *names, 0);
  size_t i = 0;
  for (lua_pushnil(L); lua_next(L, bytext); i++) {
    lua_pop(L, 1);
    names[i].s = lua_tolstring(L, -1, &names[i].n);   /* kept alive by bytext */
  }
  qsort(names, n, sizeof *names, compare_names);
  yaml_event_t ev;
  yaml_mapping_style_t style = n ? YAML_BLOCK_MAPPING_STYLE : YAML_FLOW_MAPPING_STYLE;
  emit(L, d, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, style));
  for (i = 0; i < n; i++) {
    lua_pushlstring(L, names[i].s, names[i].n);
    emit_string(L, d, -1);
    lua_rawget(L, bytext);
    lua_rawget(L, t);
    emit_value(L, d, -1, depth + 1);
    lua_pop(L, 1);
  }
  emit(L, d, &ev, yaml_mapping_end_event_initialize(&ev));
  lua_pop(L, 2);
}

/* An empty table is a mapping ({}) unless yaml.load made it from a sequence (its
 * metatable's __yaml record says kind "seq"): `a: []` loaded and dumped stays `a: []`. */
static int table_is_empty(lua_State *L, int t) {
  lua_pushnil(L);
  if (!lua_next(L, t)) return 1;
  lua_pop(L, 2);
  return 0;
}

static int loaded_as_seq(lua_State *L, int t) {
  if (!lua_getmetatable(L, t)) return 0;
  int seq = 0;
  if (lua_getfield(L, -1, "__yaml") == LUA_TTABLE) {
    seq = lua_getfield(L, -1, "kind") == LUA_TSTRING && strcmp(lua_tostring(L, -1), "seq") == 0;
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return seq;
}

static void emit_table(lua_State *L, dumper *d, int t, int depth) {
  lua_pushvalue(L, t);
  if (lua_rawget(L, S_VISITING) != LUA_TNIL) luaL_error(L, "yaml.dump: a table contains itself");
  lua_pop(L, 1);
  lua_pushvalue(L, t);
  lua_pushboolean(L, 1);
  lua_rawset(L, S_VISITING);
  lua_Integer n = sequence_length(L, t);
  if (n || (table_is_empty(L, t) && loaded_as_seq(L, t))) emit_sequence(L, d, t, n, depth);
  else emit_mapping(L, d, t, depth);
  lua_pushvalue(L, t);
  lua_pushnil(L);
  lua_rawset(L, S_VISITING);
}

static void emit_value(lua_State *L, dumper *d, int idx, int depth) {
  idx = lua_absindex(L, idx);
  if (depth > MAX_DEPTH) luaL_error(L, "yaml.dump: nested deeper than %d levels", MAX_DEPTH);
  luaL_checkstack(L, 12, "yaml.dump nesting");
  switch (lua_type(L, idx)) {
  case LUA_TSTRING:
    emit_string(L, d, idx);
    break;
  case LUA_TNUMBER:
    push_number_text(L, idx);
    emit_scalar(L, d, lua_tostring(L, -1), lua_rawlen(L, -1), YAML_PLAIN_SCALAR_STYLE);
    lua_pop(L, 1);
    break;
  case LUA_TBOOLEAN:
    emit_scalar(L, d, lua_toboolean(L, idx) ? "true" : "false", lua_toboolean(L, idx) ? 4 : 5,
                YAML_PLAIN_SCALAR_STYLE);
    break;
  case LUA_TTABLE:
    emit_table(L, d, idx, depth);
    break;
  default:
    if (!cs_yaml_is_null(L, idx)) luaL_error(L, "yaml.dump: cannot dump a %s", luaL_typename(L, idx));
    emit_scalar(L, d, "null", 4, YAML_PLAIN_SCALAR_STYLE);
  }
}

/* yaml.dump(value) -> YAML text; raises on what YAML cannot carry (functions, cycles, non-UTF-8) */
int cs_yaml_dump(lua_State *L) {
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  lua_newtable(L);
  dumper *d = lua_newuserdatauv(L, sizeof *d, 0);
  memset(d, 0, sizeof *d);
  if (luaL_newmetatable(L, DUMPER_MT)) {
    lua_pushcfunction(L, l_yaml_dumper_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_yaml_dumper_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, S_DUMPER);
  lua_toclose(L, S_DUMPER);   /* a raise anywhere below frees the emitter at once */
  if (!yaml_emitter_initialize(&d->em)) return luaL_error(L, "yaml.dump: out of memory");
  d->live = 1;
  yaml_emitter_set_output(&d->em, write_out, d);
  yaml_emitter_set_unicode(&d->em, 1);
  yaml_emitter_set_width(&d->em, -1);   /* no folding: rendered files stay greppable */
  yaml_event_t ev;
  emit(L, d, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
  emit(L, d, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
  emit_value(L, d, S_VALUE, 0);
  emit(L, d, &ev, yaml_document_end_event_initialize(&ev, 1));
  emit(L, d, &ev, yaml_stream_end_event_initialize(&ev));
  lua_pushlstring(L, d->buf, d->len);
  return 1;
}
