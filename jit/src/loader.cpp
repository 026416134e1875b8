#include "fdo/jit/loader.h"

#include "code_layout.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/log.h"
#include "llvm_support.h"
#include "near_memory.h"
#include "value_profile.h"

#include <algorithm>
#include <cstring>
#include <llvm/ADT/StringSet.h>
#include <llvm/ExecutionEngine/JITLink/EHFrameSupport.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/ObjectFileInterface.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/Shared/AllocationActions.h>
#include <llvm/ExecutionEngine/Orc/Shared/WrapperFunctionUtils.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <mutex>
#include <set>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>

// glibc: runs (and forgets) the __cxa_atexit registrations made with this
// DSO handle, as dlclose does.
extern "C" void __cxa_finalize(void* dso_handle);

namespace fdo::jit {

using namespace detail;
namespace orc = llvm::orc;

namespace {

// A deallocation action that does nothing. LLVM 16's InProcessMemoryManager
// only unmaps an allocation's memory while running its deallocation actions,
// so an allocation without any is never unmapped (fixed in later LLVM).
// Giving every graph this one makes unload return the code and data pages.
llvm::orc::shared::CWrapperFunctionResult noop_dealloc_action(const char* data, std::size_t size) {
  using namespace llvm::orc::shared;
  return WrapperFunction<SPSError()>::handle(data, size, []() { return llvm::Error::success(); })
      .release();
}

// The symbols of a program's object that ORC tracks by name: the entry
// thunks and the structor hooks, the only ones the loader looks up. Every
// other global of the object is linked as a local symbol (program.o is
// self-contained), so ORC's per-symbol dependency tracking, quadratic in
// LLVM 16 (JITDylib::transferEmittedNodeDependencies), stays small: with a
// counter and a data record named per function it took seconds per link
// for an instrumented program of ~1,000 functions.
bool exported_by_name(llvm::StringRef name) {
  return name.startswith(llvm::StringRef(kThunkPrefix.data(), kThunkPrefix.size())) ||
         name == llvm::StringRef(kInitName.data(), kInitName.size()) ||
         name == llvm::StringRef(kFiniName.data(), kFiniName.size()) ||
         name == llvm::StringRef(kDsoHandleName.data(), kDsoHandleName.size());
}

// The graph's named symbols the loader reads by address (counters and value
// data records), found in the graph since they are not exported.
bool located_in_graph(llvm::StringRef name) {
  return name.startswith(llvm::StringRef(kCountersPrefix.data(), kCountersPrefix.size())) ||
         name.startswith(llvm::StringRef(kDataPrefix.data(), kDataPrefix.size())) ||
         name.startswith(llvm::StringRef(kArgSlotsPrefix.data(), kArgSlotsPrefix.size()));
}

// What a link tells the loader about the program it placed.
struct LinkFacts {
  std::vector<FunctionRange> ranges;
  std::unordered_map<std::string, std::uint64_t> symbols; // located_in_graph names
  std::vector<WritableBlock> writable;
};

// Per linked graph: makes the object's globals local but for the exported
// ones, records where every function ended up, the counters and data records
// and the writable blocks (after fixups, when addresses are final), and adds
// the no-op deallocation action.
class LinkPlugin : public orc::ObjectLinkingLayer::Plugin {
public:
  void modifyPassConfig(orc::MaterializationResponsibility& mr, llvm::jitlink::LinkGraph&,
                        llvm::jitlink::PassConfiguration& config) override {
    // First of all (before ORC claims weak definitions it was not told
    // about): globals the loader did not declare to ORC for this object
    // (read_object_set: the exported names, and in an object set the symbols
    // another object of the set refers to) become local, and stay live as the
    // exported symbols they were would have.
    llvm::StringSet<> declared;
    for (const auto& [name, flags] : mr.getSymbols())
      declared.insert(*name);
    config.PrePrunePasses.insert(
        config.PrePrunePasses.begin(),
        [declared = std::move(declared)](llvm::jitlink::LinkGraph& g) -> llvm::Error {
          for (llvm::jitlink::Symbol* sym : g.defined_symbols())
            if (sym->hasName() && sym->getScope() != llvm::jitlink::Scope::Local &&
                !declared.contains(sym->getName())) {
              sym->setScope(llvm::jitlink::Scope::Local);
              sym->setLive(true);
            }
          return llvm::Error::success();
        });
    config.PostPrunePasses.push_back([](llvm::jitlink::LinkGraph& g) -> llvm::Error {
      auto dealloc =
          llvm::orc::shared::WrapperFunctionCall::Create<llvm::orc::shared::SPSArgList<>>(
              llvm::orc::ExecutorAddr::fromPtr(&noop_dealloc_action));
      if (!dealloc) return dealloc.takeError();
      g.allocActions().push_back({llvm::orc::shared::WrapperFunctionCall(), std::move(*dealloc)});
      return llvm::Error::success();
    });
    // Keep every named function's symbol through dead-stripping: a call to a
    // local function is often relocated against its section, which leaves the
    // local symbol unreferenced, so pruning would drop its name and size and
    // samples in it could not be attributed (docs/perf.md).
    config.PrePrunePasses.push_back([](llvm::jitlink::LinkGraph& g) -> llvm::Error {
      for (llvm::jitlink::Symbol* sym : g.defined_symbols())
        if (sym->isCallable() && sym->hasName() && sym->getSize() > 0) sym->setLive(true);
      return llvm::Error::success();
    });
    // Hot text first, cold text last (code_layout.h), as a static linker's
    // script would place .text.hot and .text.unlikely.
    config.PostPrunePasses.push_back(order_text_sections);
    orc::JITDylib* jd = &mr.getTargetJITDylib();
    // Then the program's text offset (Knobs::text_offset), after the
    // ordering so that it moves the text as it will be laid out.
    if (int offset = text_offset(jd); offset != 0)
      config.PostPrunePasses.push_back(
          [offset](llvm::jitlink::LinkGraph& g) { return offset_text(g, offset); });
    config.PostFixupPasses.push_back([this, jd](llvm::jitlink::LinkGraph& g) -> llvm::Error {
      LinkFacts found;
      for (llvm::jitlink::Symbol* sym : g.defined_symbols()) {
        if (!sym->hasName()) continue;
        if (sym->isCallable() && sym->getSize() > 0)
          found.ranges.push_back(
              {sym->getName().str(), sym->getAddress().getValue(), sym->getSize()});
        else if (located_in_graph(sym->getName()))
          found.symbols.emplace(sym->getName().str(), sym->getAddress().getValue());
      }
      // The program's writable memory, to put back its initial contents
      // between executions (LoadedProgram::restart). Memory freed once the
      // link is finalized is not the program's.
      for (llvm::jitlink::Section& sec : g.sections()) {
        if ((static_cast<unsigned>(sec.getMemProt()) &
             static_cast<unsigned>(orc::MemProt::Write)) == 0 ||
            sec.getMemDeallocPolicy() != orc::MemDeallocPolicy::Standard)
          continue;
        for (llvm::jitlink::Block* b : sec.blocks())
          if (b->getSize() > 0)
            found.writable.push_back({b->getAddress().getValue(), b->getSize(), b->isZeroFill()});
      }
      std::lock_guard lock(mu_);
      LinkFacts& facts = facts_[jd];
      facts.ranges.insert(facts.ranges.end(), found.ranges.begin(), found.ranges.end());
      facts.symbols.merge(found.symbols);
      facts.writable.insert(facts.writable.end(), found.writable.begin(), found.writable.end());
      return llvm::Error::success();
    });
  }
  llvm::Error notifyFailed(orc::MaterializationResponsibility&) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(orc::JITDylib& jd, orc::ResourceKey) override {
    std::lock_guard lock(mu_);
    facts_.erase(&jd);
    offsets_.erase(&jd);
    return llvm::Error::success();
  }
  void notifyTransferringResources(orc::JITDylib&, orc::ResourceKey, orc::ResourceKey) override {}

