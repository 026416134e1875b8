// NVPTX programs (jit/nvptx.h): kernels listed, PTX emitted per architecture,
// identities that keep two GPUs or two drivers apart. No GPU needed.
#include "fdo/jit/nvptx.h"
#include "jit_test_util.h"

#include <catch2/catch.hpp>
#include <regex>

using namespace fdo;
using namespace fdo::jit;
using fdo::jit::test::fixture;

namespace {

const GpuTarget kH100{90, 12040};

GpuCompileRequest request_for(GpuTarget target) {
  GpuCompileRequest r;
  r.target = target;
  return r;
}

std::string ptx_version_line(const std::string& ptx) {
  std::smatch m;
  static const std::regex version(R"(\.version (\d+)\.(\d+))");
  if (!std::regex_search(ptx, m, version)) return "";
  return m[1].str() + m[2].str();
}

} // namespace

TEST_CASE("nvptx: programs that target NVPTX are told apart cheaply", "[nvptx]") {
  CHECK(is_nvptx_program(fixture("gpu_kernels.ll")));
  CHECK_FALSE(is_nvptx_program(fixture("loop_branch.ll")));
  CHECK_FALSE(is_nvptx_program(""));
  CHECK(is_nvptx_program("; c\ntarget triple = \"nvptx64-nvidia-cuda\"\n"));
  // A comment naming the triple is not the triple line.
  CHECK_FALSE(is_nvptx_program("; target triple = \"nvptx64\"\ntarget triple = \"x86_64\"\n"));
}

TEST_CASE("nvptx: analysis lists the kernels with their parameters", "[nvptx]") {
  auto a = analyze_gpu(fixture("gpu_kernels.ll"));
  REQUIRE(a);
  CHECK(a->profile_key.size() == 64);
  REQUIRE(a->kernels.size() == 3);
  CHECK(a->kernels[0] == GpuKernel{"saxpy", {"i32", "float", "ptr", "ptr"}});
  CHECK(a->kernels[1] == GpuKernel{"reduce_sum", {"i32", "ptr", "ptr"}});
  CHECK(a->kernels[2] == GpuKernel{"matmul_tiled", {"i32", "ptr", "ptr", "ptr"}});
  // The key ignores comments and the front end's choice of architecture.
  std::string other = fixture("gpu_kernels.ll");
  other = std::regex_replace(other, std::regex("sm_70"), "sm_80");
  other = "; a comment\n" + other;
  auto b = analyze_gpu(other);
  REQUIRE(b);
  CHECK(b->profile_key == a->profile_key);
}

TEST_CASE("nvptx: bad programs get clear errors", "[nvptx]") {
  auto host = analyze_gpu(fixture("loop_branch.ll"));
  REQUIRE_FALSE(host);
  CHECK(host.error().code() == Errc::invalid_argument);
  CHECK_THAT(host.error().message(), Catch::Contains("not nvptx64-nvidia-cuda"));

  const std::string no_kernel = "target triple = \"nvptx64-nvidia-cuda\"\n"
                                "define void @f(ptr %p) {\n  ret void\n}\n";
  auto none = analyze_gpu(no_kernel);
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message(), Catch::Contains("defines no kernel"));

  const std::string returns = "target triple = \"nvptx64-nvidia-cuda\"\n"
                              "define ptx_kernel i32 @k() {\n  ret i32 0\n}\n";
  auto ret = analyze_gpu(returns);
  REQUIRE_FALSE(ret);
  CHECK_THAT(ret.error().message(), Catch::Contains("must return void"));

  auto garbage = analyze_gpu("target triple = \"nvptx64-nvidia-cuda\"\ndefine oops");
  REQUIRE_FALSE(garbage);
  CHECK(garbage.error().code() == Errc::parse);
}

TEST_CASE("nvptx: PTX for several architectures, at the ISA the table states", "[nvptx]") {
  const std::string program = fixture("gpu_kernels.ll");
  for (int sm : {60, 70, 75, 80, 86, 89, 90}) {
    CAPTURE(sm);
    auto r = compile_gpu(program, request_for(GpuTarget{sm, 12040}));
    REQUIRE(r);
    CHECK(r->sm == sm_name(sm));
    CHECK(r->ptx.find(".target " + sm_name(sm)) != std::string::npos);
    for (const char* k : {".entry saxpy", ".entry reduce_sum", ".entry matmul_tiled"})
      CHECK(r->ptx.find(k) != std::string::npos);
    // The table's ISA is what LLVM really emits.
    CHECK(ptx_version_line(r->ptx) == std::to_string(r->ptx_isa));
    CHECK(r->ptx.find('\0') == std::string::npos);
    CHECK(r->kernels.size() == 3);
  }
}

