// A deterministic, synthetic but realistic IR module for benchmarks: many
// functions with loops, switches, data-dependent branches, memory traffic and
// calls, roughly `functions * 41` lines of IR text.
#pragma once

#include <string>

namespace fdo::jit::bench {

// Exported entry: i64 @bench_run(i64 %rounds).
std::string generate_module(int functions);

} // namespace fdo::jit::bench