  // Where the objects linked into `jd` start their text (before they are added).
  void set_text_offset(orc::JITDylib* jd, int offset) {
    std::lock_guard lock(mu_);
    if (offset == 0)
      offsets_.erase(jd);
    else
      offsets_[jd] = offset;
  }
  int text_offset(orc::JITDylib* jd) {
    std::lock_guard lock(mu_);
    auto it = offsets_.find(jd);
    return it == offsets_.end() ? 0 : it->second;
  }

  // Also forgets the dylib's text offset: taken once its object is linked
  // (or failed to), when the offset has done its work.
  LinkFacts take(orc::JITDylib* jd) {
    std::lock_guard lock(mu_);
    offsets_.erase(jd);
    auto it = facts_.find(jd);
    if (it == facts_.end()) return {};
    LinkFacts out = std::move(it->second);
    facts_.erase(it);
    return out;
  }

private:
  std::mutex mu_;
  std::map<orc::JITDylib*, LinkFacts> facts_;
  std::map<orc::JITDylib*, int> offsets_;
};

// Link failures inside ORC reach the session's error reporter (the lookup
// that triggered the link only learns that materialisation failed).
struct LinkErrors {
  std::mutex mu;
  std::vector<std::string> missing_symbols;
  std::vector<std::string> messages;

