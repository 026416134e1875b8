// CompileResult metadata <-> JSON. The JSON travels from compile worker to
// daemon and sits beside the object in the cache, so reading it back is
// strict: anything malformed is Errc::corrupt naming the field.
#include "fdo/jit/compiler.h"
#include "fdo/util/hash.h"

#include <cstdio>
#include <cstdlib>

namespace fdo::jit {

using nlohmann::json;

namespace {

constexpr int kMetadataFormat = 1;

std::string hash_hex(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Error corrupt(const std::string& field, const std::string& what) {
  return make_error(Errc::corrupt, "compile metadata field '" + field + "': " + what);
}

const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Expected<std::string> get_string(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (!v || !v->is_string()) return corrupt(path + key, "must be a string");
  return v->get<std::string>();
}

Expected<std::uint64_t> get_u64(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (!v || !v->is_number_unsigned()) return corrupt(path + key, "must be a non-negative integer");
  return v->get<std::uint64_t>();
}

Expected<std::map<std::string, std::string>> get_string_map(const json& obj, const char* key) {
  std::map<std::string, std::string> out;
  const json* v = member(obj, key);
  if (!v) return out;
  if (!v->is_object()) return corrupt(key, "must be an object");
  for (const auto& [k, val] : v->items()) {
    if (!val.is_string()) return corrupt(std::string(key) + "." + k, "must be a string");
    out.emplace(k, val.get<std::string>());
  }
  return out;
}

json blocks_to_json(const std::vector<FunctionBlocks>& map) {
  json out = json::array();
  for (const FunctionBlocks& fb : map) {
    // [offset, size, function, block, branch]: compact, as there is one per block.
    json ranges = json::array();
    for (const BlockRange& r : fb.ranges)
      ranges.push_back(json::array({r.offset, r.size, r.function, r.block, r.branch}));
    out.push_back({{"symbol", fb.symbol}, {"ranges", std::move(ranges)}});
  }
  return out;
}

Expected<std::vector<FunctionBlocks>> blocks_from_json(const json& j) {
  std::vector<FunctionBlocks> out;
  const json* v = member(j, "block_map");
  if (!v) return out; // metadata written before the block map existed
  if (!v->is_array()) return corrupt("block_map", "must be an array");
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& f = (*v)[i];
    const std::string path = "block_map[" + std::to_string(i) + "].";
    if (!f.is_object()) return corrupt(path, "must be an object");
    FunctionBlocks fb;
    FDO_TRY(fb.symbol, get_string(f, "symbol", path));
    const json* ranges = member(f, "ranges");
    if (!ranges || !ranges->is_array()) return corrupt(path + "ranges", "must be an array");
    std::uint64_t end = 0;
    for (const json& r : *ranges) {
      if (!r.is_array() || r.size() != 5 || !r[0].is_number_unsigned() ||
          !r[1].is_number_unsigned() || !r[2].is_string() || !r[3].is_number_unsigned() ||
          !r[4].is_number_integer())
        return corrupt(path + "ranges",
                       "must hold [offset, size, function, block, branch] entries");
      BlockRange b;
      const std::uint64_t offset = r[0].get<std::uint64_t>(), size = r[1].get<std::uint64_t>();
      const std::uint64_t block = r[3].get<std::uint64_t>();
      const std::int64_t branch = r[4].get<std::int64_t>();
      if (offset > UINT32_MAX || size == 0 || size > UINT32_MAX || block > UINT32_MAX ||
          branch < -1 || branch > INT32_MAX || offset < end)
        return corrupt(path + "ranges", "out of range or not sorted by offset");
      end = offset + size;
      b.offset = static_cast<std::uint32_t>(offset);
      b.size = static_cast<std::uint32_t>(size);
      b.function = r[2].get<std::string>();
      b.block = static_cast<std::uint32_t>(block);
      b.branch = static_cast<std::int32_t>(branch);
      fb.ranges.push_back(std::move(b));
    }
    out.push_back(std::move(fb));
  }
  return out;
}

json weights_to_json(const std::map<std::string, std::vector<BranchWeight>>& weights) {
  json out = json::object();
  for (const auto& [fn, list] : weights) {
    json a = json::array();
    for (const BranchWeight& w : list)
      a.push_back(json::array({w.index, w.taken, w.not_taken}));
    out[fn] = std::move(a);
  }
  return out;
}

Expected<std::map<std::string, std::vector<BranchWeight>>> weights_from_json(const json& j) {
  std::map<std::string, std::vector<BranchWeight>> out;
  const json* v = member(j, "branch_weights");
  if (!v) return out; // metadata written before branch weights were reported
  if (!v->is_object()) return corrupt("branch_weights", "must be an object");
  for (const auto& [fn, list] : v->items()) {
    if (!list.is_array()) return corrupt("branch_weights." + fn, "must be an array");
    for (const json& w : list) {
      if (!w.is_array() || w.size() != 3 || !w[0].is_number_unsigned() ||
          !w[1].is_number_unsigned() || !w[2].is_number_unsigned() ||
          w[0].get<std::uint64_t>() > UINT32_MAX)
        return corrupt("branch_weights." + fn, "must hold [index, taken, not_taken] entries");
      out[fn].push_back({static_cast<std::uint32_t>(w[0].get<std::uint64_t>()),
                         w[1].get<std::uint64_t>(), w[2].get<std::uint64_t>()});
    }
  }
  return out;
}

} // namespace

json metadata_to_json(const CompileResult& r) {
  json entries = json::array();
  for (const EntryInfo& e : r.entries)
    entries.push_back({{"name", e.name},
                       {"return", e.return_type},
                       {"params", e.param_types},
                       {"return_signext", e.return_signext}});
  json layout = json::array();
  for (const InstrumentedFunction& f : r.counters_layout)
    layout.push_back({{"pgo_name", f.pgo_name},
                      {"cfg_hash", hash_hex(f.cfg_hash)},
                      {"num_counters", f.num_counters},
                      {"indirect_call_sites", f.indirect_call_sites},
                      {"memop_sites", f.memop_sites},
                      {"arg_sites", f.arg_sites}});
  json j = {{"format", kMetadataFormat},
            {"profile_key", r.profile_key},
            {"mode", std::string(to_string(r.mode))},
            {"entries", std::move(entries)},
            {"counters_layout", std::move(layout)},
            {"function_fingerprints", r.function_fingerprints},
            {"local_names", r.local_names},
            {"source_names", r.source_names},
            {"times_us",
             {{"parse", r.times.parse},
              {"canonicalize", r.times.canonicalize},
              {"instrument_or_annotate", r.times.instrument_or_annotate},
              {"optimize", r.times.optimize},
              {"codegen", r.times.codegen}}},
            {"code_size", r.code_size},
            {"mutable_globals", r.mutable_globals},
            {"diagnostics", r.diagnostics},
            {"block_map", blocks_to_json(r.block_map)},
            {"branch_weights", weights_to_json(r.branch_weights)}};
  if (r.text_offset != 0) j["text_offset"] = static_cast<std::uint64_t>(r.text_offset);
  if (r.cold_functions != 0) j["cold_functions"] = static_cast<std::uint64_t>(r.cold_functions);
  if (r.partitions > 1) {
    j["partitions"] = r.partitions;
    j["partition_split"] = std::string(to_string(r.split));
  }
  if (!r.ir.empty()) j["ir"] = r.ir;
  if (!r.specializations.empty() || !r.specializations_skipped.empty()) {
    json made = json::array();
    for (const Specialization& s : r.specializations)
      made.push_back({{"function", s.function},
                      {"args", s.args},
                      {"calls", s.calls},
                      {"matched", s.matched},
                      {"instructions", s.instructions}});
    j["specializations"] = {{"made", std::move(made)}, {"skipped", r.specializations_skipped}};
  }
  return j;
}

Expected<CompileResult> metadata_from_json(const json& j) {
  if (!j.is_object()) return make_error(Errc::corrupt, "compile metadata is not a JSON object");
  CompileResult r;
  const json* format = member(j, "format");
  if (!format || !format->is_number_integer() || format->get<int>() != kMetadataFormat)
    return corrupt("format", "must be " + std::to_string(kMetadataFormat));
  FDO_TRY(r.profile_key, get_string(j, "profile_key", ""));
  if (!is_hex_key(r.profile_key)) return corrupt("profile_key", "must be 64 lower-case hex digits");
  FDO_TRY(std::string mode, get_string(j, "mode", ""));
  auto parsed_mode = parse_compile_mode(mode);
  if (!parsed_mode) return corrupt("mode", parsed_mode.error().message());
  r.mode = *parsed_mode;

  const json* entries = member(j, "entries");
  if (!entries || !entries->is_array()) return corrupt("entries", "must be an array");
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const json& e = (*entries)[i];
    const std::string path = "entries[" + std::to_string(i) + "].";
    if (!e.is_object()) return corrupt(path, "must be an object");
    EntryInfo info;
    FDO_TRY(info.name, get_string(e, "name", path));
    FDO_TRY(info.return_type, get_string(e, "return", path));
    if (auto t = parse_abi_type(info.return_type); !t)
      return corrupt(path + "return", t.error().message());
    const json* params = member(e, "params");
    if (!params || !params->is_array()) return corrupt(path + "params", "must be an array");
    for (const json& p : *params) {
      if (!p.is_string()) return corrupt(path + "params", "must hold strings");
      auto t = parse_abi_type(p.get<std::string>());
      if (!t || t->kind == AbiKind::void_)
        return corrupt(path + "params", "bad parameter type '" + p.get<std::string>() + "'");
      info.param_types.push_back(p.get<std::string>());
    }
    const json* signext = member(e, "return_signext");
    if (signext && !signext->is_boolean())
      return corrupt(path + "return_signext", "must be a boolean");
    info.return_signext = signext && signext->get<bool>();
    r.entries.push_back(std::move(info));
  }

