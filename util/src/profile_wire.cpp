#include "fdo/util/profile_wire.h"

#include <limits>

namespace fdo::wire {

namespace {

// Least bytes an element takes, for count checks.
constexpr std::size_t kU32 = 4;
constexpr std::size_t kU64 = 8;
// A function: its name's length, cfg_hash, four counts, layout, one count.
constexpr std::size_t kFunction = kU32 + kU64 + 4 * kU32 + 1 + kU32;
// A launch bound: two string lengths and two integers.
constexpr std::size_t kBound = 2 * kU32 + 2 * kU64;

void put_pairs(WireWriter& w, const ValueSite& site) {
  w.count(site.size());
  for (const auto& [value, count] : site) {
    w.u64(value);
    w.u64(count);
  }
}
ValueSite get_pairs(WireReader& r) {
  ValueSite site(r.count(2 * kU64));
  for (auto& [value, count] : site) {
    value = r.u64();
    count = r.u64();
  }
  return site;
}

void put_function(WireWriter& w, const FunctionProfile& f) {
  w.u64(f.cfg_hash);
  w.count(f.counts.size());
  for (std::uint64_t c : f.counts)
    w.u64(c);
  w.count(f.unpredictable.size());
  for (std::uint32_t b : f.unpredictable)
    w.u32(b);
  put_value_sites(w, f.indirect_calls);
  put_value_sites(w, f.memop_sizes);
  w.u8(static_cast<std::uint8_t>(f.layout));
  put_arg_values(w, f.arg_values);
}
FunctionProfile get_function(WireReader& r) {
  FunctionProfile f;
  f.cfg_hash = r.u64();
  f.counts.resize(r.count(kU64));
  for (std::uint64_t& c : f.counts)
    c = r.u64();
  f.unpredictable.resize(r.count(kU32));
  for (std::uint32_t& b : f.unpredictable)
    b = r.u32();
  f.indirect_calls = get_value_sites(r);
  f.memop_sizes = get_value_sites(r);
  f.layout = static_cast<FunctionLayout>(
      r.enum_u8(static_cast<std::uint8_t>(FunctionLayout::cold), "a function's layout"));
  f.arg_values = get_arg_values(r);
  return f;
}

void put_functions(WireWriter& w, const std::map<std::string, FunctionProfile>& functions) {
  w.count(functions.size());
  for (const auto& [name, f] : functions) {
    w.str(name);
    put_function(w, f);
  }
}
std::map<std::string, FunctionProfile> get_functions(WireReader& r) {
  std::map<std::string, FunctionProfile> out;
  for (std::size_t i = 0, n = r.count(kFunction); i < n && !r.failed(); ++i) {
    std::string name = r.str();
    FunctionProfile f = get_function(r);
    if (!out.emplace(std::move(name), std::move(f)).second) r.fail("a function named twice");
  }
  return out;
}

void put_knobs(WireWriter& w, const Knobs& k) {
  w.i64(k.opt_level);
  w.i64(k.size_level);
  w.boolean(k.unroll);
  w.boolean(k.vectorize);
  w.boolean(k.inline_threshold.has_value());
  if (k.inline_threshold) w.i64(*k.inline_threshold);
  // 0: derived; else 1 + the mode.
  w.u8(k.mode ? static_cast<std::uint8_t>(1 + static_cast<int>(*k.mode)) : 0);
  w.i64(k.text_offset);
  w.i64(k.spec_min_share);
  w.i64(k.spec_max_clones);
  w.u8(static_cast<std::uint8_t>(k.cold_code));
}

// An integer the knobs' own checks bound (below); here only kept within int.
int get_int(WireReader& r) {
  const std::int64_t v = r.i64();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    r.fail("a knob of " + std::to_string(v) + " is out of range");
    return 0;
  }
  return static_cast<int>(v);
}

Knobs get_knobs(WireReader& r) {
  Knobs k;
  k.opt_level = get_int(r);
  k.size_level = get_int(r);
  k.unroll = r.boolean();
  k.vectorize = r.boolean();
  if (r.boolean()) k.inline_threshold = get_int(r);
  if (std::uint8_t mode =
          r.enum_u8(1 + static_cast<std::uint8_t>(CompileMode::cs_instrumented), "knobs.mode");
      mode != 0)
    k.mode = static_cast<CompileMode>(mode - 1);
  k.text_offset = get_int(r);
  k.spec_min_share = get_int(r);
  k.spec_max_clones = get_int(r);
  k.cold_code = static_cast<ColdCode>(
      r.enum_u8(static_cast<std::uint8_t>(ColdCode::optimize), "knobs.cold_code"));
  if (r.failed()) return k;
  // The ranges a document's knobs are held to, checked by the one check
  // there is (profile_from_json's), over the knobs' JSON: a handful of fields.
  if (auto checked = knobs_from_json(to_json(k)); !checked) r.fail(checked.error().message());
  return k;
}

} // namespace

