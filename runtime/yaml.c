/* yaml.c - YAML to Lua tables from libyaml's events, keeping file:line:col of every node. */
#include "cs_yaml.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

/* The family's other half, yaml_dump.c, holds the core schema (how a plain scalar
 * resolves; the dumper needs it to know what to quote) and yaml.null. */

#define MAX_DEPTH 512
/* Aliases share tables, but whoever walks the result walks every alias again:
 * count each alias as the size of what it names, and stop a billion laughs early. */
#define MAX_NODES 1000000
#define LOADER_MT "cargoship.yaml.loader"
#define FD_MT "cargoship.yaml.fd"
#define TAG_PREFIX "tag:yaml.org,2002:"

/* The tags it honours, by short name: !!str is "str". */
static const char *const core_tags[] = {"str", "null", "bool", "int", "float", "map", "seq", "merge",
                                        NULL};

/* Slots of load_stream's stack. */
enum { S_LOADER = 1, S_NAME, S_ANCHORS, S_SIZES, S_DOCS };

typedef struct {
  lua_State *L;
  yaml_parser_t parser;
  yaml_event_t ev;
  int parser_live, ev_live;
  int syntax;              /* the error in flight is the input's fault, not ours */
  const char *text;
  size_t len;
  lua_Integer nodes;
} loader;

/* ---- errors -------------------------------------------------------------------------- */

/* Raises "name:line:col: message" as the input's fault; load returns it as nil, msg, "syntax". */
static int fail_at(loader *ld, yaml_mark_t m, const char *fmt, ...) {
  lua_State *L = ld->L;
  va_list ap;
  lua_pushfstring(L, "%s:%d:%d: ", lua_tostring(L, S_NAME), (int)m.line + 1, (int)m.column + 1);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 2);
  ld->syntax = 1;
  return lua_error(L);
}

/* libyaml's reader reports a byte offset, not a mark: count lines and characters to it. */
static yaml_mark_t mark_at(loader *ld, size_t offset) {
  yaml_mark_t m = {offset, 0, 0};
  for (size_t i = 0; i < offset && i < ld->len; i++) {
    unsigned char c = (unsigned char)ld->text[i];
    if (c == '\n') {
      m.line++;
      m.column = 0;
    } else if ((c & 0xC0) != 0x80) {
      m.column++;
    }
  }
  return m;
}

static int fail_parse(loader *ld) {
  yaml_parser_t *p = &ld->parser;
  const char *problem = p->problem ? p->problem : "invalid YAML";
  if (p->error == YAML_MEMORY_ERROR) return luaL_error(ld->L, "yaml: out of memory");
  if (p->error == YAML_READER_ERROR) return fail_at(ld, mark_at(ld, p->problem_offset), "%s", problem);
  if (p->context)
    return fail_at(ld, p->problem_mark, "%s (%s at line %d)", problem, p->context,
                   (int)p->context_mark.line + 1);
  return fail_at(ld, p->problem_mark, "%s", problem);
}

/* ---- events and bookkeeping ------------------------------------------------------------ */

static void drop_event(loader *ld) {
  if (ld->ev_live) yaml_event_delete(&ld->ev);
  ld->ev_live = 0;
}

static void loader_free(loader *ld) {
  drop_event(ld);
  if (ld->parser_live) yaml_parser_delete(&ld->parser);
  ld->parser_live = 0;
}

static int l_yaml_loader_gc(lua_State *L) {
  loader_free(luaL_checkudata(L, 1, LOADER_MT));
  return 0;
}

/* Replaces the current event with the next one; raises on bad input. */
static yaml_event_t *next_event(loader *ld) {
  drop_event(ld);
  if (!yaml_parser_parse(&ld->parser, &ld->ev)) fail_parse(ld);
  ld->ev_live = 1;
  return &ld->ev;
}

static void count_nodes(loader *ld, lua_Integer n, yaml_mark_t m) {
  if (ld->nodes > MAX_NODES - n)
    fail_at(ld, m, "more than %d nodes once aliases are expanded", MAX_NODES);
  ld->nodes += n;
}

/* The short name of an explicit core tag ("int" for !!int), "" when untagged, "!" for the
 * non-specific tag; raises on any other tag. */
static const char *tag_name(loader *ld, const yaml_char_t *tag, yaml_mark_t m) {
  const char *t = (const char *)tag;
  if (!t) return "";
  if (strcmp(t, "!") == 0) return "!";
  size_t pl = sizeof TAG_PREFIX - 1;
  int core = strncmp(t, TAG_PREFIX, pl) == 0;
  for (int k = 0; core && core_tags[k]; k++)
    if (strcmp(t + pl, core_tags[k]) == 0) return core_tags[k];
  fail_at(ld, m, "unknown tag %s%s", core ? "!!" : "", core ? t + pl : t);
  return NULL;
}