  void add(llvm::Error err) {
    std::lock_guard lock(mu);
    llvm::handleAllErrors(
        std::move(err),
        [&](const orc::SymbolsNotFound& e) {
          for (const orc::SymbolStringPtr& s : e.getSymbols())
            missing_symbols.push_back((*s).str());
        },
        [&](const orc::FailedToMaterialize&) {
          // Only says which of our symbols could not be built; the cause is
          // reported separately.
        },
        [&](const llvm::ErrorInfoBase& e) { messages.push_back(e.message()); });
  }
  void clear() {
    std::lock_guard lock(mu);
    missing_symbols.clear();
    messages.clear();
  }
  fdo::Error to_error(const std::string& fallback) {
    std::lock_guard lock(mu);
    std::sort(missing_symbols.begin(), missing_symbols.end());
    missing_symbols.erase(std::unique(missing_symbols.begin(), missing_symbols.end()),
                          missing_symbols.end());
    if (!missing_symbols.empty()) {
      std::string names;
      for (const std::string& s : missing_symbols)
        names += (names.empty() ? "" : ", ") + s;
      return make_error(Errc::link,
                        std::string(missing_symbols.size() == 1 ? "unresolved symbol: "
                                                                : "unresolved symbols: ") +
                            names);
    }
    std::string text;
    for (const std::string& m : messages)
      text += (text.empty() ? "" : "; ") + m;
    return make_error(Errc::link, "cannot link program: " + (text.empty() ? fallback : text));
  }
};

// One object of a program's output, as the loader hands it to ORC.
struct ObjectPart {
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  // The symbols ORC is told of (and the link plugin keeps global).
  orc::MaterializationUnit::Interface declared;
};

// The names `object` refers to without defining them.
Expected<std::vector<std::string>> undefined_names(llvm::MemoryBufferRef object) {
  auto file = llvm::object::ObjectFile::createObjectFile(object);
  if (!file) return to_fdo_error(file.takeError(), Errc::corrupt, "object");
  std::vector<std::string> out;
  for (const llvm::object::SymbolRef& sym : (*file)->symbols()) {
    auto flags = sym.getFlags();
    if (!flags) return to_fdo_error(flags.takeError(), Errc::corrupt, "object");
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined)) continue;
    auto name = sym.getName();
    if (!name) return to_fdo_error(name.takeError(), Errc::corrupt, "object");
    if (!name->empty()) out.push_back(name->str());
  }
  return out;
}

