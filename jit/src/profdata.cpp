#include "fdo/jit/profdata.h"

#include "fdo/jit/compiler.h"
#include "llvm_support.h"
#include "pgo.h"

#include <cstdio>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/ProfileData/InstrProfReader.h>
#include <llvm/Support/MemoryBuffer.h>
#include <map>
#include <utility>

namespace fdo::jit {

Expected<std::string> indexed_profile(const fdo::ProfileDoc& profile, RecordNames names) {
  detail::ensure_llvm_initialized();
  auto indexed = detail::write_indexed_profile(profile, names);
  if (!indexed)
    return detail::to_fdo_error(indexed.takeError(), Errc::invalid_argument, "profdata");
  if (!*indexed)
    return make_error(Errc::invalid_argument, "the profile holds no counts to export as profdata");
  return (*indexed)->getBuffer().str();
}

namespace {

// The value sites of one kind in `record`, when their number is the
// function's; targets renamed through `rename` (unknown ones dropped) when
// given.
std::vector<fdo::ValueSite> value_sites(const llvm::InstrProfRecord& record, std::uint32_t kind,
                                        std::uint32_t expected_sites,
                                        const std::map<std::uint64_t, std::uint64_t>* rename) {
  std::vector<fdo::ValueSite> out;
  const std::uint32_t sites = record.getNumValueSites(kind);
  if (sites == 0 || sites != expected_sites) return out;
  for (std::uint32_t s = 0; s < sites; ++s) {
    fdo::ValueSite site;
    const std::uint32_t n = record.getNumValueDataForSite(kind, s);
    std::unique_ptr<InstrProfValueData[]> data = record.getValueForSite(kind, s);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint64_t value = data[i].Value;
      if (rename) {
        auto it = rename->find(value);
        if (it == rename->end()) continue;
        value = it->second;
      }
      site.emplace_back(value, data[i].Count);
    }
    out.push_back(std::move(site));
  }
  return out;
}

} // namespace

Expected<SeededProfile> seed_profile(std::string_view profdata, std::string_view program_bytes,
                                     const fdo::Knobs& knobs, const Limits& limits) {
  detail::ensure_llvm_initialized();
  auto reader = llvm::IndexedInstrProfReader::create(llvm::MemoryBuffer::getMemBuffer(
      llvm::StringRef(profdata.data(), profdata.size()), "import.profdata", false));
  if (!reader)
    return detail::to_fdo_error(reader.takeError(), Errc::invalid_argument,
                                "not an indexed profile (llvm-profdata merge makes one)");
  if (!(*reader)->isIRLevelProfile())
    return make_error(Errc::invalid_argument,
                      "not an IR-level profile (front-end -fprofile-instr-generate profiles do "
                      "not apply; clang -fprofile-generate makes IR-level ones)");

  fdo::ProfileDoc with_knobs;
  with_knobs.knobs = knobs;
  with_knobs.knobs.mode.reset();
  CompileRequest request;
  request.mode = CompileMode::instrumented;
  request.profile = &with_knobs;
  request.limits = limits;
  FDO_TRY(CompileResult compiled, compile(program_bytes, request));

  SeededProfile out;
  out.profile_key = compiled.profile_key;
  out.profile.knobs = with_knobs.knobs;
  // Every ordinary record of the file, to keep the ones that seed nothing:
  // the profile summary LLVM computes from the indexed profile at compile time
  // must be the whole file's (see ProfileDoc::outside_functions).
  std::map<std::pair<std::string, std::uint64_t>, std::vector<std::uint64_t>> unseeded;
  for (const auto& record : **reader) {
    ++out.records;
    if (!is_cs_hash(record.Hash) && !record.Counts.empty())
      unseeded.emplace(std::make_pair(record.Name.str(), record.Hash), record.Counts);
  }
  if (llvm::Error e = (*reader)->getError())
    return detail::to_fdo_error(std::move(e), Errc::invalid_argument, "reading the profile");

  auto source_of = [&](const std::string& pgo_name) -> const std::string& {
    auto it = compiled.source_names.find(pgo_name);
    return it == compiled.source_names.end() ? pgo_name : it->second;
  };
  std::map<std::uint64_t, std::uint64_t> canonical_of_source;
  for (const auto& [pgo_name, source] : compiled.source_names)
    canonical_of_source[llvm::IndexedInstrProf::ComputeHash(source)] =
        llvm::IndexedInstrProf::ComputeHash(pgo_name);

  for (const InstrumentedFunction& f : compiled.counters_layout) {
    const std::string& source = source_of(f.pgo_name);
    auto record = (*reader)->getInstrProfRecord(source, f.cfg_hash);
    if (!record) {
      llvm::consumeError(record.takeError());
      out.dropped.push_back(source);
      continue;
    }
    if (record->Counts.size() != f.num_counters) {
      out.dropped.push_back(source);
      continue;
    }
    fdo::FunctionProfile fp;
    fp.cfg_hash = f.cfg_hash;
    fp.counts = record->Counts;
    fp.source_name = source;
    if (auto it = compiled.function_fingerprints.find(f.pgo_name);
        it != compiled.function_fingerprints.end())
      fp.fingerprint = it->second;
    fp.indirect_calls = value_sites(*record, llvm::IPVK_IndirectCallTarget, f.indirect_call_sites,
                                    &canonical_of_source);
    fp.memop_sizes = value_sites(*record, llvm::IPVK_MemOPSize, f.memop_sites, nullptr);
    out.profile.functions.emplace(f.pgo_name, std::move(fp));
    unseeded.erase(std::make_pair(source, f.cfg_hash));
    ++out.matched;
  }
  for (auto& [id, counts] : unseeded) {
    const auto& [name, hash] = id;
    fdo::FunctionProfile fp;
    fp.cfg_hash = hash;
    fp.counts = std::move(counts);
    fp.source_name = name;
    // The same name twice (two CFG hashes) keeps both, the second keyed apart.
    std::string key = name;
    if (out.profile.outside_functions.count(key) != 0) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
      key += std::string("#") + hex;
    }
    out.profile.outside_functions.emplace(std::move(key), std::move(fp));
  }
  return out;
}

} // namespace fdo::jit
