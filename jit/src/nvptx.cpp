// NVPTX programs: parse, list kernels, optimise and emit PTX (nvptx.h).
#include "fdo/jit/nvptx.h"

#include "fdo/util/hash.h"
#include "llvm_support.h"
#include "module_prep.h"

#include <array>
#include <chrono>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Triple.h>
#include <mutex>
#include <set>

namespace fdo::jit {

using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

// The architectures LLVM 16's NVPTX back end knows, with the PTX ISA each
// implies (its NVPTX.td processor definitions; nvptx_test checks the table
// against the `.version` line of real output).
struct SmIsa {
  int sm;
  int isa;
};
constexpr std::array<SmIsa, 17> kSmIsa{{{35, 32},
                                        {37, 41},
                                        {50, 40},
                                        {52, 41},
                                        {53, 42},
                                        {60, 50},
                                        {61, 50},
                                        {62, 50},
                                        {70, 60},
                                        {72, 61},
                                        {75, 63},
                                        {80, 70},
                                        {86, 71},
                                        {87, 74},
                                        {89, 78},
                                        {90, 78},
                                        {0, 0}}};

// The newest PTX ISA each CUDA driver release loads (NVIDIA's PTX ISA release
// notes), by driver version major*1000 + minor*10.
constexpr std::array<SmIsa, 21> kDriverIsa{
    {{10000, 63}, {10010, 64}, {10020, 65}, {11000, 70}, {11010, 71}, {11020, 72}, {11030, 73},
     {11040, 74}, {11050, 75}, {11060, 76}, {11070, 77}, {11080, 78}, {12000, 80}, {12010, 81},
     {12020, 82}, {12030, 83}, {12040, 84}, {12050, 85}, {12080, 87}, {12090, 88}, {13000, 90}}};

// The architecture the PTX is generated for: the device's own when LLVM knows
// it, else the newest LLVM knows below it (PTX is forward-compatible: the
// driver JIT-compiles sm_90 PTX for a newer GPU).
Expected<int> compile_sm_for(int device_sm) {
  int best = 0;
  for (const SmIsa& e : kSmIsa)
    if (e.sm != 0 && e.sm <= device_sm) best = e.sm;
  if (best == 0)
    return make_error(Errc::unsupported, sm_name(device_sm) +
                                             " is older than any architecture LLVM " +
                                             LLVM_VERSION_STRING + "'s NVPTX back end targets");
  return best;
}

void ensure_nvptx_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

Expected<std::unique_ptr<llvm::TargetMachine>> nvptx_target_machine(int sm, int opt_level) {
  ensure_nvptx_initialized();
  std::string err;
  const std::string triple(kNvptxTriple);
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (target == nullptr)
    return make_error(Errc::unsupported, "this LLVM has no NVPTX back end: " + err);
  const llvm::CodeGenOpt::Level level = opt_level <= 0   ? llvm::CodeGenOpt::None
                                        : opt_level == 1 ? llvm::CodeGenOpt::Less
                                        : opt_level == 2 ? llvm::CodeGenOpt::Default
                                                         : llvm::CodeGenOpt::Aggressive;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, sm_name(sm), "", llvm::TargetOptions(), std::nullopt, std::nullopt, level));
  if (!tm) return make_error(Errc::internal, "cannot create an NVPTX target machine");
  return tm;
}

bool is_kernel_annotation(const llvm::MDNode* node, const llvm::Function** fn) {
  if (node == nullptr || node->getNumOperands() < 3) return false;
  auto* key = llvm::dyn_cast<llvm::MDString>(node->getOperand(1));
  auto* value = llvm::mdconst::dyn_extract_or_null<llvm::ConstantInt>(node->getOperand(2));
  auto* f = llvm::mdconst::dyn_extract_or_null<llvm::Function>(node->getOperand(0));
  if (key == nullptr || value == nullptr || f == nullptr) return false;
  if (key->getString() != "kernel" || value->isZero()) return false;
  *fn = f;
  return true;
}