/* Pushes {line = L, col = C} (1-based) for a libyaml mark.  [-0, +1, m] */
static void push_pos(lua_State *L, yaml_mark_t m) {
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)m.line + 1);
  lua_setfield(L, -2, "line");
  lua_pushinteger(L, (lua_Integer)m.column + 1);
  lua_setfield(L, -2, "col");
}

/* Pushes a container t whose own metatable is {__yaml = record}, then the record's keys and
 * values tables; returns t's index.  [-0, +3, m] */
static int new_container(loader *ld, yaml_mark_t m, const char *kind) {
  lua_State *L = ld->L;
  lua_newtable(L);
  int t = lua_gettop(L);
  lua_createtable(L, 0, 1);
  push_pos(L, m);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  lua_pushvalue(L, S_NAME);
  lua_setfield(L, -2, "name");
  lua_newtable(L);
  lua_setfield(L, -2, "keys");
  lua_newtable(L);
  lua_setfield(L, -2, "values");
  lua_pushvalue(L, -1);
  lua_setfield(L, t + 1, "__yaml");
  lua_getfield(L, t + 2, "keys");
  lua_getfield(L, t + 2, "values");
  lua_pushvalue(L, t + 1);
  lua_setmetatable(L, t);
  lua_rotate(L, t + 1, -2);
  lua_pop(L, 2);
  return t;
}

/* Pushes the __yaml record of the table at idx and returns 1, or returns 0.  [-0, +(0|1), -] */
static int get_record(lua_State *L, int idx) {
  if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return 0;
  lua_pushliteral(L, "__yaml");
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 2);
    return 0;
  }
  lua_remove(L, -2);
  return 1;
}

/* True when the value at idx is a mapping this family loaded. */
static int is_map(lua_State *L, int idx) {
  if (!get_record(L, idx)) return 0;
  int yes = lua_getfield(L, -1, "kind") == LUA_TSTRING && strcmp(lua_tostring(L, -1), "map") == 0;
  lua_pop(L, 2);
  return yes;
}

/* For an anchored node: pushes its name and marks it in progress.  [-0, +(0|1), m] */
static int anchor_begin(loader *ld, const yaml_char_t *anchor) {
  lua_State *L = ld->L;
  if (!anchor) return 0;
  lua_pushstring(L, (const char *)anchor);
  lua_pushvalue(L, -1);
  lua_pushinteger(L, -1);
  lua_rawset(L, S_SIZES);
  return 1;
}

/* Stack [name, value] when anchored: records the anchor, leaves [value].  [-(0|1), +0, m] */
static void anchor_end(loader *ld, int anchored, lua_Integer size) {
  lua_State *L = ld->L;
  if (!anchored) return;
  lua_pushvalue(L, -2);
  lua_pushvalue(L, -2);
  lua_rawset(L, S_ANCHORS);
  lua_pushvalue(L, -2);
  lua_pushinteger(L, size);
  lua_rawset(L, S_SIZES);
  lua_remove(L, -2);
}

/* ---- nodes ----------------------------------------------------------------------------- */

static void load_node(loader *ld, int depth);

static void load_alias(loader *ld) {
  lua_State *L = ld->L;
  const char *name = (const char *)ld->ev.data.alias.anchor;
  yaml_mark_t m = ld->ev.start_mark;
  lua_pushstring(L, name);
  if (lua_rawget(L, S_SIZES) == LUA_TNIL) fail_at(ld, m, "unknown anchor \"%s\"", name);
  lua_Integer size = lua_tointeger(L, -1);
  if (size < 0) fail_at(ld, m, "alias \"%s\" is inside the node it names", name);
  lua_pop(L, 1);
  count_nodes(ld, size, m);
  lua_pushstring(L, name);
  lua_rawget(L, S_ANCHORS);
}

