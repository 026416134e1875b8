#include "fdo/daemon/stage_metadata.h"

#include "fdo/daemon/feedback_loop.h"

namespace fdo::daemon {

Expected<StageMetadataRef> decode_stage_metadata(std::string_view text, const std::string& what) {
  auto out = std::make_shared<StageMetadata>();
  out->json = nlohmann::json::parse(text, nullptr, false);
  if (out->json.is_discarded()) return make_error(Errc::corrupt, what + " has corrupt metadata");
  auto compile = jit::metadata_from_json(out->json);
  if (!compile)
    return make_error(Errc::corrupt, what + " has corrupt metadata: " + compile.error().message());
  out->compile = std::move(*compile);
  for (const auto& f : out->compile.counters_layout) {
    out->cfg_hashes[f.pgo_name] = f.cfg_hash;
    out->counter_sizes[f.pgo_name] = f.num_counters;
  }
  out->pgo_names = PgoNames(out->compile.source_names);
  for (const auto& [fn, weights] : out->compile.branch_weights)
    for (const jit::BranchWeight& w : weights)
      out->branch_weights[fn].push_back({w.index, w.taken, w.not_taken});
  return StageMetadataRef(std::move(out));
}

Expected<StageMetadataRef> stage_metadata_of(const cache::Entry& entry) {
  if (StageMetadataRef kept = entry.decoded.get<StageMetadata>()) return kept;
  FDO_TRY(StageMetadataRef decoded,
          decode_stage_metadata(entry.metadata, "cached entry " + entry.key));
  entry.decoded.set(decoded);
  return decoded;
}

std::optional<std::uint64_t> StageReport::cfg_hash_of(const std::string& fn) const {
  if (!metadata) return std::nullopt;
  auto it = metadata->cfg_hashes.find(fn);
  if (it == metadata->cfg_hashes.end()) return std::nullopt;
  return it->second;
}

const std::string* StageReport::fingerprint_of(const std::string& fn) const {
  if (!metadata) return nullptr;
  auto it = metadata->compile.function_fingerprints.find(fn);
  return it == metadata->compile.function_fingerprints.end() ? nullptr : &it->second;
}

const std::string* StageReport::source_name_of(const std::string& fn) const {
  if (!metadata) return nullptr;
  auto it = metadata->compile.source_names.find(fn);
  return it == metadata->compile.source_names.end() ? nullptr : &it->second;
}

} // namespace fdo::daemon
