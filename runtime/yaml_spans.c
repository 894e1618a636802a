/* yaml_spans.c - where each node of a YAML text sits, in bytes, so a value can be replaced in place. */
#include "cs_yaml.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Editing a file by splicing byte ranges keeps every comment, anchor and blank line the
 * way the person wrote it; re-dumping the parsed tree would lose them all. */

#define SPANS_MT "cargoship.yaml.spans"
#define MAX_FRAMES 512

typedef struct {
  yaml_parser_t parser;
  yaml_event_t ev;
  int parser_live, ev_live;
  size_t *byte_at; /* libyaml's mark.index counts characters: character index -> byte offset */
  size_t nchars;
} spans;

typedef struct {
  int is_map, expecting_key, flow;
  lua_Integer count, node; /* items so far; the container's own entry in the result */
} frame;

static int spans_gc(lua_State *L) {
  spans *s = lua_touserdata(L, 1);
  if (s->ev_live) yaml_event_delete(&s->ev);
  if (s->parser_live) yaml_parser_delete(&s->parser);
  s->ev_live = s->parser_live = 0;
  free(s->byte_at);
  s->byte_at = NULL;
  return 0;
}

/* A mark's 1-based byte position in the text. */
static lua_Integer byte_pos(spans *s, yaml_mark_t m) {
  size_t i = m.index < s->nchars ? m.index : s->nchars;
  return (lua_Integer)s->byte_at[i] + 1;
}

static const char *scalar_style(yaml_scalar_style_t st) {
  switch (st) {
  case YAML_SINGLE_QUOTED_SCALAR_STYLE: return "single";
  case YAML_DOUBLE_QUOTED_SCALAR_STYLE: return "double";
  case YAML_LITERAL_SCALAR_STYLE: return "literal";
  case YAML_FOLDED_SCALAR_STYLE: return "folded";
  default: return "plain";
  }
}

/* Pushes a node record: kind, path (a copy of path[1..depth]), doc, position.  [-0, +1, m] */
static void push_node(lua_State *L, spans *s, const char *kind, int path, int depth, lua_Integer doc,
                      yaml_event_t *ev, int flow) {
  lua_createtable(L, 0, 10);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  lua_createtable(L, depth, 0);
  for (int i = 1; i <= depth; i++) {
    lua_rawgeti(L, path, i);
    lua_rawseti(L, -2, i);
  }
  lua_setfield(L, -2, "path");
  lua_pushinteger(L, doc);
  lua_setfield(L, -2, "doc");
  lua_pushinteger(L, byte_pos(s, ev->start_mark));
  lua_setfield(L, -2, "start");
  lua_pushinteger(L, byte_pos(s, ev->end_mark));
  lua_setfield(L, -2, "stop");
  lua_pushinteger(L, (lua_Integer)ev->start_mark.line + 1);
  lua_setfield(L, -2, "line");
  lua_pushinteger(L, (lua_Integer)ev->start_mark.column + 1);
  lua_setfield(L, -2, "col");
  lua_pushboolean(L, flow);
  lua_setfield(L, -2, "flow");
  const yaml_char_t *anchor = NULL;
  if (ev->type == YAML_SCALAR_EVENT) {
    anchor = ev->data.scalar.anchor;
    lua_pushlstring(L, (const char *)ev->data.scalar.value, ev->data.scalar.length);
    lua_setfield(L, -2, "value");
    lua_pushstring(L, scalar_style(ev->data.scalar.style));
    lua_setfield(L, -2, "style");
    if (ev->data.scalar.tag) {
      lua_pushstring(L, (const char *)ev->data.scalar.tag);
      lua_setfield(L, -2, "tag");
    }
  } else if (ev->type == YAML_MAPPING_START_EVENT) {
    anchor = ev->data.mapping_start.anchor;
  } else if (ev->type == YAML_SEQUENCE_START_EVENT) {
    anchor = ev->data.sequence_start.anchor;
  }
  if (anchor) {
    lua_pushstring(L, (const char *)anchor);
    lua_setfield(L, -2, "anchor");
  }
}