std::optional<std::string> kernel_param_type(const llvm::Type* t) {
  // Kernels take device pointers in the global (1) or generic (0) space.
  if (t->isPointerTy()) return std::string("ptr");
  std::optional<AbiType> abi = abi_type_of(t, false);
  if (!abi) return std::nullopt;
  return abi->to_string();
}

Expected<std::vector<GpuKernel>> find_kernels(const llvm::Module& m) {
  std::set<const llvm::Function*> marked;
  for (const llvm::Function& f : m)
    if (f.getCallingConv() == llvm::CallingConv::PTX_Kernel) marked.insert(&f);
  if (const llvm::NamedMDNode* annotations = m.getNamedMetadata("nvvm.annotations"))
    for (const llvm::MDNode* node : annotations->operands()) {
      const llvm::Function* f = nullptr;
      if (is_kernel_annotation(node, &f)) marked.insert(f);
    }
  std::vector<GpuKernel> kernels;
  for (const llvm::Function& f : m) {
    if (!marked.count(&f) || f.isDeclaration()) continue;
    if (!f.getReturnType()->isVoidTy())
      return make_error(Errc::invalid_argument,
                        "kernel '" + f.getName().str() + "' must return void");
    GpuKernel k{f.getName().str(), {}};
    for (const llvm::Argument& arg : f.args()) {
      std::optional<std::string> t = kernel_param_type(arg.getType());
      if (!t || arg.hasByValAttr())
        return make_error(Errc::invalid_argument,
                          "kernel '" + k.name + "' parameter " + std::to_string(arg.getArgNo()) +
                              " has a type fdo cannot pass (integers, float, double and device "
                              "pointers only)");
      k.param_types.push_back(std::move(*t));
    }
    kernels.push_back(std::move(k));
  }
  if (kernels.empty())
    return make_error(Errc::invalid_argument,
                      "the NVPTX module defines no kernel (mark one with the ptx_kernel calling "
                      "convention or a \"kernel\" entry in !nvvm.annotations)");
  return kernels;
}

struct ParsedGpu {
  std::unique_ptr<llvm::Module> module;
  std::string profile_key;
  std::vector<GpuKernel> kernels;
};

Expected<ParsedGpu> parse_gpu(std::string_view bytes, const Limits& limits,
                              llvm::LLVMContext& ctx) {
  FDO_TRY(std::unique_ptr<llvm::Module> m, parse_and_verify(bytes, limits, ctx));
  const llvm::Triple triple(m->getTargetTriple());
  if (!triple.isNVPTX())
    return make_error(Errc::invalid_argument, "the module targets '" + m->getTargetTriple() +
                                                  "', not " + std::string(kNvptxTriple));
  if (triple.getArch() != llvm::Triple::nvptx64)
    return make_error(Errc::invalid_argument,
                      "32-bit NVPTX is not supported: use " + std::string(kNvptxTriple));
  llvm::StripDebugInfo(*m);
  // The architecture is fdo's choice, per device: a front end's per-function
  // target-cpu/-features (clang writes the --cuda-gpu-arch it was given)
  // would override it.
  for (llvm::Function& f : *m) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
  }
  m->setSourceFileName(std::string(kCanonicalSourceName));
  m->setModuleIdentifier(std::string(kCanonicalSourceName));
  FDO_TRY(std::vector<GpuKernel> kernels, find_kernels(*m));
  std::string text;
  {
    llvm::raw_string_ostream os(text);
    m->print(os, nullptr);
  }
  return ParsedGpu{std::move(m), blake3_hex("fdo-gpu-program-v1\n" + text), std::move(kernels)};
}