static void load_scalar(loader *ld) {
  lua_State *L = ld->L;
  yaml_event_t *ev = &ld->ev;
  const char *s = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  const char *want = tag_name(ld, ev->data.scalar.tag, ev->start_mark);
  count_nodes(ld, 1, ev->start_mark);
  int anchored = anchor_begin(ld, ev->data.scalar.anchor);
  if (!*want && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    cs_yaml_resolve(L, s, n);
  } else if (!*want || strcmp(want, "!") == 0 || strcmp(want, "str") == 0) {
    lua_pushlstring(L, s, n);   /* quoted and block scalars are strings */
  } else {
    const char *got = cs_yaml_resolve(L, s, n);
    if (strcmp(got, "int") == 0 && strcmp(want, "float") == 0) {
      lua_Number d = (lua_Number)lua_tointeger(L, -1);
      lua_pop(L, 1);
      lua_pushnumber(L, d);
    } else if (strcmp(got, want) != 0) {
      fail_at(ld, ev->start_mark, "cannot read \"%s\" as !!%s", s, want);
    }
  }
  anchor_end(ld, anchored, 1);
}

/* Checks the tag of a collection; returns its anchor state (see anchor_begin). */
static int begin_collection(loader *ld, const yaml_char_t *tag, const yaml_char_t *anchor,
                            const char *kind) {
  yaml_mark_t m = ld->ev.start_mark;
  const char *want = tag_name(ld, tag, m);
  if (*want && strcmp(want, "!") != 0 && strcmp(want, kind) != 0)
    fail_at(ld, m, "a %s cannot be !!%s", *kind == 'm' ? "mapping" : "sequence", want);
  count_nodes(ld, 1, m);
  return anchor_begin(ld, anchor);
}

static void load_seq(loader *ld, int depth) {
  lua_State *L = ld->L;
  lua_Integer first = ld->nodes;
  yaml_event_t *ev = &ld->ev;
  int anchored = begin_collection(ld, ev->data.sequence_start.tag, ev->data.sequence_start.anchor,
                                  "seq");
  int t = new_container(ld, ev->start_mark, "seq");
  for (lua_Integer i = 1; next_event(ld)->type != YAML_SEQUENCE_END_EVENT; i++) {
    yaml_mark_t vm = ld->ev.start_mark;
    load_node(ld, depth + 1);
    lua_rawseti(L, t, i);
    push_pos(L, vm);
    lua_rawseti(L, t + 2, i);
  }
  lua_pop(L, 2);
  anchor_end(ld, anchored, ld->nodes - first);
}

static int is_merge_key(const yaml_event_t *ev) {
  if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.length != 2) return 0;
  if (memcmp(ev->data.scalar.value, "<<", 2) != 0) return 0;
  const char *tag = (const char *)ev->data.scalar.tag;
  if (tag) return strcmp(tag, TAG_PREFIX "merge") == 0;
  return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* `<<: value`: appends the mapping(s) to merge to the list at `list` (created on demand). */
static void load_merge(loader *ld, int list, int depth) {
  lua_State *L = ld->L;
  count_nodes(ld, 1, ld->ev.start_mark);
  yaml_mark_t vm = next_event(ld)->start_mark;
  load_node(ld, depth + 1);
  if (lua_isnil(L, list)) {
    lua_newtable(L);
    lua_replace(L, list);
  }
  int v = lua_gettop(L), ok = is_map(L, v);
  if (ok) {
    lua_pushvalue(L, v);
    lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
  } else if (get_record(L, v)) {   /* a sequence of mappings */
    lua_pop(L, 1);
    ok = 1;
    for (lua_Integer i = 1; ok && lua_rawgeti(L, v, i) != LUA_TNIL; i++) {
      ok = is_map(L, -1);
      lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
    }
  }
  if (!ok) fail_at(ld, vm, "a merge (<<) takes a mapping or a list of mappings");
  lua_settop(L, v - 1);
}

/* Copies into the mapping t (keys at t+1, values at t+2) the entries of the merged mappings
 * listed at t+3 that it lacks: explicit keys win, then earlier mappings over later ones. */
static void apply_merges(loader *ld, int t, yaml_mark_t m) {
  lua_State *L = ld->L;
  lua_Integer n = (lua_Integer)lua_rawlen(L, t + 3);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, t + 3, i);
    int src = lua_gettop(L);
    get_record(L, src);
    lua_getfield(L, src + 1, "keys");
    lua_getfield(L, src + 1, "values");
    lua_pushnil(L);
    while (lua_next(L, src)) {
      lua_pushvalue(L, -2);
      if (lua_rawget(L, t) == LUA_TNIL) {
        count_nodes(ld, 1, m);
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -3);
        lua_rawset(L, t);
        for (int j = 1; j <= 2; j++) {   /* the positions of the key and value, as written */
          lua_pushvalue(L, -3);
          lua_pushvalue(L, -1);
          lua_rawget(L, src + 1 + j);
          lua_rawset(L, t + j);
        }
      }
      lua_pop(L, 2);
    }
    lua_settop(L, src - 1);
  }
}

