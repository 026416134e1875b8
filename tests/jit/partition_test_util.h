// What the partitioned-compile tests share (partition_test.cpp,
// prefix_test.cpp): a program that a split separates in every way, the
// requests that split it, its profile as the daemon gathers it, and what a
// later compile is offered of an earlier one's parts.
#pragma once

#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/object_set.h"
#include "jit_test_util.h"
#include "loader_test_util.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace fdo::jit::test {

// A program of `n` functions that reach each other in every way a split
// separates: direct calls along a chain, calls through a table of function
// pointers, internal functions and constants, a writable global counting
// calls, a constructor, and a loop with branches for the block map.
inline std::string program(int n) {
  std::string ir = "@calls = internal global i64 0\n@seed = internal global i64 0\n"
                   "@table = internal constant [" +
                   std::to_string(n) + " x ptr] [";
  for (int i = 0; i < n; ++i)
    ir += (i ? ", ptr @f" : "ptr @f") + std::to_string(i);
  ir += "]\n@weights = internal constant [4 x i64] [i64 3, i64 5, i64 7, i64 11]\n"
        "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] "
        "[{ i32, ptr, ptr } { i32 65535, ptr @init, ptr null }]\n"
        "define internal void @init() {\n  store i64 17, ptr @seed\n  ret void\n}\n";
  for (int i = 0; i < n; ++i) {
    const std::string f = "@f" + std::to_string(i);
    const std::string next = i + 1 < n ? "@f" + std::to_string(i + 1) : "";
    ir += "define internal i64 " + f + "(i64 %x) noinline {\nentry:\n" +
          "  %w.p = getelementptr [4 x i64], ptr @weights, i64 0, i64 " + std::to_string(i % 4) +
          "\n  %w = load i64, ptr %w.p\n  br label %loop\nloop:\n"
          "  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]\n"
          "  %acc = phi i64 [ %x, %entry ], [ %acc.next, %body ]\n"
          "  %done = icmp uge i64 %i, 3\n  br i1 %done, label %out, label %body\nbody:\n"
          "  %odd = and i64 %acc, 1\n  %c = icmp eq i64 %odd, 0\n"
          "  %m = mul i64 %acc, %w\n  %a = add i64 %acc, " +
          std::to_string(i + 1) +
          "\n  %acc.next = select i1 %c, i64 %m, i64 %a\n  %i.next = add i64 %i, 1\n"
          "  br label %loop\nout:\n";
    if (!next.empty())
      ir += "  %r = call i64 " + next + "(i64 %acc)\n  ret i64 %r\n}\n";
    else
      ir += "  ret i64 %acc\n}\n";
  }
  ir += "define i64 @run(i64 %k) {\n"
        "  %c = load i64, ptr @calls\n  %c1 = add i64 %c, 1\n  store i64 %c1, ptr @calls\n"
        "  %s = load i64, ptr @seed\n  %x = add i64 %k, %s\n"
        "  %r = call i64 @f0(i64 %x)\n  ret i64 %r\n}\n"
        "define i64 @via_table(i64 %i, i64 %x) {\n"
        "  %p = getelementptr [" +
        std::to_string(n) + " x ptr], ptr @table, i64 0, i64 %i\n" +
        "  %f = load ptr, ptr %p\n  %r = call i64 %f(i64 %x)\n  ret i64 %r\n}\n"
        "define i64 @calls_so_far() {\n  %c = load i64, ptr @calls\n  ret i64 %c\n}\n";
  return ir;
}

inline CompileRequest partitioned(CompileMode mode, unsigned threads) {
  CompileRequest r = request(mode);
  r.threads = threads;
  r.min_part_instructions = 1; // split even this small module
  r.max_parts = threads;       // into as many parts as threads
  return r;
}

// The profile of program(n) as the daemon gathers it: counters of an
// instrumented run of `run` and one call through the table.
inline ProfileDoc gathered_profile(const std::string& ir, Loader& loader) {
  CompileResult instrumented = compile_or_throw(ir, request(CompileMode::instrumented));
  ProfileDoc doc;
  auto p = load_or_fail(loader, instrumented);
  for (std::uint64_t k = 0; k < 50; ++k)
    call(*p, "run", {k});
  call(*p, "via_table", {3, 4});
  auto counts = p->read_counters();
  for (const InstrumentedFunction& f : instrumented.counters_layout)
    doc.functions[f.pgo_name] = FunctionProfile{
        .cfg_hash = f.cfg_hash, .counts = counts.at(f.pgo_name), .source_name = f.pgo_name};
  return doc;
}

// What a later compile is offered of `earlier`: its parts with their objects
// (views into earlier.object, which must outlive them).
inline std::vector<HeldPart> held_from(const CompileResult& earlier) {
  auto objects = unpack_objects(earlier.object);
  REQUIRE(objects.has_value());
  REQUIRE(objects->size() == earlier.part_builds.size());
  std::vector<HeldPart> held;
  for (std::size_t i = 0; i < objects->size(); ++i)
    held.push_back(HeldPart{earlier.part_builds[i].key, earlier.part_builds[i].slice,
                            earlier.part_builds[i].object_hash, (*objects)[i]});
  return held;
}

} // namespace fdo::jit::test
