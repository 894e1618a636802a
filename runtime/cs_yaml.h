/* cs_yaml.h - what yaml.c (the loader) and yaml_dump.c (scalar rules, null, dump) share. */
#ifndef CS_YAML_H
#define CS_YAML_H

#include "cs.h"

/* Pushes the one yaml.null sentinel of this state.  [-0, +1, m] */
void cs_yaml_push_null(lua_State *L);
/* Is the value at idx yaml.null?  [-0, +0, -] */
int cs_yaml_is_null(lua_State *L, int idx);
/* Resolves a plain scalar by the core schema; pushes the value, returns its tag name.  [-0, +1, m] */
const char *cs_yaml_resolve(lua_State *L, const char *s, size_t n);
/* yaml.dump(value) -> string */
int cs_yaml_dump(lua_State *L);
/* yaml.spans(text) -> every node's byte range, for in-place edits (yaml_spans.c) */
int cs_yaml_spans(lua_State *L);

#endif
