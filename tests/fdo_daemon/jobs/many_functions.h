// A CPU program large enough to be compiled in parts (compile_jobs_test,
// compile_parts_test).
#pragma once

#include <string>

namespace fdo::daemon::testing {

// A CPU program of `n` functions of ~30 instructions each, chained.
inline std::string many_functions(int n) {
  std::string ir;
  for (int i = 0; i < n; ++i) {
    ir += "define internal i64 @f" + std::to_string(i) + "(i64 %x) noinline {\n";
    std::string v = "%x";
    for (int k = 0; k < 10; ++k) {
      const std::string a = "%a" + std::to_string(k), b = "%b" + std::to_string(k),
                        c = "%c" + std::to_string(k);
      ir += "  " + a + " = mul i64 " + v + ", " + std::to_string(2 * k + 3) + "\n";
      ir += "  " + b + " = xor i64 " + a + ", " + std::to_string(i * 7 + k) + "\n";
      ir += "  " + c + " = lshr i64 " + b + ", 3\n";
      v = c;
    }
    if (i + 1 < n)
      ir += "  %r = call i64 @f" + std::to_string(i + 1) + "(i64 " + v + ")\n  ret i64 %r\n}\n";
    else
      ir += "  ret i64 " + v + "\n}\n";
  }
  ir += "define i64 @run(i64 %x) {\n  %r = call i64 @f0(i64 %x)\n  ret i64 %r\n}\n";
  return ir;
}

} // namespace fdo::daemon::testing