// The objects of a program's output (one, or an object set: object_set.h)
// and what ORC is told each defines: the names the loader looks up
// (exported_by_name) and, in a set, the names another object of the set
// refers to. Every other global is made local by the link plugin, so ORC
// tracks few symbols (see exported_by_name). An object of a set that
// nothing else refers to still declares one symbol, so the lookup links it.
Expected<std::vector<ObjectPart>> read_object_set(orc::ExecutionSession& es,
                                                  std::string_view object) {
  FDO_TRY(std::vector<std::string_view> views, unpack_objects(object));
  std::vector<ObjectPart> parts;
  std::vector<orc::MaterializationUnit::Interface> defined;
  llvm::StringSet<> wanted_elsewhere;
  for (std::size_t i = 0; i < views.size(); ++i) {
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
        llvm::StringRef(views[i].data(), views[i].size()),
        views.size() == 1 ? "program.o" : "program." + std::to_string(i) + ".o");
    auto iface = orc::getObjectFileInterface(es, buffer->getMemBufferRef());
    if (!iface) return to_fdo_error(iface.takeError(), Errc::corrupt, "object");
    if (views.size() > 1) {
      FDO_TRY(std::vector<std::string> refs, undefined_names(buffer->getMemBufferRef()));
      for (std::string& r : refs)
        wanted_elsewhere.insert(r);
    }
    parts.push_back({std::move(buffer), {}});
    defined.push_back(std::move(*iface));
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    orc::MaterializationUnit::Interface& declared = parts[i].declared;
    declared.InitSymbol = defined[i].InitSymbol;
    for (const auto& [name, flags] : defined[i].SymbolFlags)
      if (name == defined[i].InitSymbol || exported_by_name(*name) ||
          wanted_elsewhere.contains(*name))
        declared.SymbolFlags[name] = flags;
    if (parts.size() > 1 && declared.SymbolFlags.empty() && !defined[i].SymbolFlags.empty()) {
      auto anchor = defined[i].SymbolFlags.begin();
      declared.SymbolFlags[anchor->first] = anchor->second;
    }
  }
  // An object that defines nothing global cannot be reached from the
  // others (an empty part of a set): nothing to link.
  if (parts.size() > 1)
    for (std::size_t i = parts.size(); i-- > 0;)
      if (parts[i].declared.SymbolFlags.empty()) parts.erase(parts.begin() + i);
  return parts;
}

} // namespace

struct Loader::Impl {
  LoaderOptions options;
  std::unique_ptr<orc::ExecutionSession> es;
  std::unique_ptr<orc::ObjectLinkingLayer> layer;
  LinkPlugin* plugin = nullptr; // owned by layer
  LinkErrors errors;
  std::set<LoadedProgram*> live;
  std::uint64_t next_id = 0;