  const json* layout = member(j, "counters_layout");
  if (!layout || !layout->is_array()) return corrupt("counters_layout", "must be an array");
  for (std::size_t i = 0; i < layout->size(); ++i) {
    const json& f = (*layout)[i];
    const std::string path = "counters_layout[" + std::to_string(i) + "].";
    if (!f.is_object()) return corrupt(path, "must be an object");
    InstrumentedFunction fn;
    FDO_TRY(fn.pgo_name, get_string(f, "pgo_name", path));
    FDO_TRY(std::string hash, get_string(f, "cfg_hash", path));
    char* end = nullptr;
    if (hash.empty() || hash.size() > 16)
      return corrupt(path + "cfg_hash", "must be 1 to 16 hex digits");
    fn.cfg_hash = std::strtoull(hash.c_str(), &end, 16);
    if (*end != '\0') return corrupt(path + "cfg_hash", "must be hex digits");
    FDO_TRY(std::uint64_t n, get_u64(f, "num_counters", path));
    if (n == 0 || n > UINT32_MAX) return corrupt(path + "num_counters", "out of range");
    fn.num_counters = static_cast<std::uint32_t>(n);
    // Absent in metadata written before value profiling: no sites.
    for (auto [key, field] : {std::pair{"indirect_call_sites", &fn.indirect_call_sites},
                              std::pair{"memop_sites", &fn.memop_sites}}) {
      if (!member(f, key)) continue;
      FDO_TRY(std::uint64_t sites, get_u64(f, key, path));
      if (sites > UINT16_MAX) return corrupt(path + key, "out of range");
      *field = static_cast<std::uint32_t>(sites);
    }
    // Absent in metadata written before argument value profiling: none.
    if (const json* args = member(f, "arg_sites")) {
      if (!args->is_array() || args->size() > 0xffff)
        return corrupt(path + "arg_sites", "must be an array of argument positions");
      for (const json& a : *args) {
        if (!a.is_number_unsigned() || a.get<std::uint64_t>() > 0xffff)
          return corrupt(path + "arg_sites", "must hold argument positions");
        fn.arg_sites.push_back(a.get<std::uint32_t>());
      }
    }
    r.counters_layout.push_back(std::move(fn));
  }