void set_launch_bounds(llvm::Module& m, const std::map<std::string, LaunchBounds>& bounds) {
  if (bounds.empty()) return;
  llvm::NamedMDNode* annotations = m.getOrInsertNamedMetadata("nvvm.annotations");
  // Drop what the module said for the kernels we bound, then add ours.
  std::vector<llvm::MDNode*> kept;
  for (llvm::MDNode* node : annotations->operands()) {
    bool drop = false;
    if (node->getNumOperands() >= 3)
      if (auto* f = llvm::mdconst::dyn_extract_or_null<llvm::Function>(node->getOperand(0)))
        if (auto* key = llvm::dyn_cast<llvm::MDString>(node->getOperand(1)))
          drop = bounds.count(f->getName().str()) != 0 &&
                 (key->getString().startswith("maxntid") || key->getString() == "minctasm");
    if (!drop) kept.push_back(node);
  }
  annotations->clearOperands();
  for (llvm::MDNode* node : kept)
    annotations->addOperand(node);
  llvm::LLVMContext& ctx = m.getContext();
  auto add = [&](llvm::Function* f, const char* key, int value) {
    llvm::Metadata* ops[] = {
        llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, key),
        llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), value))};
    annotations->addOperand(llvm::MDNode::get(ctx, ops));
  };
  for (const auto& [name, b] : bounds) {
    llvm::Function* f = m.getFunction(name);
    if (f == nullptr) continue; // checked by the caller
    add(f, "maxntidx", b.max_threads);
    if (b.min_blocks_per_sm > 0) add(f, "minctasm", b.min_blocks_per_sm);
  }
}

} // namespace

std::string sm_name(int sm) {
  return "sm_" + std::to_string(sm);
}

Expected<int> ptx_isa_for(int sm) {
  for (const SmIsa& e : kSmIsa)
    if (e.sm == sm) return e.isa;
  return make_error(Errc::unsupported, "LLVM " + std::string(LLVM_VERSION_STRING) +
                                           "'s NVPTX back end does not know " + sm_name(sm));
}

int max_ptx_isa_of_driver(int driver_version) {
  int isa = 0;
  for (const SmIsa& e : kDriverIsa)
    if (e.sm <= driver_version) isa = e.isa;
  return isa;
}

Expected<int> ptx_isa_for(const GpuTarget& target) {
  FDO_TRY(int sm, compile_sm_for(target.sm));
  FDO_TRY(int isa, ptx_isa_for(sm));
  const int loads = max_ptx_isa_of_driver(target.driver_version);
  if (isa > loads)
    return make_error(Errc::unsupported,
                      "the driver (version " + std::to_string(target.driver_version) +
                          ") loads PTX ISA up to " + std::to_string(loads / 10) + "." +
                          std::to_string(loads % 10) + ", and " + sm_name(sm) + " needs " +
                          std::to_string(isa / 10) + "." + std::to_string(isa % 10));
  return isa;
}

Expected<CompilerIdentity> gpu_identity(const GpuTarget& target) {
  FDO_TRY(int isa, ptx_isa_for(target));
  CompilerIdentity id;
  id.llvm_version = LLVM_VERSION_STRING;
  id.fdo_version = std::string(kFdoVersion);
  id.pipeline_version = kPipelineVersion;
  id.triple = std::string(kNvptxTriple);
  id.cpu = sm_name(target.sm);
  id.features = "+ptx" + std::to_string(isa);
  id.driver = std::to_string(target.driver_version);
  return id;
}

bool is_nvptx_program(std::string_view bytes) {
  if (bytes.size() >= 4 && bytes.substr(0, 4) == std::string_view("BC\xC0\xDE", 4)) {
    llvm::LLVMContext ctx;
    auto buffer = llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(bytes.data(), bytes.size()),
                                                   "program", false);
    auto triple = llvm::getBitcodeTargetTriple(buffer->getMemBufferRef());
    if (!triple) {
      llvm::consumeError(triple.takeError());
      return false;
    }
    return llvm::StringRef(*triple).startswith("nvptx");
  }
  // IR text: the `target triple = "..."` line.
  const std::string_view key = "target triple";
  for (std::size_t at = bytes.find(key); at != std::string_view::npos;
       at = bytes.find(key, at + 1)) {
    if (at != 0 && bytes[at - 1] != '\n') continue;
    const std::size_t quote = bytes.find('"', at);
    if (quote == std::string_view::npos) return false;
    return bytes.substr(quote + 1, 5) == "nvptx";
  }
  return false;
}

