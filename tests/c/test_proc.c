/* test_proc.c - child processes on the loop: output, exits, timeouts, cancellation, no zombie. */
#include "cs.h"
#include "ctest.h"

#include <errno.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* reaped(pid) -> true when pid is no child of ours any more (waitpid says ECHILD) */
static int l_test_reaped(lua_State *L) {
  pid_t pid = (pid_t)luaL_checkinteger(L, 1);
  lua_pushboolean(L, waitpid(pid, NULL, WNOHANG) < 0 && errno == ECHILD);
  return 1;
}

/* no_children() -> true when this process has no child at all, zombie or not */
static int l_test_no_children(lua_State *L) {
  lua_pushboolean(L, waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
  return 1;
}

/* alive(pid) -> true when pid runs (a zombie is dead: its parent, init here, reaps it later) */
static int l_test_alive(lua_State *L) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)luaL_checkinteger(L, 1));
  FILE *f = fopen(path, "r");
  if (!f) {
    lua_pushboolean(L, 0);
    return 1;
  }
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *paren = strrchr(buf, ')');
  lua_pushboolean(L, paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X');
  return 1;
}

static int l_test_force_sigchld(lua_State *L) {
  cs_proc_force_sigchld = lua_toboolean(L, 1);
  return 0;
}

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "cargoship.loop", luaopen_cargoship_loop, 0);
  lua_setglobal(L, "loop");
  luaL_requiref(L, "cargoship.proc", luaopen_cargoship_proc, 0);
  lua_setglobal(L, "proc");
  static const luaL_Reg fns[] = {
    {"reaped", l_test_reaped}, {"no_children", l_test_no_children}, {"alive", l_test_alive},
    {"force_sigchld", l_test_force_sigchld}, {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
  /* run(fn): fn in a loop task; returns its results or raises its error */
  luaL_dostring(L,
    "function run(fn)\n"
    "  local r = table.pack(loop.run(fn))\n"
    "  if not r[1] then error(r[2], 0) end\n"
    "  return table.unpack(r, 2, r.n)\n"
    "end\n"
    "function read_all(p, which)\n"
    "  local parts = {}\n"
    "  while true do\n"
    "    local s = assert(p:read(which))\n"
    "    if s == '' then return table.concat(parts) end\n"
    "    parts[#parts + 1] = s\n"
    "  end\n"
    "end\n");
  return L;
}

static void check_basics(lua_State *L, const char *how) {
  printf("# exits learnt through %s\n", how);
  CHECK_LUA(L, "stdout and stderr are read apart; the exit code comes from wait",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c', 'printf out; printf err >&2; exit 7'}})\n"
    "  local out, err = read_all(p, 'stdout'), read_all(p, 'stderr')\n"
    "  local code, sig = p:wait()\n"
    "  return out == 'out' and err == 'err' and code == 7 and sig == nil and reaped(p:pid()),\n"
    "    string.format('%q %q %s %s', out, err, code, sig)\n"
    "end)");
  CHECK_LUA(L, "a signal's end is 128 + its number, with its name",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c', 'kill -KILL $$'}, stdout = 'null', stderr = 'null'})\n"
    "  local code, sig = p:wait()\n"
    "  return code == 137 and sig == 'KILL', tostring(code) .. ' ' .. tostring(sig)\n"
    "end)");
  CHECK_LUA(L, "a program that does not exist is nil, msg, \"missing\" (reported by the spawn, not a child's exit)",
    "return run(function()\n"
    "  local p, msg, code = proc.spawn{argv = {'/nonexistent/cargoship-no-such-program'}}\n"
    "  return p == nil and code == 'missing' and msg:find('No such file', 1, true) ~= nil, msg\n"
    "end)");
  CHECK_LUA(L, "env is laid over ours (false removes), cwd is honoured",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c', 'echo \"$CS_A:${HOME-unset}:$(pwd)\"'},\n"
    "    env = {CS_A = 'a b', HOME = false}, cwd = '/tmp'})\n"
    "  local out = read_all(p, 'stdout')\n"
    "  p:wait()\n"
    "  return out == 'a b:unset:/tmp\\n', out\n"
    "end)");
  CHECK_LUA(L, "stderr = \"stdout\" merges the streams in order",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c', 'echo 1; echo 2 >&2; echo 3'}, stderr = 'stdout'})\n"
    "  local out = read_all(p, 'stdout')\n"
    "  return p:wait() == 0 and out == '1\\n2\\n3\\n', out\n"
    "end)");
  CHECK_LUA(L, "wait(timeout) times out and leaves the process running; close kills and reaps it",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sleep', '30'}, stdout = 'null', stderr = 'null'})\n"
    "  local t0 = loop.now()\n"
    "  local ok, msg, code = p:wait(0.2)\n"
    "  local dt = loop.now() - t0\n"
    "  if ok ~= nil or code ~= 'timeout' or dt < 0.15 or dt > 2 or not alive(p:pid()) then\n"
    "    return false, tostring(msg) .. ' after ' .. dt end\n"
    "  local pid = p:pid()\n"
    "  p:close()\n"
    "  return reaped(pid) and not alive(pid), 'still there'\n"
    "end)");
  CHECK_LUA(L, "several processes waited for at once each get their own exit",
    "return run(function()\n"
    "  local tasks = {}\n"
    "  for i = 1, 5 do\n"
    "    tasks[i] = loop.spawn(function()\n"
    "      local p = assert(proc.spawn{argv = {'sh', '-c', 'sleep 0.' .. (6 - i) .. '; exit ' .. i},\n"
    "        stdout = 'null', stderr = 'null'})\n"
    "      return p:wait(10)\n"
    "    end)\n"
    "  end\n"
    "  for i = 1, 5 do\n"
    "    local ok, code = tasks[i]:join()\n"
    "    if not ok or code ~= i then return false, 'task ' .. i .. ': ' .. tostring(code) end\n"
    "  end\n"
    "  return true\n"
    "end)");
  CHECK_LUA(L, "cancelling the waiting task kills the process group, grandchild too, and reaps the child",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c', 'sleep 60 & echo $!; wait'}})\n"
    "  local line = p:read('stdout')\n"
    "  local grandchild = tonumber(line:match('%d+'))\n"
    "  local waiter = loop.spawn(function() return p:wait() end)\n"
    "  loop.sleep(0.1)\n"
    "  waiter:cancel()\n"
    "  local ok, err, code = waiter:join()\n"
    "  loop.sleep(0.1)\n"
    "  return not ok and code == 'cancelled' and reaped(p:pid()) and not alive(grandchild),\n"
    "    string.format('%s %s %s reaped=%s grandchild alive=%s', ok, err, code, reaped(p:pid()),\n"
    "      alive(grandchild))\n"
    "end)");
  CHECK_LUA(L, "a task cancelled while reading kills the process too",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sleep', '60'}, stderr = 'null'})\n"
    "  local reader = loop.spawn(function() return p:read('stdout') end)\n"
    "  loop.sleep(0.05)\n"
    "  reader:cancel()\n"
    "  local ok, _, code = reader:join()\n"
    "  return not ok and code == 'cancelled' and reaped(p:pid()), tostring(code)\n"
    "end)");
  CHECK_LUA(L, "4 MB on stdout and on stderr at once, read by two tasks: no deadlock, every byte",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sh', '-c',\n"
    "    'head -c 4000000 /dev/zero & head -c 4000000 /dev/zero | tr \"\\\\0\" x >&2; wait'}})\n"
    "  local e = loop.spawn(function() return read_all(p, 'stderr') end)\n"
    "  local out = read_all(p, 'stdout')\n"
    "  local _, err = e:join()\n"
    "  local code = p:wait(10)\n"
    "  return code == 0 and #out == 4000000 and #err == 4000000 and not out:find('[^%z]')\n"
    "    and not err:find('[^x]'), string.format('%s %d %d', code, #out, #err)\n"
    "end)");
  CHECK_LUA(L, "2 MB written to stdin while its echo is read: the write yields on a full pipe",
    "return run(function()\n"
    "  local data = string.rep('0123456789abcdef', 131072)\n"
    "  local p = assert(proc.spawn{argv = {'cat'}, stdin = 'pipe'})\n"
    "  local w = loop.spawn(function() local ok, e = p:write(data, 10); p:close_stdin(); return ok, e end)\n"
    "  local out = read_all(p, 'stdout')\n"
    "  local _, wrote, werr = w:join()\n"
    "  return wrote == true and out == data and p:wait() == 0, tostring(werr) .. ' ' .. #out\n"
    "end)");
  CHECK_LUA(L, "a write to a process that stopped reading is nil, msg, \"closed\"",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'true'}, stdin = 'pipe', stdout = 'null'})\n"
    "  p:wait()\n"
    "  local ok, msg, code = p:write(string.rep('x', 1 << 20))\n"
    "  return ok == nil and code == 'closed', tostring(msg)\n"
    "end)");
  CHECK_LUA(L, "a process the collector takes is killed and reaped",
    "local pid = run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sleep', '60'}})\n"
    "  return p:pid()\n"
    "end)\n"
    "collectgarbage(); collectgarbage()\n"
    "return reaped(pid) and not alive(pid), 'pid ' .. pid .. ' survived'");
  CHECK_LUA(L, "no zombie and no child is left by any of the above",
    "return no_children()");
}

