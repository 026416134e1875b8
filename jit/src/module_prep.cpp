#include "module_prep.h"

#include "llvm_support.h"

#include <algorithm>
#include <llvm/ADT/STLExtras.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

namespace fdo::jit::detail {

namespace {

constexpr std::size_t kMaxMessageChars = 4000;

std::string clip(std::string s) {
  if (s.size() > kMaxMessageChars) {
    s.resize(kMaxMessageChars);
    s += " ...";
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

fdo::Status check_limits(const llvm::Module& m, const Limits& limits) {
  if (m.size() > limits.max_functions)
    return fdo::make_error(fdo::Errc::resource_exhausted,
                           "program has " + std::to_string(m.size()) + " functions (limit " +
                               std::to_string(limits.max_functions) + ")");
  std::size_t instructions = 0;
  for (const llvm::Function& f : m)
    instructions += f.getInstructionCount();
  if (instructions > limits.max_instructions)
    return fdo::make_error(fdo::Errc::resource_exhausted,
                           "program has " + std::to_string(instructions) + " instructions (limit " +
                               std::to_string(limits.max_instructions) + ")");
  return fdo::ok();
}

// Module flags that only describe debug info; kept out of the canonical IR
// so that compiling with -g does not change the profile key or the object.
bool is_debug_module_flag(llvm::StringRef key) {
  return key == "Debug Info Version" || key == "Dwarf Version" || key == "CodeView" ||
         key == "CodeViewGHash" || key == "DwarfSplitDebugFilename";
}

void strip_named_metadata(llvm::Module& m) {
  for (llvm::NamedMDNode& node : llvm::make_early_inc_range(m.named_metadata()))
    if (node.getName() != "llvm.module.flags") m.eraseNamedMetadata(&node);
  llvm::NamedMDNode* flags = m.getModuleFlagsMetadata();
  if (!flags) return;
  std::vector<llvm::MDNode*> kept;
  for (llvm::MDNode* op : flags->operands()) {
    auto* key =
        op->getNumOperands() > 1 ? llvm::dyn_cast<llvm::MDString>(op->getOperand(1)) : nullptr;
    if (!key || !is_debug_module_flag(key->getString())) kept.push_back(op);
  }
  flags->clearOperands();
  for (llvm::MDNode* op : kept)
    flags->addOperand(op);
  if (kept.empty()) m.eraseNamedMetadata(flags);
}

// Attributes that pin a function to another CPU than the host: we compile for
// the host CPU recorded in the compiler identity, so they go.
void strip_host_specific_attributes(llvm::Function& f) {
  f.removeFnAttr("target-cpu");
  f.removeFnAttr("target-features");
  f.removeFnAttr("tune-cpu");
  // clang -O0 marks every function optnone+noinline, which would make the
  // daemon's optimisation a no-op. Optimising is the daemon's job.
  if (f.hasFnAttribute(llvm::Attribute::OptimizeNone)) {
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    f.removeFnAttr(llvm::Attribute::NoInline);
  }
}

} // namespace

fdo::Expected<std::unique_ptr<llvm::Module>>
parse_and_verify(std::string_view bytes, const Limits& limits, llvm::LLVMContext& ctx) {
  if (bytes.empty())
    return fdo::make_error(fdo::Errc::invalid_argument,
                           "empty program (0 bytes): expected LLVM IR text or bitcode");
  if (bytes.size() > limits.max_program_bytes)
    return fdo::make_error(fdo::Errc::resource_exhausted,
                           "program is " + std::to_string(bytes.size()) + " bytes (limit " +
                               std::to_string(limits.max_program_bytes) + ")");

  const bool bitcode =
      llvm::isBitcode(reinterpret_cast<const unsigned char*>(bytes.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size());
  // The text lexer finds the end of input at a NUL, so it needs a
  // NUL-terminated copy; getMemBufferCopy provides one.
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(bytes.data(), bytes.size()), "program");
  llvm::SMDiagnostic diag;
  // The host data layout applies from the start: the parser derives the
  // alignment of loads, stores and allocas that do not state one from it.
  const std::string& host_layout = host_target().data_layout;
  llvm::ParserCallbacks callbacks(
      [&host_layout](llvm::StringRef, llvm::StringRef) -> std::optional<std::string> {
        if (host_layout.empty()) return std::nullopt;
        return host_layout;
      });
  std::unique_ptr<llvm::Module> m =
      llvm::parseIR(buffer->getMemBufferRef(), diag, ctx, std::move(callbacks));
  if (!m) {
    if (bitcode || diag.getLineNo() <= 0)
      return fdo::make_error(fdo::Errc::parse, clip(std::string(bitcode ? "bitcode: " : "") +
                                                    diag.getMessage().str()));
    return fdo::make_error(fdo::Errc::parse,
                           clip("line " + std::to_string(diag.getLineNo()) + ", column " +
                                std::to_string(diag.getColumnNo() + 1) + ": " +
                                diag.getMessage().str()));
  }
  FDO_TRY_STATUS(check_limits(*m, limits));

  std::string report;
  llvm::raw_string_ostream os(report);
  bool broken_debug_info = false;
  if (llvm::verifyModule(*m, &os, &broken_debug_info)) {
    os.flush();
    return fdo::make_error(fdo::Errc::verify, clip("verifier: " + report));
  }
  // Broken debug info is no reason to refuse a program: canonicalisation
  // strips all debug info anyway.
  if (broken_debug_info) llvm::StripDebugInfo(*m);
  return m;
}

fdo::Expected<CanonicalNames> canonicalize(llvm::Module& m, const llvm::TargetMachine& tm) {
  for (const llvm::GlobalValue& gv : m.global_values())
    if (!gv.isDeclaration() && !gv.hasLocalLinkage() &&
        gv.getName().startswith(llvm::StringRef(kReservedPrefix.data(), kReservedPrefix.size())))
      return fdo::make_error(fdo::Errc::invalid_argument,
                             "program defines '" + gv.getName().str() + "': names starting with " +
                                 std::string(kReservedPrefix) + " are reserved");

  for (const llvm::GlobalVariable& gv : m.globals())
    if (gv.isThreadLocal())
      return fdo::make_error(fdo::Errc::unsupported,
                             "thread-local variable '" + gv.getName().str() +
                                 "' is not supported (the loader has no TLS runtime)");

  // PGO names as clang gives them to this source (static functions carry the
  // submitted source file name), before the names are made positional.
  std::vector<std::pair<const llvm::Function*, std::string>> submitted_pgo_names;
  for (const llvm::Function& f : m)
    if (!f.isDeclaration()) submitted_pgo_names.emplace_back(&f, llvm::getPGOFuncName(f));

  llvm::StripDebugInfo(m);
  strip_named_metadata(m);
  // Unused declarations (debug intrinsics left by StripDebugInfo, functions
  // declared but never called) change nothing in the object.
  for (llvm::Function& f : llvm::make_early_inc_range(m))
    if (f.isDeclaration() && f.use_empty()) f.eraseFromParent();
  for (llvm::GlobalVariable& gv : llvm::make_early_inc_range(m.globals()))
    if (gv.isDeclaration() && gv.use_empty()) gv.eraseFromParent();
  m.setSourceFileName(llvm::StringRef(kCanonicalSourceName.data(), kCanonicalSourceName.size()));
  m.setModuleIdentifier(llvm::StringRef(kCanonicalSourceName.data(), kCanonicalSourceName.size()));
  m.setTargetTriple(tm.getTargetTriple().str());
  m.setDataLayout(tm.createDataLayout());
  for (llvm::Function& f : m)
    strip_host_specific_attributes(f);

  // Local symbols get positional names, so that two programs that differ only
  // in the names of their static functions and globals share one canonical
  // IR: the same profile key, the same PGO names, the same object. Clearing
  // every name first keeps the new names free of collisions with old ones.
  std::vector<std::pair<llvm::GlobalValue*, std::string>> locals;
  auto collect = [&](llvm::GlobalValue& gv) {
    if (gv.hasLocalLinkage()) locals.emplace_back(&gv, gv.getName().str());
  };
  for (llvm::GlobalVariable& gv : m.globals())
    collect(gv);
  for (llvm::Function& f : m)
    collect(f);
  for (llvm::GlobalAlias& a : m.aliases())
    collect(a);
  for (llvm::GlobalIFunc& i : m.ifuncs())
    collect(i);
  for (auto& [gv, original] : locals)
    gv->setName("");
  CanonicalNames names;
  std::size_t index = 0;
  for (auto& [gv, original] : locals) {
    gv->setName(std::string(kLocalPrefix) + std::to_string(index++));
    if (!original.empty()) names.local_names.emplace(gv->getName().str(), original);
  }
  // Unused declarations were erased above, definitions never are.
  for (auto& [f, submitted] : submitted_pgo_names)
    names.source_names.emplace(llvm::getPGOFuncName(*f), std::move(submitted));
  return names;
}

std::optional<AbiType> abi_type_of(const llvm::Type* type, bool is_return) {
  if (type->isVoidTy()) {
    if (is_return) return AbiType{AbiKind::void_, 0};
    return std::nullopt;
  }
  if (type->isIntegerTy()) {
    unsigned bits = type->getIntegerBitWidth();
    if (bits >= 1 && bits <= 64) return AbiType{AbiKind::integer, bits};
    return std::nullopt;
  }
  if (type->isFloatTy()) return AbiType{AbiKind::f32, 32};
  if (type->isDoubleTy()) return AbiType{AbiKind::f64, 64};
  if (type->isPointerTy() && type->getPointerAddressSpace() == 0) return AbiType{AbiKind::ptr, 64};
  return std::nullopt;
}

std::vector<EntryInfo> find_entries(const llvm::Module& m) {
  std::vector<EntryInfo> entries;
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() || !f.hasExternalLinkage() || f.isVarArg() || f.isIntrinsic()) continue;
    if (f.getName().startswith(llvm::StringRef(kReservedPrefix.data(), kReservedPrefix.size())))
      continue;
    std::optional<AbiType> ret = abi_type_of(f.getReturnType(), true);
    if (!ret) continue;
    EntryInfo entry;
    entry.name = f.getName().str();
    entry.return_type = ret->to_string();
    entry.return_signext = f.getAttributes().hasRetAttr(llvm::Attribute::SExt);
    bool supported = true;
    for (const llvm::Argument& arg : f.args()) {
      std::optional<AbiType> t = abi_type_of(arg.getType(), false);
      // inalloca/preallocated arguments live in the caller's frame in a way
      // an argument array cannot express.
      if (!t || arg.hasInAllocaAttr() || arg.hasPreallocatedAttr() || arg.hasSwiftErrorAttr()) {
        supported = false;
        break;
      }
      entry.param_types.push_back(t->to_string());
    }
    if (supported) entries.push_back(std::move(entry));
  }
  return entries;
}

} // namespace fdo::jit::detail