void put_value_sites(WireWriter& w, const std::vector<ValueSite>& sites) {
  w.count(sites.size());
  for (const ValueSite& site : sites)
    put_pairs(w, site);
}

std::vector<ValueSite> get_value_sites(WireReader& r) {
  std::vector<ValueSite> sites(r.count(kU32));
  for (ValueSite& site : sites)
    site = get_pairs(r);
  return sites;
}

void put_arg_values(WireWriter& w, const std::vector<ArgValues>& args) {
  w.count(args.size());
  for (const ArgValues& a : args) {
    w.u32(a.arg);
    w.u64(a.other);
    put_pairs(w, a.values);
  }
}

std::vector<ArgValues> get_arg_values(WireReader& r) {
  std::vector<ArgValues> args(r.count(kU32 + kU64 + kU32));
  for (ArgValues& a : args) {
    a.arg = r.u32();
    a.other = r.u64();
    a.values = get_pairs(r);
  }
  return args;
}

void put_compile_profile(WireWriter& w, const ProfileDoc& doc) {
  w.i64(doc.format);
  put_knobs(w, doc.knobs);
  put_functions(w, doc.functions);
  put_functions(w, doc.cs_functions);
  put_functions(w, doc.outside_functions);
  w.count(doc.gpu.launch_bounds.size());
  for (const GpuKernelBounds& b : doc.gpu.launch_bounds) {
    w.str(b.arch);
    w.str(b.kernel);
    w.i64(b.max_threads);
    w.i64(b.min_blocks_per_sm);
  }
}

ProfileDoc get_compile_profile(WireReader& r) {
  ProfileDoc doc;
  doc.format = get_int(r);
  if (!r.failed() && (doc.format < 1 || doc.format > ProfileDoc::kFormat))
    r.fail("profile format " + std::to_string(doc.format) + " is not one this build reads");
  doc.knobs = get_knobs(r);
  doc.functions = get_functions(r);
  doc.cs_functions = get_functions(r);
  doc.outside_functions = get_functions(r);
  doc.gpu.launch_bounds.resize(r.count(kBound));
  for (GpuKernelBounds& b : doc.gpu.launch_bounds) {
    b.arch = r.str();
    b.kernel = r.str();
    b.max_threads = get_int(r);
    b.min_blocks_per_sm = get_int(r);
  }
  return doc;
}

} // namespace fdo::wire

namespace fdo {

ProfileDoc compile_view(const ProfileDoc& doc) {
  ProfileDoc view;
  view.format = doc.format;
  view.knobs = doc.knobs;
  for (auto [from, to] : {std::pair{&doc.functions, &view.functions},
                          std::pair{&doc.cs_functions, &view.cs_functions},
                          std::pair{&doc.outside_functions, &view.outside_functions}})
    for (const auto& [name, f] : *from) {
      FunctionProfile& kept = (*to)[name] = f;
      kept.fingerprint.clear();
      kept.source_name.clear();
    }
  view.gpu.launch_bounds = doc.gpu.launch_bounds;
  return view;
}

} // namespace fdo