TEST_CASE("nvptx: a GPU newer than LLVM knows gets PTX for the newest it knows", "[nvptx]") {
  auto r = compile_gpu(fixture("gpu_kernels.ll"), request_for(GpuTarget{100, 12080}));
  REQUIRE(r);
  CHECK(r->sm == "sm_90"); // the driver JIT-compiles it for sm_100
  auto old = compile_gpu(fixture("gpu_kernels.ll"), request_for(GpuTarget{30, 12040}));
  REQUIRE_FALSE(old);
  CHECK(old.error().code() == Errc::unsupported);
}

TEST_CASE("nvptx: a driver too old for the architecture's PTX is refused", "[nvptx]") {
  // sm_90 needs PTX 7.8, first loaded by CUDA 11.8's driver.
  auto r = compile_gpu(fixture("gpu_kernels.ll"), request_for(GpuTarget{90, 11070}));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::unsupported);
  CHECK_THAT(r.error().message(), Catch::Contains("loads PTX ISA up to 7.7"));
  CHECK(max_ptx_isa_of_driver(11080) == 78);
  CHECK(max_ptx_isa_of_driver(12040) == 84);
  CHECK(max_ptx_isa_of_driver(13000) == 90);
  CHECK(max_ptx_isa_of_driver(9000) == 0);
}

TEST_CASE("nvptx: identities, and so cache keys, differ by architecture and driver", "[nvptx]") {
  auto h100 = gpu_identity(kH100);
  auto a100 = gpu_identity(GpuTarget{80, 12040});
  auto newer_driver = gpu_identity(GpuTarget{90, 12080});
  REQUIRE(h100);
  REQUIRE(a100);
  REQUIRE(newer_driver);
  CHECK(h100->triple == "nvptx64-nvidia-cuda");
  CHECK(h100->cpu == "sm_90");
  CHECK(h100->features == "+ptx78");
  CHECK(h100->driver == "12040");
  CHECK(h100->canonical() != a100->canonical());
  CHECK(h100->canonical() != newer_driver->canonical());
  CHECK(h100->canonical().find(";driver=12040") != std::string::npos);
  // The host CPU's identity is unchanged by the GPU fields.
  CHECK(host_identity().canonical().find("driver") == std::string::npos);
  CHECK(host_identity().canonical() != h100->canonical());
}

TEST_CASE("nvptx: launch bounds reach the PTX, and unknown kernels are refused", "[nvptx]") {
  GpuCompileRequest req = request_for(kH100);
  req.launch_bounds["saxpy"] = LaunchBounds{128, 4};
  auto r = compile_gpu(fixture("gpu_kernels.ll"), req);
  REQUIRE(r);
  const auto at = r->ptx.find(".entry saxpy");
  REQUIRE(at != std::string::npos);
  const std::string saxpy = r->ptx.substr(at, r->ptx.find('{', at) - at);
  CHECK(saxpy.find(".maxntid 128, 1, 1") != std::string::npos);
  CHECK(saxpy.find(".minnctapersm 4") != std::string::npos);
  auto plain = compile_gpu(fixture("gpu_kernels.ll"), request_for(kH100));
  REQUIRE(plain);
  CHECK(plain->ptx.find(".maxntid") == std::string::npos);

  req.launch_bounds["nope"] = LaunchBounds{64, 0};
  auto bad = compile_gpu(fixture("gpu_kernels.ll"), req);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message(), Catch::Contains("'nope', which is not a kernel"));
  GpuCompileRequest too_big = request_for(kH100);
  too_big.launch_bounds["saxpy"] = LaunchBounds{2048, 0};
  CHECK_FALSE(compile_gpu(fixture("gpu_kernels.ll"), too_big));
}

TEST_CASE("nvptx: the optimiser runs (O3 PTX differs from O0)", "[nvptx]") {
  GpuCompileRequest o0 = request_for(kH100);
  o0.opt_level = 0;
  auto slow = compile_gpu(fixture("gpu_kernels.ll"), o0);
  auto fast = compile_gpu(fixture("gpu_kernels.ll"), request_for(kH100));
  REQUIRE(slow);
  REQUIRE(fast);
  // Unoptimised code keeps its locals in the stack frame.
  CHECK(slow->ptx.find("__local_depot") != std::string::npos);
  CHECK(fast->ptx.find("__local_depot") == std::string::npos);
}
