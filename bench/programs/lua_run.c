/* The entry fdod calls for the Lua program (bench/programs/README.md):
 * run(n) starts a fresh interpreter, runs a script whose work grows with n
 * (integer arithmetic, a table sort, string formatting and pattern matching,
 * closures, recursion, metatables) and returns its checksum. The same file
 * is built natively with bench_main.h's main() (-DFDO_BENCH_MAIN) to check the value. */
#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

static const char script[] =
    "local n = N\n"
    "local t = {}\n"
    "for i = 1, n do t[i] = (i * 7919) % 1000003 end\n"
    "table.sort(t)\n"
    "local s = 0\n"
    "for i = 1, n, 3 do s = (s + t[i] * i) % 2147483647 end\n"
    "local parts = {}\n"
    "for i = 1, n // 8 do parts[#parts + 1] = string.format('%d:%x', i, t[i]) end\n"
    "local str = table.concat(parts, ',')\n"
    "for w in str:gmatch('%x+') do s = (s * 31 + #w) % 2147483647 end\n"
    "s = s + #str:gsub('[0-9]+', function(d) return d:upper() end)\n"
    "local function fib(k) if k < 2 then return k end return fib(k - 1) + fib(k - 2) end\n"
    "s = s + fib(18)\n"
    "local double = setmetatable({}, {__index = function(_, k) return k * 2 end})\n"
    "for i = 1, n // 4 do s = (s + double[i]) % 2147483647 end\n"
    "local words = {}\n"
    "for i = 1, n // 16 do local k = 'w' .. (i % 97); words[k] = (words[k] or 0) + i end\n"
    "for k, v in pairs(words) do s = (s + v * #k) % 2147483647 end\n"
    "return s\n";

long run(long n) {
  lua_State *L = luaL_newstate();
  if (L == NULL) return -1;
  luaL_openlibs(L);
  lua_pushinteger(L, (lua_Integer)n);
  lua_setglobal(L, "N");
  long result = -2;
  if (luaL_dostring(L, script) == LUA_OK) result = (long)lua_tointeger(L, -1);
  lua_close(L);
  return result;
}

#ifdef FDO_BENCH_MAIN
#include "bench_main.h"
#endif