Expected<GpuAnalysis> analyze_gpu(std::string_view program_bytes, const Limits& limits) {
  ensure_llvm_initialized();
  llvm::LLVMContext ctx;
  FDO_TRY(ParsedGpu p, parse_gpu(program_bytes, limits, ctx));
  return GpuAnalysis{std::move(p.profile_key), std::move(p.kernels)};
}

Expected<GpuCompileResult> compile_gpu(std::string_view program_bytes,
                                       const GpuCompileRequest& request) {
  ensure_llvm_initialized();
  FDO_TRY(int isa, ptx_isa_for(request.target));
  FDO_TRY(int sm, compile_sm_for(request.target.sm));
  if (request.opt_level < 0 || request.opt_level > 3)
    return make_error(Errc::invalid_argument, "opt_level must be 0..3");
  for (const auto& [name, b] : request.launch_bounds)
    if (b.max_threads <= 0 || b.max_threads > 1024 || b.min_blocks_per_sm < 0)
      return make_error(Errc::invalid_argument,
                        "launch bounds of '" + name +
                            "': max_threads must be 1..1024 and min_blocks_per_sm >= 0");
  GpuCompileResult result;
  llvm::LLVMContext ctx;
  DiagnosticCollector diagnostics(ctx);
  auto start = Clock::now();
  FDO_TRY(ParsedGpu p, parse_gpu(program_bytes, request.limits, ctx));
  for (const auto& [name, b] : request.launch_bounds) {
    bool known = false;
    for (const GpuKernel& k : p.kernels)
      known = known || k.name == name;
    if (!known)
      return make_error(Errc::invalid_argument,
                        "launch bounds name '" + name + "', which is not a kernel of the program");
  }
  result.times.parse = micros_since(start);
  FDO_TRY(std::unique_ptr<llvm::TargetMachine> tm, nvptx_target_machine(sm, request.opt_level));
  llvm::Module& m = *p.module;
  m.setDataLayout(tm->createDataLayout());
  set_launch_bounds(m, request.launch_bounds);

  start = Clock::now();
  if (request.opt_level > 0) {
    llvm::PassBuilder pb(tm.get());
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    const llvm::OptimizationLevel level = request.opt_level == 1   ? llvm::OptimizationLevel::O1
                                          : request.opt_level == 2 ? llvm::OptimizationLevel::O2
                                                                   : llvm::OptimizationLevel::O3;
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(level);
    mpm.run(m, mam);
  }
  {
    std::string report;
    llvm::raw_string_ostream os(report);
    if (llvm::verifyModule(m, &os))
      return make_error(Errc::internal, "optimised NVPTX module fails the verifier: " + os.str());
  }
  result.times.optimize = micros_since(start);

  start = Clock::now();
  llvm::SmallVector<char, 0> buffer;
  {
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    pm.add(new llvm::TargetLibraryInfoWrapperPass(llvm::Triple(m.getTargetTriple())));
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile))
      return make_error(Errc::internal, "the NVPTX target cannot emit PTX");
    pm.run(m);
  }
  result.times.codegen = micros_since(start);
  if (!diagnostics.errors().empty()) {
    std::string text;
    for (const std::string& e : diagnostics.errors())
      text += (text.empty() ? "" : "; ") + e;
    return make_error(Errc::compile, "NVPTX codegen: " + text);
  }
  result.ptx.assign(buffer.data(), buffer.size());
  result.profile_key = std::move(p.profile_key);
  result.kernels = std::move(p.kernels);
  result.sm = sm_name(sm);
  result.ptx_isa = isa;
  result.diagnostics = diagnostics.warnings();
  return result;
}

} // namespace fdo::jit
