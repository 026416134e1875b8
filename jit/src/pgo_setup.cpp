#include "pgo_setup.h"

#include <llvm/ProfileData/InstrProf.h>

namespace fdo::jit::detail {

// LLVM's CS flag and ours (util has no LLVM) must be the same bit.
static_assert(fdo::kCsHashFlag ==
              (std::uint64_t{1} << llvm::NamedInstrProfRecord::CS_FLAG_IN_FUNC_HASH));

namespace {
// CSIRInstr stores this as __llvm_profile_filename in the module, where
// compiler-rt would read it; nothing reads it here (the exec worker reads the
// counters in place), but LLVM wants a name, and a fixed one keeps objects
// deterministic.
constexpr const char* kCsProfileGenName = "fdo-cs.profraw";

bool has_counts(const std::map<std::string, FunctionProfile>& functions) {
  for (const auto& [name, f] : functions)
    if (!f.counts.empty()) return true;
  return false;
}
} // namespace

bool instruments(CompileMode mode) {
  return mode == CompileMode::instrumented || mode == CompileMode::cs_instrumented;
}

bool has_cs_counts(const ProfileDoc& profile) {
  return has_counts(profile.cs_functions);
}

llvm::Expected<PgoSetup> pgo_setup(CompileMode mode, const ProfileDoc* profile,
                                   std::vector<std::string>& warnings) {
  PgoSetup setup;
  switch (mode) {
  case CompileMode::plain:
    return setup;
  case CompileMode::instrumented:
    setup.options = llvm::PGOOptions("", "", "", llvm::PGOOptions::IRInstr);
    return setup;
  case CompileMode::optimized:
  case CompileMode::cs_instrumented:
    break;
  }
  auto file = ProfileFile::write(*profile);
  if (!file) return file.takeError();
  if (*file) setup.file.emplace(std::move(**file));
  const bool cs_gen = mode == CompileMode::cs_instrumented;
  if (!setup.file) {
    warnings.push_back("the profile holds no counts; compiled without profile data");
    // Context-sensitive counters can still be gathered over the plain -O
    // pipeline (LLVM allows CSIRInstr without IRUse).
    if (cs_gen)
      setup.options = llvm::PGOOptions("", kCsProfileGenName, "", llvm::PGOOptions::NoAction,
                                       llvm::PGOOptions::CSIRInstr);
    return setup;
  }
  llvm::PGOOptions::CSPGOAction cs = llvm::PGOOptions::NoCSAction;
  if (cs_gen)
    cs = llvm::PGOOptions::CSIRInstr;
  else if (has_cs_counts(*profile))
    cs = llvm::PGOOptions::CSIRUse; // reads the same file: its CS records
  setup.options = llvm::PGOOptions(setup.file->path(), cs_gen ? kCsProfileGenName : "", "",
                                   llvm::PGOOptions::IRUse, cs);
  return setup;
}

} // namespace fdo::jit::detail
