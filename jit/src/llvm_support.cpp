#include "llvm_support.h"

#include <algorithm>
#include <llvm/ADT/StringMap.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <mutex>

namespace fdo::jit::detail {

namespace {

HostTarget compute_host_target() {
  HostTarget host;
  host.triple = llvm::Triple::normalize(llvm::sys::getProcessTriple());
  host.cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features;
  std::vector<std::string> parts;
  if (llvm::sys::getHostCPUFeatures(features)) {
    for (const auto& f : features) {
      std::string part(1, f.getValue() ? '+' : '-');
      part.append(f.getKey().data(), f.getKey().size());
      parts.push_back(std::move(part));
    }
    // StringMap iteration order is hash order; the identity must be stable.
    std::sort(parts.begin(), parts.end(),
              [](const std::string& a, const std::string& b) { return a.substr(1) < b.substr(1); });
  }
  for (const std::string& p : parts) {
    if (!host.features.empty()) host.features += ',';
    host.features += p;
  }
  std::string err;
  if (const llvm::Target* target = llvm::TargetRegistry::lookupTarget(host.triple, err)) {
    std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
        host.triple, host.cpu, host.features, llvm::TargetOptions(), llvm::Reloc::PIC_));
    if (tm) host.data_layout = tm->createDataLayout().getStringRepresentation();
  }
  return host;
}

} // namespace

void ensure_llvm_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    // No cl::opt is set: libLLVM's options are process-wide, and everything
    // is configured through pass option structs. Value profiling is on
    // (LLVM's default): the loader provides its runtime hooks.
  });
}

const HostTarget& host_target() {
  ensure_llvm_initialized();
  static const HostTarget host = compute_host_target();
  return host;
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
create_host_target_machine(llvm::CodeGenOpt::Level level) {
  const HostTarget& host = host_target();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(host.triple, err);
  if (!target)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no LLVM target for " + host.triple + ": " + err);
  llvm::TargetOptions options;
  // PIC + small code model: the object is linked by JITLink anywhere in the
  // address space, and libc/libm lie farther than +-2 GiB away; PIC routes
  // those references through GOT/PLT entries that JITLink synthesises.
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(host.triple, host.cpu, host.features, options, llvm::Reloc::PIC_,
                                  llvm::CodeModel::Small, level));
  if (!tm)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot create a target machine for " + host.triple);
  return tm;
}

fdo::Error to_fdo_error(llvm::Error err, fdo::Errc code, std::string_view context) {
  std::string msg = llvm::toString(std::move(err));
  if (!context.empty()) msg = std::string(context) + ": " + msg;
  return fdo::Error(code, std::move(msg));
}

DiagnosticCollector::DiagnosticCollector(llvm::LLVMContext& ctx) : ctx_(ctx) {
  ctx_.setDiagnosticHandlerCallBack(&DiagnosticCollector::handle, this);
}

DiagnosticCollector::~DiagnosticCollector() {
  ctx_.setDiagnosticHandlerCallBack(nullptr, nullptr);
  for (llvm::LLVMContext* other : others_)
    other->setDiagnosticHandlerCallBack(nullptr, nullptr);
}

void DiagnosticCollector::also_collect(llvm::LLVMContext& other) {
  other.setDiagnosticHandlerCallBack(&DiagnosticCollector::handle, this);
  others_.push_back(&other);
}

void DiagnosticCollector::handle(const llvm::DiagnosticInfo& info, void* self) {
  auto* collector = static_cast<DiagnosticCollector*>(self);
  if (info.getSeverity() != llvm::DS_Error && info.getSeverity() != llvm::DS_Warning) return;
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::DiagnosticPrinterRawOStream printer(os);
  info.print(printer);
  os.flush();
  if (info.getSeverity() == llvm::DS_Error)
    collector->errors_.push_back(std::move(text));
  else
    collector->warnings_.push_back(std::move(text));
}

} // namespace fdo::jit::detail
