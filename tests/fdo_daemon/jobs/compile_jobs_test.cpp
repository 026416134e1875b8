// The compile role's NVPTX path (worker_jobs.h, docs/gpu.md): kernels listed
// by analyze, and the launch bounds the profile keeps for the job's GPU
// architecture reaching the PTX. No GPU needed.
#include "fdo/daemon/worker_jobs.h"
#include "fdo/util/profile.h"
#include "many_functions.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

using namespace fdo;
using namespace fdo::daemon;
using fdo::daemon::testing::many_functions;

namespace {

std::string gpu_kernels() {
  std::ifstream in(std::string(FDO_SOURCE_DIR) + "/tests/jit/fixtures/gpu_kernels.ll");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Message compile_job(const std::string& program, const ProfileDoc* profile) {
  Message m;
  m.header = {{"op", "compile"},
              {"mode", "instrumented"},
              {"profile", profile ? to_json(*profile) : nlohmann::json(nullptr)},
              {"limits", {{"max_program_bytes", 1 << 24}}},
              {"gpu", {{"sm", 90}, {"driver", 12040}}}};
  m.payload = program;
  return m;
}

// The PTX of a compile reply (after its metadata).
std::string ptx_of(const Message& reply) {
  const auto n = reply.header["metadata_bytes"].get<std::size_t>();
  return reply.payload.substr(n);
}

// The .maxntid directive of `kernel`'s entry, or "" when it has none.
std::string maxntid_of(const std::string& ptx, const std::string& kernel) {
  std::smatch m;
  const std::regex entry("\\.entry\\s+" + kernel + "\\s*\\([^)]*\\)\\s*([^{]*)\\{");
  if (!std::regex_search(ptx, m, entry)) return "missing";
  std::smatch b;
  const std::string between = m[1].str();
  if (!std::regex_search(between, b, std::regex("\\.maxntid\\s+([0-9, ]+)"))) return "";
  return b[1].str();
}

} // namespace

TEST_CASE("compile jobs: an NVPTX program gets the profile's launch bounds for its GPU",
          "[compile_jobs][gpu]") {
  const std::string program = gpu_kernels();
  CompileJobs jobs;
  Message analyze;
  analyze.header = {{"op", "analyze"}, {"limits", {{"max_program_bytes", 1 << 24}}}};
  analyze.payload = program;
  auto a = jobs.handle(analyze);
  REQUIRE(a);
  CHECK(a->header["target"] == "nvptx");

  auto plain = jobs.handle(compile_job(program, nullptr));
  REQUIRE(plain);
  CHECK(maxntid_of(ptx_of(*plain), "saxpy").empty());

  ProfileDoc doc;
  doc.gpu.launch_bounds.push_back({"sm_90", "saxpy", 128, 0});
  doc.gpu.launch_bounds.push_back({"sm_80", "reduce_sum", 64, 0}); // another GPU's
  auto bounded = jobs.handle(compile_job(program, &doc));
  REQUIRE(bounded);
  const std::string ptx = ptx_of(*bounded);
  CHECK(maxntid_of(ptx, "saxpy").find("128") == 0);
  CHECK(maxntid_of(ptx, "reduce_sum").empty());

  // A bound naming no kernel of the program is refused, not ignored.
  ProfileDoc stray;
  stray.gpu.launch_bounds.push_back({"sm_90", "no_such_kernel", 128, 0});
  auto refused = jobs.handle(compile_job(program, &stray));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
}

namespace {

Message cpu_compile_job(const std::string& program, std::optional<nlohmann::json> threads) {
  Message m;
  m.header = {{"op", "compile"},
              {"mode", "plain"},
              {"profile", nullptr},
              {"limits", {{"max_program_bytes", 1 << 24}}}};
  if (threads) m.header["threads"] = *threads;
  m.payload = program;
  return m;
}

} // namespace

TEST_CASE("compile jobs: a large program is compiled in the parts the job's threads allow",
          "[compile_jobs][partition]") {
  const std::string program = many_functions(800); // ~24,000 instructions
  CompileJobs jobs;
  auto metadata_of = [](const Message& reply) {
    const auto n = reply.header["metadata_bytes"].get<std::size_t>();
    return nlohmann::json::parse(reply.payload.substr(0, n));
  };
  auto two = jobs.handle(cpu_compile_job(program, 2));
  if (!two) FAIL(two.error().describe());
  CHECK(metadata_of(*two).value("partitions", 1) == 2);
  CHECK(two->header.value("explanation", "")
            .find("compiled in 2 parts at once from the inliner on") != std::string::npos);
  // An older daemon's job (no threads): one part, as then.
  auto one = jobs.handle(cpu_compile_job(program, std::nullopt));
  REQUIRE(one);
  CHECK_FALSE(metadata_of(*one).contains("partitions"));
  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json(65), nlohmann::json("2"), nlohmann::json(-1)}) {
    INFO(bad.dump());
    auto r = jobs.handle(cpu_compile_job(program, bad));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
  }
}