/* One `key: value` pair of the mapping t (keys at t+1, values at t+2). */
static void load_pair(loader *ld, int t, int depth) {
  lua_State *L = ld->L;
  yaml_event_t *ev = &ld->ev;
  yaml_mark_t km = ev->start_mark;
  if (ev->type != YAML_SCALAR_EVENT) fail_at(ld, km, "a mapping key must be a scalar");
  tag_name(ld, ev->data.scalar.tag, km);
  count_nodes(ld, 1, km);
  int anchored = anchor_begin(ld, ev->data.scalar.anchor);
  lua_pushlstring(L, (const char *)ev->data.scalar.value, ev->data.scalar.length);
  anchor_end(ld, anchored, 1);
  int key = lua_gettop(L);
  lua_pushvalue(L, key);
  if (lua_rawget(L, t + 1) != LUA_TNIL) {
    lua_getfield(L, -1, "line");
    fail_at(ld, km, "duplicate key \"%s\" (first at line %d)", lua_tostring(L, key),
            (int)lua_tointeger(L, -1));
  }
  lua_pop(L, 1);
  yaml_mark_t vm = next_event(ld)->start_mark;
  load_node(ld, depth + 1);
  lua_pushvalue(L, key);
  lua_insert(L, -2);
  lua_rawset(L, t);
  lua_pushvalue(L, key);
  push_pos(L, km);
  lua_rawset(L, t + 1);
  push_pos(L, vm);
  lua_rawset(L, t + 2);
}

static void load_map(loader *ld, int depth) {
  lua_State *L = ld->L;
  lua_Integer first = ld->nodes;
  yaml_event_t *ev = &ld->ev;
  int anchored = begin_collection(ld, ev->data.mapping_start.tag, ev->data.mapping_start.anchor,
                                  "map");
  yaml_mark_t m = ev->start_mark;
  int t = new_container(ld, m, "map");
  lua_pushnil(L);   /* t+3: mappings to merge, if any */
  while (next_event(ld)->type != YAML_MAPPING_END_EVENT) {
    if (is_merge_key(&ld->ev)) load_merge(ld, t + 3, depth);
    else load_pair(ld, t, depth);
  }
  if (!lua_isnil(L, t + 3)) apply_merges(ld, t, m);
  lua_pop(L, 3);
  anchor_end(ld, anchored, ld->nodes - first);
}

/* Pushes the node whose first event is current.  [-0, +1, e] */
static void load_node(loader *ld, int depth) {
  yaml_event_t *ev = &ld->ev;
  if (depth > MAX_DEPTH) fail_at(ld, ev->start_mark, "nested deeper than %d levels", MAX_DEPTH);
  luaL_checkstack(ld->L, 16, "yaml nesting");
  switch (ev->type) {
  case YAML_ALIAS_EVENT: load_alias(ld); break;
  case YAML_SCALAR_EVENT: load_scalar(ld); break;
  case YAML_SEQUENCE_START_EVENT: load_seq(ld, depth); break;
  case YAML_MAPPING_START_EVENT: load_map(ld, depth); break;
  default: fail_at(ld, ev->start_mark, "expected a node");
  }
}

/* load_stream(loader, name) -> docs; runs under pcall so that every raise unwinds to load. */
static int load_stream(lua_State *L) {
  loader *ld = lua_touserdata(L, S_LOADER);
  ld->L = L;
  lua_settop(L, S_NAME);
  lua_newtable(L);
  lua_newtable(L);
  yaml_mark_t start = {0, 0, 0};
  new_container(ld, start, "seq");
  lua_Integer n = 0;
  next_event(ld);   /* the stream's start */
  while (next_event(ld)->type == YAML_DOCUMENT_START_EVENT) {
    lua_newtable(L);   /* anchors do not cross documents */
    lua_replace(L, S_ANCHORS);
    lua_newtable(L);
    lua_replace(L, S_SIZES);
    yaml_mark_t m = next_event(ld)->start_mark;
    load_node(ld, 0);
    lua_rawseti(L, S_DOCS, ++n);
    push_pos(L, m);
    lua_rawseti(L, S_DOCS + 2, n);
    next_event(ld);   /* the document's end: the parser allows nothing else here */
  }
  lua_pushinteger(L, n);
  lua_setfield(L, S_DOCS, "n");
  lua_settop(L, S_DOCS);
  return 1;
}