  ~Impl() {
    if (es)
      if (llvm::Error e = es->endSession())
        log::warning("jit loader: ending the ORC session: " + llvm::toString(std::move(e)));
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() {
  // Programs still loaded are unloaded here, so they never point into a
  // destroyed session.
  std::vector<LoadedProgram*> live(impl_->live.begin(), impl_->live.end());
  for (LoadedProgram* p : live)
    if (Status s = p->unload(); !s) log::warning("jit loader: " + s.error().describe());
}

Expected<std::unique_ptr<Loader>> Loader::create(LoaderOptions options) {
  ensure_llvm_initialized();
  auto impl = std::make_unique<Impl>();
  for (const SymbolOverride& o : options.overrides)
    if (o.name.empty() || o.address == nullptr)
      return make_error(Errc::invalid_argument,
                        "loader: a symbol override needs a name and an address");
  impl->options = std::move(options);
  auto epc = orc::SelfExecutorProcessControl::Create();
  if (!epc) return to_fdo_error(epc.takeError(), Errc::internal, "ORC executor");
  impl->es = std::make_unique<orc::ExecutionSession>(std::move(*epc));
  Impl* raw = impl.get();
  impl->es->setErrorReporter([raw](llvm::Error e) { raw->errors.add(std::move(e)); });
  // Each graph mapped just below the executable that calls into it
  // (near_memory.h).
  impl->layer = std::make_unique<orc::ObjectLinkingLayer>(
      *impl->es, std::make_unique<detail::NearMemoryManager>());
  // Unwind tables, so C++ exceptions and debuggers/profilers can walk
  // through JIT'd frames.
  impl->layer->addPlugin(std::make_unique<orc::EHFrameRegistrationPlugin>(
      *impl->es, std::make_unique<llvm::jitlink::InProcessEHFrameRegistrar>()));
  auto plugin = std::make_unique<LinkPlugin>();
  impl->plugin = plugin.get();
  impl->layer->addPlugin(std::move(plugin));
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Expected<std::unique_ptr<LoadedProgram>> Loader::load(std::string_view object,
                                                      const CompileResult& metadata) {
  FDO_TRY(std::unique_ptr<LoadedProgram> program,
          load(object, metadata.entries, metadata.counters_layout, metadata.text_offset));
  // The block map's offsets are from each symbol's start, so it holds at
  // whatever address this link put the code.
  std::map<std::string_view, const FunctionBlocks*> by_symbol;
  for (const FunctionBlocks& fb : metadata.block_map)
    by_symbol.emplace(fb.symbol, &fb);
  for (FunctionRange& r : program->ranges_)
    if (auto it = by_symbol.find(r.name); it != by_symbol.end()) r.blocks = it->second->ranges;
  return program;
}

Expected<std::unique_ptr<LoadedProgram>> Loader::load(std::string_view object,
                                                      std::span<const EntryInfo> entries,
                                                      std::span<const InstrumentedFunction> layout,
                                                      int text_offset) {
  if (object.empty()) return make_error(Errc::invalid_argument, "empty object");
  if (!valid_text_offset(text_offset))
    return make_error(Errc::invalid_argument,
                      "text offset " + std::to_string(text_offset) + " is not 0, 16, 32 or 48");
  orc::ExecutionSession& es = *impl_->es;
  FDO_TRY(std::vector<ObjectPart> parts, read_object_set(es, object));

  orc::JITDylib& jd = es.createBareJITDylib("fdo-program-" + std::to_string(impl_->next_id++));
  auto remove_dylib = [&] {
    if (llvm::Error e = es.removeJITDylib(jd)) llvm::consumeError(std::move(e));
    impl_->plugin->take(&jd);
  };
  auto generator = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess('\0');
  if (!generator) {
    remove_dylib();
    return to_fdo_error(generator.takeError(), Errc::internal, "process symbols");
  }
  jd.addGenerator(std::move(*generator));
  {
    // What compiler-rt's profile runtime would provide to instrumented code.
    orc::SymbolMap hooks;
    for (const RuntimeHook& h : value_profile_hooks())
      hooks[es.intern(h.name)] = llvm::JITEvaluatedSymbol(
          h.address, llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    // Defined in the program's own dylib, so they are found before the
    // process's symbols (the generator only answers what is not defined).
    for (const SymbolOverride& o : impl_->options.overrides)
      hooks[es.intern(o.name)] = llvm::JITEvaluatedSymbol(
          static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(o.address)),
          llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    if (llvm::Error e = jd.define(orc::absoluteSymbols(std::move(hooks)))) {
      remove_dylib();
      return to_fdo_error(std::move(e), Errc::internal, "profiling hooks");
    }
  }

  impl_->plugin->set_text_offset(&jd, text_offset);
  impl_->errors.clear();
  // Look up every symbol ORC tracks: that links every object now (so link
  // errors surface here, not at a later call) and yields the thunks'
  // addresses.
  orc::SymbolLookupSet wanted;
  for (ObjectPart& part : parts) {
    for (const auto& [name, flags] : part.declared.SymbolFlags)
      wanted.add(name, orc::SymbolLookupFlags::WeaklyReferencedSymbol);
    if (llvm::Error e = impl_->layer->add(jd.getDefaultResourceTracker(), std::move(part.buffer),
                                          std::move(part.declared))) {
      remove_dylib();
      return to_fdo_error(std::move(e), Errc::corrupt, "object");
    }
  }
  auto symbols =
      es.lookup(orc::makeJITDylibSearchOrder({&jd}, orc::JITDylibLookupFlags::MatchAllSymbols),
                std::move(wanted));
  if (!symbols) {
    std::string fallback = llvm::toString(symbols.takeError());
    fdo::Error err = impl_->errors.to_error(fallback);
    remove_dylib();
    return err;
  }
  LinkFacts facts = impl_->plugin->take(&jd);
  auto address_of = [&](std::string_view name) -> std::uint64_t {
    if (auto it = facts.symbols.find(std::string(name)); it != facts.symbols.end())
      return it->second;
    auto it = symbols->find(es.intern(llvm::StringRef(name.data(), name.size())));
    return it == symbols->end() ? 0 : it->second.getAddress();
  };

  std::vector<ThunkFn> thunks;
  for (const EntryInfo& e : entries) {
    std::uint64_t addr = address_of(std::string(kThunkPrefix) + e.name);
    if (!addr) {
      remove_dylib();
      return make_error(Errc::invalid_argument,
                        "object has no thunk for entry '" + e.name + "' (metadata does not match)");
    }
    thunks.push_back(reinterpret_cast<ThunkFn>(static_cast<std::uintptr_t>(addr)));
  }
  std::vector<std::uint64_t*> counters;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    std::uint64_t addr = address_of(std::string(kCountersPrefix) + std::to_string(i));
    if (!addr) {
      remove_dylib();
      return make_error(Errc::invalid_argument, "object has no counters for '" +
                                                    layout[i].pgo_name +
                                                    "' (metadata does not match)");
    }
    counters.push_back(reinterpret_cast<std::uint64_t*>(static_cast<std::uintptr_t>(addr)));
  }
  std::vector<std::uint64_t> records;
  for (std::size_t i = 0; i < layout.size(); ++i)
    records.push_back(address_of(std::string(kDataPrefix) + std::to_string(i)));
  std::vector<std::uint64_t> arg_slots(layout.size(), 0);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].arg_sites.empty()) continue;
    arg_slots[i] = address_of(std::string(kArgSlotsPrefix) + std::to_string(i));
    if (!arg_slots[i]) {
      remove_dylib();
      return make_error(Errc::invalid_argument, "object has no argument slots for '" +
                                                    layout[i].pgo_name +
                                                    "' (metadata does not match)");
    }
  }

