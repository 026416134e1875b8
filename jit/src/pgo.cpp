#include "pgo.h"

#include "llvm_support.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/ProfileData/InstrProfWriter.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/Path.h>
#include <llvm/Support/Process.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>
#include <map>
#include <optional>
#include <set>
#include <sys/mman.h>
#include <unistd.h>

namespace fdo::jit::detail {

namespace {

llvm::Error make_llvm_error(const llvm::Twine& msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

// The counter array referenced by a __profd_ record's CounterPtr field (a
// pointer, or in LLVM 16 an offset expression `sub(ptrtoint cnts, ptrtoint
// data)`): the global it mentions other than the record itself.
llvm::GlobalVariable* find_counter_global(const llvm::Constant* c, const llvm::GlobalVariable* self,
                                          llvm::SmallPtrSetImpl<const llvm::Constant*>& visited) {
  if (!visited.insert(c).second) return nullptr;
  if (auto* gv = llvm::dyn_cast<llvm::GlobalVariable>(c))
    return gv == self ? nullptr : const_cast<llvm::GlobalVariable*>(gv);
  for (const llvm::Use& op : c->operands())
    if (auto* oc = llvm::dyn_cast<llvm::Constant>(op.get()))
      if (llvm::GlobalVariable* gv = find_counter_global(oc, self, visited)) return gv;
  return nullptr;
}

// Value sites of one kind as indexed-profile value data, targets renamed
// through `rename` (MD5 -> MD5) where listed.
void add_value_sites(llvm::NamedInstrProfRecord& record, std::uint32_t kind,
                     const std::vector<fdo::ValueSite>& sites,
                     const std::map<std::uint64_t, std::uint64_t>& rename) {
  if (sites.empty()) return;
  record.reserveSites(kind, static_cast<std::uint32_t>(sites.size()));
  for (std::size_t i = 0; i < sites.size(); ++i) {
    std::vector<InstrProfValueData> data;
    for (const auto& [value, count] : sites[i]) {
      auto it = rename.find(value);
      data.push_back({it == rename.end() ? value : it->second, count});
    }
    record.addValueData(kind, static_cast<std::uint32_t>(i), data.data(),
                        static_cast<std::uint32_t>(data.size()), nullptr);
  }
}

} // namespace

std::vector<InstrumentedFunction> read_layout(const llvm::Module& m) {
  std::vector<InstrumentedFunction> layout;
  std::map<std::string, std::size_t> index;
  // Value sites per function and kind: the highest site index + 1.
  std::map<std::string, std::array<std::uint32_t, llvm::IPVK_Last + 1>> sites;
  for (const llvm::Function& f : m)
    for (const llvm::BasicBlock& bb : f)
      for (const llvm::Instruction& inst : bb) {
        if (const auto* inc = llvm::dyn_cast<llvm::InstrProfIncrementInst>(&inst)) {
          std::string name = llvm::getPGOFuncNameVarInitializer(inc->getName()).str();
          if (!index.emplace(name, layout.size()).second) continue;
          layout.push_back({name, inc->getHash()->getZExtValue(),
                            static_cast<std::uint32_t>(inc->getNumCounters()->getZExtValue())});
        } else if (const auto* vp = llvm::dyn_cast<llvm::InstrProfValueProfileInst>(&inst)) {
          std::string name = llvm::getPGOFuncNameVarInitializer(vp->getName()).str();
          const std::uint64_t kind = vp->getValueKind()->getZExtValue();
          if (kind > llvm::IPVK_Last) continue;
          auto& n = sites.try_emplace(name).first->second[kind];
          n = std::max<std::uint32_t>(
              n, static_cast<std::uint32_t>(vp->getIndex()->getZExtValue()) + 1);
        }
      }
  for (InstrumentedFunction& f : layout)
    if (auto it = sites.find(f.pgo_name); it != sites.end()) {
      f.indirect_call_sites = it->second[llvm::IPVK_IndirectCallTarget];
      f.memop_sites = it->second[llvm::IPVK_MemOPSize];
    }
  return layout;
}

llvm::Error check_runtime_calls(const llvm::Module& m) {
  // On ELF Linux the lowering emits neither a runtime registration call nor a
  // reference to __llvm_profile_runtime (the compiler-rt runtime is expected
  // to be pulled in by the linker driver, which we do not use). What remains
  // are the value-profiling hooks, which the loader defines (value_profile.h).
  for (const llvm::Function& f : m)
    if (f.isDeclaration() && f.getName().startswith("__llvm_profile_") && !f.use_empty() &&
        f.getName() != INSTR_PROF_VALUE_PROF_FUNC_STR &&
        f.getName() != INSTR_PROF_VALUE_PROF_MEMOP_FUNC_STR)
      return make_llvm_error("instrumentation left a call to the profiling runtime (" +
                             f.getName() + ")");
  return llvm::Error::success();
}

llvm::Error expose_counters(llvm::Module& m, const std::vector<InstrumentedFunction>& layout) {
  std::map<std::uint64_t, std::size_t> by_name_hash;
  for (std::size_t i = 0; i < layout.size(); ++i)
    by_name_hash[llvm::IndexedInstrProf::ComputeHash(layout[i].pgo_name)] = i;

  const std::string data_section =
      llvm::getInstrProfSectionName(llvm::IPSK_data, llvm::Triple::ELF, false);
  std::vector<llvm::GlobalVariable*> counters(layout.size(), nullptr);
  std::vector<llvm::GlobalVariable*> records;
  for (llvm::GlobalVariable& gv : m.globals())
    if (gv.getSection() == data_section) records.push_back(&gv);
  for (llvm::GlobalVariable* gv : records) {
    // __profd_ layout (InstrProfData.inc): {NameRef (MD5 of the PGO name),
    // FuncHash, CounterPtr, ...}.
    auto* init =
        gv->hasInitializer() ? llvm::dyn_cast<llvm::ConstantStruct>(gv->getInitializer()) : nullptr;
    if (!init || init->getNumOperands() < 3) continue;
    auto* name_ref = llvm::dyn_cast<llvm::ConstantInt>(init->getOperand(0));
    if (!name_ref) continue;
    auto it = by_name_hash.find(name_ref->getZExtValue());
    if (it == by_name_hash.end()) continue;
    llvm::SmallPtrSet<const llvm::Constant*, 8> visited;
    counters[it->second] = find_counter_global(init->getOperand(2), gv, visited);
    // The records live in no-deduplicate comdats keyed by the counter name;
    // the object is linked alone, so the groups serve no purpose.
    gv->setComdat(nullptr);
    gv->setName(std::string(kDataPrefix) + std::to_string(it->second));
    gv->setLinkage(llvm::GlobalValue::ExternalLinkage);
    gv->setVisibility(llvm::GlobalValue::DefaultVisibility);
    gv->setDSOLocal(true);
  }
  for (std::size_t i = 0; i < layout.size(); ++i) {
    llvm::GlobalVariable* c = counters[i];
    if (!c)
      return make_llvm_error("counters of " + layout[i].pgo_name +
                             " not found after instrumentation lowering");
    c->setComdat(nullptr);
    c->setName(std::string(kCountersPrefix) + std::to_string(i));
    c->setLinkage(llvm::GlobalValue::ExternalLinkage);
    c->setVisibility(llvm::GlobalValue::DefaultVisibility);
    // Accesses from the module's own code stay PC-relative, not via the GOT.
    c->setDSOLocal(true);
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
write_indexed_profile(const fdo::ProfileDoc& profile, RecordNames names) {
  llvm::InstrProfWriter writer;
  if (llvm::Error e = writer.mergeProfileKind(llvm::InstrProfKind::IRInstrumentation)) return e;
  // Indirect-call targets are MD5s of canonical PGO names; under source
  // names they must name the targets' source names.
  std::map<std::uint64_t, std::uint64_t> rename;
  if (names == RecordNames::source)
    for (const auto& [key, fp] : profile.functions)
      if (!fp.source_name.empty() && fp.source_name != key)
        rename[llvm::IndexedInstrProf::ComputeHash(key)] =
            llvm::IndexedInstrProf::ComputeHash(fp.source_name);
  // Context-sensitive records (their CFG hashes carry LLVM's CS flag) sit
  // beside the ordinary ones; the header then says the profile has them, which
  // CSIRUse requires (llvm-profdata-16 show --showcs lists them).
  if (!profile.cs_functions.empty())
    if (llvm::Error e = writer.mergeProfileKind(llvm::InstrProfKind::ContextSensitive)) return e;
  std::string warning;
  std::size_t records = 0;
  for (const auto* functions : {&profile.functions, &profile.cs_functions})
    for (const auto& [key, fp] : *functions) {
      if (fp.counts.empty()) continue;
      const std::string& name =
          names == RecordNames::source && !fp.source_name.empty() ? fp.source_name : key;
      llvm::NamedInstrProfRecord record(name, fp.cfg_hash, fp.counts);
      add_value_sites(record, llvm::IPVK_IndirectCallTarget, fp.indirect_calls, rename);
      add_value_sites(record, llvm::IPVK_MemOPSize, fp.memop_sizes, {});
      writer.addRecord(std::move(record), 1, [&](llvm::Error e) {
        warning = name + ": " + llvm::toString(std::move(e));
      });
      if (!warning.empty()) return make_llvm_error("profile record " + warning);
      ++records;
    }
  if (records == 0) return nullptr;
  // Records an import kept for functions outside the program count only
  // toward the profile summary InstrProfWriter computes over all records: under
  // canonical names they get a prefix no function of a module has (a ':' after
  // `fdo.outside`), so none is ever looked up; under source names (an export)
  // they are written as the file they came from had them.
  for (const auto& [key, fp] : profile.outside_functions) {
    if (fp.counts.empty()) continue;
    const std::string name = names == RecordNames::source && !fp.source_name.empty()
                                 ? fp.source_name
                                 : std::string(kOutsideRecordPrefix) + key;
    writer.addRecord(llvm::NamedInstrProfRecord(name, fp.cfg_hash, fp.counts), 1,
                     [&](llvm::Error e) { warning = name + ": " + llvm::toString(std::move(e)); });
    if (!warning.empty()) return make_llvm_error("profile record " + warning);
  }
  std::unique_ptr<llvm::MemoryBuffer> indexed = writer.writeBuffer();
  if (!indexed) return make_llvm_error("InstrProfWriter produced no indexed profile");
  return indexed;
}

llvm::Expected<std::optional<ProfileFile>> ProfileFile::write(const fdo::ProfileDoc& profile) {
  auto indexed = write_indexed_profile(profile, RecordNames::canonical);
  if (!indexed) return indexed.takeError();
  if (!*indexed) return std::nullopt;
  auto fail = [](const std::string& what, int err) {
    return llvm::createStringError(std::error_code(err, std::generic_category()),
                                   "indexed profile: " + what + ": " + std::strerror(err));
  };
  fdo::Fd fd(::memfd_create("fdo-profile.profdata", MFD_CLOEXEC));
  if (!fd.valid()) return fail("memfd_create", errno);
  llvm::StringRef bytes = (*indexed)->getBuffer();
  if (auto st = fdo::write_all(fd.get(), std::string_view(bytes.data(), bytes.size())); !st)
    return llvm::createStringError(std::make_error_code(std::errc::io_error),
                                   "indexed profile: " + st.error().describe());
  std::string path = "/proc/self/fd/" + std::to_string(fd.get());
  // LLVM opens the path itself: /proc must be mounted (it is wherever fdod runs).
  if (::access(path.c_str(), R_OK) != 0) return fail("cannot reopen it as " + path, errno);
  return std::optional<ProfileFile>(ProfileFile(std::move(fd), std::move(path)));
}

std::vector<llvm::BranchInst*> conditional_branches(llvm::Function& f) {
  std::vector<llvm::BranchInst*> out;
  for (llvm::BasicBlock& bb : f)
    if (auto* br = llvm::dyn_cast<llvm::BranchInst>(bb.getTerminator()))
      if (br->isConditional()) out.push_back(br);
  return out;
}

void mark_unpredictable(llvm::Module& m, const fdo::ProfileDoc& profile,
                        std::vector<std::string>& warnings) {
  std::map<std::string, llvm::Function*> by_pgo_name;
  for (llvm::Function& f : m)
    if (!f.isDeclaration()) by_pgo_name[llvm::getPGOFuncName(f)] = &f;
  llvm::MDBuilder md(m.getContext());
  for (const auto& [name, fp] : profile.functions) {
    if (fp.unpredictable.empty()) continue;
    auto it = by_pgo_name.find(name);
    if (it == by_pgo_name.end()) {
      warnings.push_back("unpredictable branches listed for unknown function " + name);
      continue;
    }
    std::vector<llvm::BranchInst*> branches = conditional_branches(*it->second);
    for (std::uint32_t index : fp.unpredictable) {
      if (index >= branches.size()) {
        warnings.push_back(name + ": unpredictable branch index " + std::to_string(index) +
                           " out of range (function has " + std::to_string(branches.size()) +
                           " conditional branches)");
        continue;
      }
      branches[index]->setMetadata(llvm::LLVMContext::MD_unpredictable, md.createUnpredictable());
    }
  }
}

} // namespace fdo::jit::detail