  FDO_TRY(r.function_fingerprints, get_string_map(j, "function_fingerprints"));
  FDO_TRY(r.local_names, get_string_map(j, "local_names"));
  // Absent in metadata written before the field existed: no source names.
  FDO_TRY(r.source_names, get_string_map(j, "source_names"));
  if (const json* t = member(j, "times_us")) {
    if (!t->is_object()) return corrupt("times_us", "must be an object");
    FDO_TRY(r.times.parse, get_u64(*t, "parse", "times_us."));
    FDO_TRY(r.times.canonicalize, get_u64(*t, "canonicalize", "times_us."));
    FDO_TRY(r.times.instrument_or_annotate, get_u64(*t, "instrument_or_annotate", "times_us."));
    FDO_TRY(r.times.optimize, get_u64(*t, "optimize", "times_us."));
    FDO_TRY(r.times.codegen, get_u64(*t, "codegen", "times_us."));
  }
  FDO_TRY(std::uint64_t code_size, get_u64(j, "code_size", ""));
  r.code_size = static_cast<std::size_t>(code_size);
  // Absent in metadata written before the field existed: assume the program
  // has state (a fresh load per execution is always correct).
  r.mutable_globals = true;
  if (const json* mg = member(j, "mutable_globals")) {
    if (!mg->is_boolean()) return corrupt("mutable_globals", "must be true or false");
    r.mutable_globals = mg->get<bool>();
  }
  if (const json* d = member(j, "diagnostics")) {
    if (!d->is_array()) return corrupt("diagnostics", "must be an array");
    for (const json& s : *d) {
      if (!s.is_string()) return corrupt("diagnostics", "must hold strings");
      r.diagnostics.push_back(s.get<std::string>());
    }
  }
  FDO_TRY(r.block_map, blocks_from_json(j));
  FDO_TRY(r.branch_weights, weights_from_json(j));
  // Absent in metadata written before the knob existed, and at 0.
  if (j.contains("cold_functions")) {
    FDO_TRY(std::uint64_t cold, get_u64(j, "cold_functions", ""));
    r.cold_functions = static_cast<std::size_t>(cold);
  }
  // Absent for a compile in one part.
  if (j.contains("partitions")) {
    FDO_TRY(std::uint64_t parts, get_u64(j, "partitions", ""));
    if (parts < 1 || parts > kMaxPartitions) return corrupt("partitions", "out of range");
    r.partitions = static_cast<unsigned>(parts);
    auto split = j.find("partition_split");
    if (split == j.end() || !split->is_string()) return corrupt("partition_split", "missing");
    if (*split == "inliner")
      r.split = PartitionSplit::inliner;
    else if (*split == "codegen")
      r.split = PartitionSplit::codegen;
    else
      return corrupt("partition_split", "must be inliner or codegen");
  }
  if (j.contains("text_offset")) {
    FDO_TRY(std::uint64_t offset, get_u64(j, "text_offset", ""));
    if (offset >= static_cast<std::uint64_t>(fdo::kTextOffsetWindow) ||
        offset % fdo::kTextOffsetStep != 0)
      return corrupt("text_offset", "must be 0, 16, 32 or 48");
    r.text_offset = static_cast<int>(offset);
  }
  if (const json* ir = member(j, "ir")) {
    if (!ir->is_string()) return corrupt("ir", "must be a string");
    r.ir = ir->get<std::string>();
  }
  // Absent when the compile specialized nothing (and before it could).
  if (const json* sp = member(j, "specializations")) {
    if (!sp->is_object()) return corrupt("specializations", "must be an object");
    try {
      for (const json& m : sp->value("made", json::array())) {
        Specialization s;
        s.function = m.at("function").get<std::string>();
        s.args = m.at("args").get<std::vector<std::pair<std::uint32_t, std::uint64_t>>>();
        s.calls = m.at("calls").get<std::uint64_t>();
        s.matched = m.at("matched").get<std::uint64_t>();
        s.instructions = m.at("instructions").get<std::uint32_t>();
        r.specializations.push_back(std::move(s));
      }
      r.specializations_skipped =
          sp->value("skipped", json::array()).get<std::vector<std::string>>();
    } catch (const json::exception& e) {
      return corrupt("specializations", e.what());
    }
  }
  return r;
}

} // namespace fdo::jit
