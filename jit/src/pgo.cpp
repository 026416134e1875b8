#include "pgo.h"

#include "llvm_support.h"

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/Analysis/ProfileSummaryInfo.h>
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
#include <llvm/Transforms/Instrumentation.h>
#include <llvm/Transforms/Instrumentation/InstrProfiling.h>
#include <llvm/Transforms/Instrumentation/PGOInstrumentation.h>
#include <map>
#include <set>

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

// Removes the file on scope exit.
class TempFile {
public:
  static llvm::Expected<TempFile> create(const std::string& dir) {
    int fd = -1;
    llvm::SmallString<256> path;
    std::error_code ec;
    if (dir.empty()) {
      ec = llvm::sys::fs::createTemporaryFile("fdo-profile", "profdata", fd, path);
    } else {
      llvm::SmallString<256> model(dir);
      llvm::sys::path::append(model, "fdo-profile-%%%%%%%%%%%%.profdata");
      ec = llvm::sys::fs::createUniqueFile(model, fd, path);
    }
    if (ec)
      return llvm::createStringError(ec, "cannot create the indexed profile file in '" +
                                             (dir.empty() ? std::string("temp dir") : dir) +
                                             "': " + ec.message());
    return TempFile(fd, path.str().str());
  }
  TempFile(TempFile&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
    o.fd_ = -1;
    o.path_.clear();
  }
  TempFile& operator=(TempFile&&) = delete;
  ~TempFile() {
    if (fd_ >= 0) llvm::sys::Process::SafelyCloseFileDescriptor(fd_);
    if (!path_.empty()) llvm::sys::fs::remove(path_);
  }
  const std::string& path() const { return path_; }

  llvm::Error write_and_close(llvm::StringRef bytes) {
    llvm::raw_fd_ostream os(fd_, /*shouldClose=*/true);
    fd_ = -1;
    os << bytes;
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      return llvm::createStringError(ec, "cannot write " + path_ + ": " + ec.message());
    }
    return llvm::Error::success();
  }

private:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

} // namespace

llvm::Expected<std::vector<InstrumentedFunction>> instrument(llvm::Module& m,
                                                             llvm::ModuleAnalysisManager& mam) {
  {
    llvm::ModulePassManager mpm;
    mpm.addPass(llvm::PGOInstrumentationGen());
    mpm.run(m, mam);
  }

  std::vector<InstrumentedFunction> layout;
  std::set<std::string> seen;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (auto* inc = llvm::dyn_cast<llvm::InstrProfIncrementInst>(&inst)) {
          std::string name = llvm::getPGOFuncNameVarInitializer(inc->getName()).str();
          if (!seen.insert(name).second) continue;
          layout.push_back({name, inc->getHash()->getZExtValue(),
                            static_cast<std::uint32_t>(inc->getNumCounters()->getZExtValue())});
        }

  {
    // On ELF Linux the lowering emits neither a runtime registration call
    // nor a reference to __llvm_profile_runtime (the compiler-rt runtime is
    // expected to be pulled in by the linker driver, which we do not use),
    // and with value profiling disabled no runtime calls remain: the object
    // links without compiler-rt.
    llvm::InstrProfOptions options;
    // Counters updated in a loop are kept in registers and written back at
    // the loop exits (as clang does at -O1 and above): exact whenever the
    // entry returns, which is when the exec worker reads them.
    options.DoCounterPromotion = true;
    options.Atomic = false; // one thread per exec worker
    llvm::ModulePassManager mpm;
    mpm.addPass(llvm::InstrProfiling(options, /*IsCS=*/false));
    mpm.run(m, mam);
  }
  for (llvm::Function& f : m)
    if (f.isDeclaration() && f.getName().startswith("__llvm_profile_") && !f.use_empty())
      return make_llvm_error("instrumentation left a call to the profiling runtime (" +
                             f.getName() + ")");
  return layout;
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
write_indexed_profile(const fdo::ProfileDoc& profile) {
  llvm::InstrProfWriter writer;
  if (llvm::Error e = writer.mergeProfileKind(llvm::InstrProfKind::IRInstrumentation)) return e;
  std::string warning;
  std::size_t records = 0;
  for (const auto& [name, fp] : profile.functions) {
    if (fp.counts.empty()) continue;
    writer.addRecord(llvm::NamedInstrProfRecord(name, fp.cfg_hash, fp.counts), 1,
                     [&](llvm::Error e) { warning = name + ": " + llvm::toString(std::move(e)); });
    if (!warning.empty()) return make_llvm_error("profile record " + warning);
    ++records;
  }
  if (records == 0) return nullptr;
  std::unique_ptr<llvm::MemoryBuffer> indexed = writer.writeBuffer();
  if (!indexed) return make_llvm_error("InstrProfWriter produced no indexed profile");
  return indexed;
}

llvm::Expected<bool> apply_profile(llvm::Module& m, llvm::ModuleAnalysisManager& mam,
                                   const fdo::ProfileDoc& profile, const std::string& temp_dir) {
  auto indexed = write_indexed_profile(profile);
  if (!indexed) return indexed.takeError();
  if (!*indexed) return false;
  llvm::Expected<TempFile> file = TempFile::create(temp_dir);
  if (!file) return file.takeError();
  if (llvm::Error e = file->write_and_close((*indexed)->getBuffer())) return e;

  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::PGOInstrumentationUse(file->path()));
  // As clang's pipeline does: compute the summary now so later function and
  // CGSCC passes can query it.
  mpm.addPass(llvm::RequireAnalysisPass<llvm::ProfileSummaryAnalysis, llvm::Module>());
  mpm.run(m, mam);
  return true;
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