static void check_misuse(lua_State *L) {
  CHECK_LUA(L, "reading outside a task raises",
    "local p = assert(proc.spawn{argv = {'true'}})\n"
    "local ok, err = pcall(p.read, p, 'stdout')\n"
    "p:close()\n"
    "return not ok and tostring(err):find('outside a task') ~= nil, err");
  CHECK_LUA(L, "a closed process raises on use; bad options raise",
    "local p = assert(proc.spawn{argv = {'true'}})\n"
    "p:close()\n"
    "local ok1, e1 = pcall(p.wait, p)\n"
    "local ok2, e2 = pcall(proc.spawn, {argv = {}})\n"
    "local ok3, e3 = pcall(proc.spawn, {argv = {'true'}, stdin = 'stdout'})\n"
    "return not ok1 and not ok2 and not ok3 and e1:find('closed') and e2:find('empty')\n"
    "  and e3:find('stdin'), tostring(e1) .. ' | ' .. tostring(e2) .. ' | ' .. tostring(e3)");
  CHECK_LUA(L, "kill signals the group; kill after the reap is false",
    "return run(function()\n"
    "  local p = assert(proc.spawn{argv = {'sleep', '60'}})\n"
    "  local k1 = p:kill('INT')\n"
    "  local code, sig = p:wait(5)\n"
    "  return k1 == true and code == 130 and sig == 'INT' and p:kill() == false, tostring(sig)\n"
    "end)");
}

int main(void) {
  lua_State *L = new_state();
  check_basics(L, "pidfd_open");
  check_misuse(L);
  lua_close(L);
  cs_proc_force_sigchld = 1;
  L = new_state();
  check_basics(L, "the SIGCHLD self-pipe");
  lua_close(L);
  return ct_summary();
}