  std::unique_ptr<LoadedProgram> program(new LoadedProgram());
  program->dylib_ = &jd;
  program->entries_.assign(entries.begin(), entries.end());
  program->thunks_ = std::move(thunks);
  program->layout_.assign(layout.begin(), layout.end());
  program->counters_ = std::move(counters);
  program->values_ =
      std::make_unique<ValueProfiles>(layout, std::move(records), std::move(arg_slots));
  program->ranges_ = std::move(facts.ranges);
  std::sort(program->ranges_.begin(), program->ranges_.end(),
            [](const FunctionRange& a, const FunctionRange& b) { return a.start < b.start; });
  if (std::uint64_t handle = address_of(kDsoHandleName))
    program->dso_handle_ = reinterpret_cast<void*>(static_cast<std::uintptr_t>(handle));
  if (std::uint64_t fini = address_of(kFiniName))
    program->fini_ = reinterpret_cast<void (*)()>(static_cast<std::uintptr_t>(fini));
  // From here on the program owns the dylib and unloads it when destroyed.
  program->loader_ = impl_.get();
  impl_->live.insert(program.get());
  if (std::uint64_t init = address_of(kInitName))
    program->init_ = reinterpret_cast<void (*)()>(static_cast<std::uintptr_t>(init));
  // The writable memory as the link left it, before any code ran.
  program->writable_ = std::move(facts.writable);
  std::sort(program->writable_.begin(), program->writable_.end(),
            [](const WritableBlock& a, const WritableBlock& b) { return a.address < b.address; });
  for (const WritableBlock& b : program->writable_)
    if (!b.zero_fill)
      program->initial_data_.append(reinterpret_cast<const char*>(b.address), b.size);
  // Constructors last: once they run, the program is live.
  if (program->init_) program->init_();
  return program;
}

LoadedProgram::~LoadedProgram() {
  if (loader_)
    if (Status s = unload(); !s) log::warning("jit loader: " + s.error().describe());
}

namespace {
// Zeroes [at, at + size) of a program's memory (JITLink's in-process memory is
// private anonymous): the whole pages inside a large block are given back
// (MADV_DONTNEED reads as zeros again, faulted in only where touched), as a
// fresh link would leave them, instead of writing every byte.
void clear(char* at, std::size_t size) {
  constexpr std::size_t kGiveBackFrom = 64 * 1024;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(at);
  const std::uintptr_t lo = (begin + page - 1) / page * page;
  const std::uintptr_t hi = (begin + size) / page * page;
  if (size < kGiveBackFrom || hi <= lo ||
      ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) {
    std::memset(at, 0, size);
    return;
  }
  std::memset(at, 0, lo - begin);
  std::memset(reinterpret_cast<char*>(hi), 0, begin + size - hi);
}
} // namespace

