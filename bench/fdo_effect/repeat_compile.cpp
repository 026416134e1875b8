// fdo_repeat_compile: compiles one program the same way N times in one
// process and says whether every compile gave the same bytes (docs/jit.md,
// "Determinism"; a part key is only worth what the compile's determinism is:
// "Incremental recompiles"). For hunting a compile that is not deterministic
// on a big program, where the unit tests' small fixtures cannot show it.
//
//   fdo_repeat_compile --ir FILE [--profile JSON] [--mode M] [--threads N]
//                      [--parts N] [--part-instructions N] [--repeat N]
//                      [--dump DIR]
//
// --profile compiles in optimized mode on a profile document as fdod keeps
// it (fdo_effect_jit --profile, run_programs.py's settled_profile.json);
// otherwise --mode (default instrumented). Prints one JSON line:
//   {"compiles": N, "identical": K, "partitions": P, "part_objects": [H, ...],
//    "differing": [{"compile": i, "parts": [j, ...]}, ...]}
// comparing every compile's object set with the first's (and, for a compile
// split at the inliner, each part's key and object: "parts" lists those that
// differ; empty when the sets differ in their number of parts).
// "part_objects": the first compile's part object hashes (BLAKE3 hex; empty
// when not split at the inliner), to compare compiles in separate processes,
// each with its own heap layout (--repeat 1 is allowed for that).
// --dump DIR writes the parts of each compile that differs, and the first
// compile's, as DIR/c<i>_p<j>.o (for objdump and llvm-dwarfdump).
// Exit status: 0 every compile identical, 3 some differ, 1 a compile failed,
// 2 bad arguments or input.
#include "fdo/jit/compiler.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/fd.h"
#include "fdo/util/profile.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using fdo::CompileMode;

[[noreturn]] void fail(int status, const std::string& what) {
  std::fprintf(stderr, "fdo_repeat_compile: %s\n", what.c_str());
  std::exit(status);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(2, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

unsigned long number(const std::string& flag, const std::string& v, unsigned long lo,
                     unsigned long hi) {
  char* end = nullptr;
  const unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    fail(2, flag + " expects " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" + v +
                "'");
  return n;
}

struct Options {
  std::string ir_path;
  std::string profile_path;
  std::optional<CompileMode> mode;
  unsigned threads = 1;
  unsigned parts = 0;
  std::size_t part_instructions = fdo::jit::kMinPartInstructions;
  unsigned repeat = 5;
  std::string dump_dir;
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(2, a + " needs a value");
      return argv[++i];
    };
    if (a == "--ir") {
      o.ir_path = value();
    } else if (a == "--profile") {
      o.profile_path = value();
    } else if (a == "--mode") {
      const std::string v = value();
      auto m = fdo::parse_compile_mode(v);
      if (!m) fail(2, "--mode: " + m.error().describe());
      o.mode = *m;
    } else if (a == "--threads") {
      o.threads = static_cast<unsigned>(number(a, value(), 1, 64));
    } else if (a == "--parts") {
      o.parts = static_cast<unsigned>(number(a, value(), 1, 64));
    } else if (a == "--part-instructions") {
      o.part_instructions = number(a, value(), 100, 100'000'000);
    } else if (a == "--repeat") {
      o.repeat = static_cast<unsigned>(number(a, value(), 1, 1000));
    } else if (a == "--dump") {
      o.dump_dir = value();
    } else {
      fail(2, "unknown argument '" + a + "'\nusage: " + argv[0] +
                  " --ir FILE [--profile JSON] [--mode M] [--threads N] [--parts N]"
                  " [--part-instructions N] [--repeat N] [--dump DIR]");
    }
  }
  if (o.ir_path.empty()) fail(2, "--ir is required");
  if (!o.profile_path.empty() && o.mode && *o.mode != CompileMode::optimized)
    fail(2, "--profile compiles in optimized mode: leave --mode out");
  if (o.profile_path.empty() && o.mode &&
      (*o.mode == CompileMode::optimized || *o.mode == CompileMode::cs_instrumented))
    fail(2, "--mode " + std::string(fdo::to_string(*o.mode)) + " needs a profile (--profile)");
  return o;
}

// The parts of `r` whose key or object differs from `first`'s.
std::vector<std::size_t> differing_parts(const fdo::jit::CompileResult& first,
                                         const fdo::jit::CompileResult& r) {
  std::vector<std::size_t> out;
  if (first.part_builds.size() != r.part_builds.size()) return out;
  for (std::size_t i = 0; i < r.part_builds.size(); ++i)
    if (r.part_builds[i].key != first.part_builds[i].key ||
        r.part_builds[i].object_hash != first.part_builds[i].object_hash)
      out.push_back(i);
  return out;
}

// Writes the parts of compile `index` as DIR/c<index>_p<j>.o.
void dump_parts(const std::string& dir, unsigned index, const fdo::jit::CompileResult& r) {
  auto parts = fdo::jit::unpack_objects(r.object);
  if (!parts)
    fail(1, "unpacking compile " + std::to_string(index) + ": " + parts.error().describe());
  for (std::size_t j = 0; j < parts->size(); ++j) {
    const std::string path = dir + "/c" + std::to_string(index) + "_p" + std::to_string(j) + ".o";
    if (fdo::Status st = fdo::write_file_atomic(path, (*parts)[j], fdo::Durability::none); !st)
      fail(1, st.error().describe());
  }
}

} // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  const std::string program = read_file(o.ir_path);
  std::optional<fdo::ProfileDoc> doc;
  fdo::jit::CompileRequest req;
  req.mode = o.mode.value_or(CompileMode::instrumented);
  if (!o.profile_path.empty()) {
    auto d = fdo::parse_profile(read_file(o.profile_path));
    if (!d) fail(2, o.profile_path + ": " + d.error().describe());
    doc = std::move(*d);
    req.profile = &*doc;
    req.mode = CompileMode::optimized;
  }
  req.threads = o.threads;
  req.max_parts = o.parts;
  req.min_part_instructions = o.part_instructions;

  std::optional<fdo::jit::CompileResult> first;
  unsigned identical = 0;
  std::string differing;
  for (unsigned i = 0; i < o.repeat; ++i) {
    auto r = fdo::jit::compile(program, req);
    if (!r) fail(1, o.ir_path + ": compile " + std::to_string(i) + ": " + r.error().describe());
    if (!first) {
      first = std::move(*r);
      ++identical;
      continue;
    }
    if (r->object == first->object) {
      ++identical;
      continue;
    }
    if (!o.dump_dir.empty()) {
      if (differing.empty()) dump_parts(o.dump_dir, 0, *first);
      dump_parts(o.dump_dir, i, *r);
    }
    std::string parts;
    for (std::size_t p : differing_parts(*first, *r))
      parts += (parts.empty() ? "" : ", ") + std::to_string(p);
    differing += std::string(differing.empty() ? "" : ", ") + "{\"compile\": " + std::to_string(i) +
                 ", \"parts\": [" + parts + "]}";
  }
  std::string hashes;
  for (const auto& b : first->part_builds)
    hashes += std::string(hashes.empty() ? "" : ", ") + "\"" + b.object_hash + "\"";
  std::printf("{\"compiles\": %u, \"identical\": %u, \"partitions\": %u, \"part_objects\": [%s], "
              "\"differing\": [%s]}\n",
              o.repeat, identical, first->partitions, hashes.c_str(), differing.c_str());
  return identical == o.repeat ? 0 : 3;
}