/* The parse, under pcall: [spans, text, result, path] */
static int spans_walk(lua_State *L) {
  spans *s = lua_touserdata(L, 1);
  frame *fr = lua_newuserdatauv(L, sizeof(frame) * MAX_FRAMES, 0); /* slot 5 */
  int depth = 0;
  lua_Integer doc = 0, n = 0;
  for (;;) {
    if (s->ev_live) yaml_event_delete(&s->ev);
    s->ev_live = 0;
    if (!yaml_parser_parse(&s->parser, &s->ev)) {
      lua_pushfstring(L, "%d:%d: %s", (int)s->parser.problem_mark.line + 1,
                      (int)s->parser.problem_mark.column + 1, s->parser.problem ? s->parser.problem : "syntax error");
      return lua_error(L);
    }
    s->ev_live = 1;
    yaml_event_t *ev = &s->ev;
    yaml_event_type_t t = ev->type;
    if (t == YAML_STREAM_END_EVENT) break;
    if (t == YAML_DOCUMENT_START_EVENT) {
      doc++;
      depth = 0;
      continue;
    }
    if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
      frame *f = &fr[--depth];
      lua_rawgeti(L, 3, f->node);
      lua_pushinteger(L, byte_pos(s, ev->end_mark));
      lua_setfield(L, -2, "stop");
      lua_pop(L, 1);
      if (depth > 0 && fr[depth - 1].is_map) fr[depth - 1].expecting_key = !fr[depth - 1].expecting_key;
      continue;
    }
    if (t != YAML_SCALAR_EVENT && t != YAML_ALIAS_EVENT && t != YAML_MAPPING_START_EVENT &&
        t != YAML_SEQUENCE_START_EVENT)
      continue;
    int is_key = 0, flow = depth > 0 && fr[depth - 1].flow;
    if (depth > 0) {
      frame *p = &fr[depth - 1];
      if (p->is_map && p->expecting_key) {
        is_key = 1;
        if (t == YAML_SCALAR_EVENT) lua_pushlstring(L, (const char *)ev->data.scalar.value, ev->data.scalar.length);
        else lua_pushboolean(L, 0); /* a complex key: no path goes through it */
        lua_rawseti(L, 4, depth);
      } else if (!p->is_map) {
        lua_pushinteger(L, ++p->count);
        lua_rawseti(L, 4, depth);
      }
    }
    const char *kind = is_key ? "key" : t == YAML_SCALAR_EVENT ? "scalar" : t == YAML_ALIAS_EVENT ? "alias"
                                    : t == YAML_MAPPING_START_EVENT ? "map" : "seq";
    int own_flow = flow || (t == YAML_MAPPING_START_EVENT && ev->data.mapping_start.style == YAML_FLOW_MAPPING_STYLE) ||
                   (t == YAML_SEQUENCE_START_EVENT && ev->data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE);
    push_node(L, s, kind, 4, depth, doc, ev, own_flow);
    lua_rawseti(L, 3, ++n);
    if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) {
      if (depth >= MAX_FRAMES) return luaL_error(L, "nested deeper than %d levels", MAX_FRAMES);
      frame *f = &fr[depth++];
      f->is_map = t == YAML_MAPPING_START_EVENT;
      f->expecting_key = 1;
      f->flow = own_flow;
      f->count = 0;
      f->node = n;
    } else if (depth > 0 && fr[depth - 1].is_map) {
      fr[depth - 1].expecting_key = !fr[depth - 1].expecting_key;
    }
  }
  lua_settop(L, 3);
  return 1;
}

/* yaml.spans(text) -> list of nodes in text order | nil, "line:col: problem"
 * node = {kind = "scalar"|"alias"|"map"|"seq"|"key", path = {"spec", "hosts", 1, ...}
 * (mapping keys, 1-based sequence indices; a key node carries the path of its entry),
 * doc, start, stop (1-based bytes: text:sub(start, stop - 1) is the node as written,
 * anchor and tag included), line, col, flow (inside a flow collection), value and style
 * ("plain"|"single"|"double"|"literal"|"folded") for scalars and keys, anchor, tag} */
int cs_yaml_spans(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  lua_settop(L, 1);
  spans *s = lua_newuserdatauv(L, sizeof *s, 0);
  memset(s, 0, sizeof *s);
  if (luaL_newmetatable(L, SPANS_MT)) {
    lua_pushcfunction(L, spans_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  s->byte_at = malloc((len + 1) * sizeof *s->byte_at);
  if (!s->byte_at) return luaL_error(L, "yaml.spans: out of memory");
  for (size_t i = 0; i < len; i++)
    if (((unsigned char)text[i] & 0xc0) != 0x80) s->byte_at[s->nchars++] = i;
  s->byte_at[s->nchars] = len;
  if (!yaml_parser_initialize(&s->parser)) return luaL_error(L, "yaml.spans: out of memory");
  s->parser_live = 1;
  yaml_parser_set_input_string(&s->parser, (const unsigned char *)text, len);
  lua_pushcfunction(L, spans_walk);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 1);
  lua_newtable(L);
  lua_newtable(L);
  int st = lua_pcall(L, 4, 1, 0);
  lua_pushcfunction(L, spans_gc);
  lua_pushvalue(L, 2);
  lua_call(L, 1, 0);
  if (st == LUA_OK) return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}
