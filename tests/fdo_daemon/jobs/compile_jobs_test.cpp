// The compile role's NVPTX path (worker_jobs.h, docs/gpu.md): kernels listed
// by analyze, and the launch bounds the profile keeps for the job's GPU
// architecture reaching the PTX. No GPU needed.
#include "fdo/daemon/compile_messages.h"
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
  CompileJob job;
  job.mode = CompileMode::instrumented;
  if (profile) job.profile = std::make_shared<const ProfileDoc>(*profile);
  job.limits.max_program_bytes = 1 << 24;
  job.gpu = jit::GpuTarget{90, 12040};
  auto m = compile_job_message(job, program);
  REQUIRE(m);
  return *m;
}

// The PTX of a compile reply (after its metadata).
std::string ptx_of(const Message& reply) {
  auto r = compile_reply_of(reply);
  REQUIRE(r);
  return std::string(r->object);
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

Message cpu_compile_job(const std::string& program, std::uint32_t threads) {
  CompileJob job;
  job.limits.max_program_bytes = 1 << 24;
  job.threads = threads;
  auto m = compile_job_message(job, program);
  REQUIRE(m);
  return *m;
}

} // namespace

TEST_CASE("compile jobs: a large program is compiled in the parts the job's threads allow",
          "[compile_jobs][partition]") {
  const std::string program = many_functions(800); // ~24,000 instructions
  CompileJobs jobs;
  auto reply_of = [](const Message& reply) {
    auto r = compile_reply_of(reply);
    REQUIRE(r);
    return std::pair{nlohmann::json::parse(r->metadata), r->reply.explanation};
  };
  auto two = jobs.handle(cpu_compile_job(program, 2));
  if (!two) FAIL(two.error().describe());
  CHECK(reply_of(*two).first.value("partitions", 1) == 2);
  CHECK(reply_of(*two).second.find("compiled in 2 parts at once from the inliner on") !=
        std::string::npos);
  // One thread (a job's default): one part.
  auto one = jobs.handle(cpu_compile_job(program, 1));
  REQUIRE(one);
  CHECK_FALSE(reply_of(*one).first.contains("partitions"));
  for (std::uint32_t bad : {0u, 65u, 0xffffffffu}) {
    INFO(bad);
    auto r = jobs.handle(cpu_compile_job(program, bad));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::invalid_argument);
  }
}