/* Loads the string at `text`, naming it by the string at `name`.  [-0, +(1|3), e] */
static int load_text(lua_State *L, int text, int name) {
  loader *ld = lua_newuserdatauv(L, sizeof *ld, 0);
  memset(ld, 0, sizeof *ld);
  luaL_setmetatable(L, LOADER_MT);
  if (!yaml_parser_initialize(&ld->parser)) return luaL_error(L, "yaml: out of memory");
  ld->parser_live = 1;
  ld->text = lua_tolstring(L, text, &ld->len);
  yaml_parser_set_input_string(&ld->parser, (const unsigned char *)ld->text, ld->len);
  lua_pushcfunction(L, load_stream);
  lua_pushvalue(L, -2);
  lua_pushvalue(L, name);
  int st = lua_pcall(L, 2, 1, 0);
  loader_free(ld);
  if (st == LUA_OK) return 1;
  if (!ld->syntax) return lua_error(L);   /* out of memory and the like: not the input's fault */
  lua_pushnil(L);
  lua_insert(L, -2);
  lua_pushliteral(L, "syntax");
  return 3;
}

/* yaml.load(text [, name]) -> docs | nil, "name:line:col: message", "syntax" */
static int l_yaml_load(lua_State *L) {
  luaL_checkstring(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_settop(L, 1);
    lua_pushliteral(L, "<string>");
  }
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  return load_text(L, 1, 2);
}

static int l_yaml_fd_close(lua_State *L) {
  int *fd = lua_touserdata(L, 1);
  if (*fd >= 0) close(*fd);
  *fd = -1;
  return 0;
}

/* yaml.load_file(path) -> as yaml.load | nil, "path: read: detail", "io" */
static int l_yaml_load_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_settop(L, 1);
  int *fd = lua_newuserdatauv(L, sizeof *fd, 0);   /* closes the file if a raise unwinds */
  *fd = -1;
  luaL_setmetatable(L, FD_MT);
  lua_toclose(L, 2);
  if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return cs_fail(L, path, "read", strerror(errno), "io");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  ssize_t r;
  do {
    char *p = luaL_prepbuffsize(&b, LUAL_BUFFERSIZE);
    r = read(*fd, p, LUAL_BUFFERSIZE);
    if (r > 0) luaL_addsize(&b, (size_t)r);
  } while (r > 0 || (r < 0 && errno == EINTR));
  if (r < 0) return cs_fail(L, path, "read", strerror(errno), "io");
  luaL_pushresult(&b);
  return load_text(L, 3, 1);
}

/* Pushes line, col of the position at record[field][key] (or of the record itself). */
static int push_where(lua_State *L, const char *field) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!get_record(L, 1)) {
    lua_pushnil(L);
    return 1;
  }
  if (field && lua_getfield(L, -1, field) == LUA_TTABLE) {
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
  }
  if (!lua_istable(L, -1)) {
    lua_pushnil(L);
    return 1;
  }
  lua_getfield(L, -1, "line");
  lua_getfield(L, -2, "col");
  return 2;
}

/* yaml.where(container [, key]) -> line, col of the container, or of its value at key */
static int l_yaml_where(lua_State *L) {
  return push_where(L, lua_isnoneornil(L, 2) ? NULL : "values");
}

/* yaml.key_where(map, key) -> line, col of the key's own text */
static int l_yaml_key_where(lua_State *L) {
  luaL_checkany(L, 2);
  return push_where(L, "keys");
}

/* yaml.name(container) -> the name its document was loaded under */
static int l_yaml_name(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (!get_record(L, 1)) return 0;
  lua_getfield(L, -1, "name");
  return 1;
}

static int l_yaml_is_null(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, cs_yaml_is_null(L, 1));
  return 1;
}

static const luaL_Reg yaml_funcs[] = {
  {"load", l_yaml_load},
  {"load_file", l_yaml_load_file},
  {"dump", cs_yaml_dump},
  {"spans", cs_yaml_spans},
  {"where", l_yaml_where},
  {"key_where", l_yaml_key_where},
  {"name", l_yaml_name},
  {"is_null", l_yaml_is_null},
  {NULL, NULL}
};

int luaopen_cargoship_yaml(lua_State *L) {
  if (luaL_newmetatable(L, LOADER_MT)) {
    lua_pushcfunction(L, l_yaml_loader_gc);
    lua_setfield(L, -2, "__gc");
  }
  if (luaL_newmetatable(L, FD_MT)) {
    lua_pushcfunction(L, l_yaml_fd_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_yaml_fd_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 2);
  luaL_newlib(L, yaml_funcs);
  cs_yaml_push_null(L);
  lua_setfield(L, -2, "null");
  return 1;
}