void LoadedProgram::finish() {
  if (!loader_ || finished_) return;
  // C++ static destructors (registered with __cxa_atexit against this
  // object's handle) first, then the llvm.global_dtors functions.
  if (dso_handle_) __cxa_finalize(dso_handle_);
  if (fini_) fini_();
  finished_ = true;
}

Status LoadedProgram::restart() {
  if (!loader_) return make_error(Errc::invalid_argument, "program is unloaded");
  finish();
  // The value tables hang off the data records about to be overwritten.
  if (values_) values_->clear();
  const char* initial = initial_data_.data();
  for (const WritableBlock& b : writable_) {
    auto* at = reinterpret_cast<char*>(static_cast<std::uintptr_t>(b.address));
    if (b.zero_fill) {
      clear(at, b.size);
    } else {
      std::memcpy(at, initial, b.size);
      initial += b.size;
    }
  }
  finished_ = false;
  if (init_) init_();
  return ok();
}

Status LoadedProgram::unload() {
  if (!loader_) return make_error(Errc::invalid_argument, "program already unloaded");
  finish();
  // The value tables hang off the program's data, which goes next.
  values_.reset();
  Loader::Impl* loader = loader_;
  loader_ = nullptr;
  thunks_.clear();
  counters_.clear();
  fini_ = nullptr;
  init_ = nullptr;
  dso_handle_ = nullptr;
  loader->live.erase(this);
  auto* jd = static_cast<orc::JITDylib*>(dylib_);
  dylib_ = nullptr;
  if (llvm::Error e = loader->es->removeJITDylib(*jd))
    return to_fdo_error(std::move(e), Errc::internal, "unload");
  return ok();
}

Expected<ThunkFn> LoadedProgram::thunk(std::string_view entry) const {
  if (!loader_) return make_error(Errc::invalid_argument, "program is unloaded");
  if (finished_) return make_error(Errc::invalid_argument, "program is finished: restart it first");
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == entry) return thunks_[i];
  return make_error(Errc::not_found, "no entry '" + std::string(entry) + "' in the program");
}

Expected<std::uint64_t> LoadedProgram::call(std::string_view entry,
                                            std::span<const std::uint64_t> args) const {
  if (!loader_) return make_error(Errc::invalid_argument, "program is unloaded");
  if (finished_) return make_error(Errc::invalid_argument, "program is finished: restart it first");
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].name != entry) continue;
    if (args.size() != entries_[i].param_types.size())
      return make_error(Errc::invalid_argument, "entry '" + entries_[i].name + "' takes " +
                                                    std::to_string(entries_[i].param_types.size()) +
                                                    " arguments, got " +
                                                    std::to_string(args.size()));
    // The thunk reads its slots through a non-const pointer; give it a copy.
    std::vector<std::uint64_t> slots(args.begin(), args.end());
    slots.push_back(0); // never hand out a null array
    std::uint64_t ret = 0;
    thunks_[i](slots.data(), &ret);
    return ret;
  }
  return make_error(Errc::not_found, "no entry '" + std::string(entry) + "' in the program");
}

std::map<std::string, std::vector<std::uint64_t>> LoadedProgram::read_counters() const {
  std::map<std::string, std::vector<std::uint64_t>> out;
  for (std::size_t i = 0; i < counters_.size(); ++i)
    out[layout_[i].pgo_name].assign(counters_[i], counters_[i] + layout_[i].num_counters);
  return out;
}

void LoadedProgram::reset_counters() {
  for (std::size_t i = 0; i < counters_.size(); ++i)
    std::memset(counters_[i], 0, sizeof(std::uint64_t) * layout_[i].num_counters);
  if (values_) values_->clear();
}

std::map<std::string, FunctionValueProfile> LoadedProgram::read_value_profiles() const {
  std::map<std::string, FunctionValueProfile> out;
  if (!values_) return out;
  for (auto& [name, fv] : values_->read())
    out[name] = FunctionValueProfile{std::move(fv.indirect_calls), std::move(fv.memop_sizes),
                                     std::move(fv.arguments)};
  return out;
}

} // namespace fdo::jit
