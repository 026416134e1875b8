// The guard's pure part (docs/guard.md): the variants a program can be
// served, the documents they compile from, the knob sequence, and what a
// trial compares (arms_of) — functions of the guard record and the current
// profile, no state. The stateful Guard is in guard.cpp.
#include "fdo/daemon/guard.h"

#include <algorithm>
#include <cstdio>

namespace fdo::daemon {

namespace {

bool has_marks(const ProfileDoc& doc) {
  auto marked = [](const auto& entry) { return !entry.second.unpredictable.empty(); };
  return std::any_of(doc.functions.begin(), doc.functions.end(), marked) ||
         std::any_of(doc.cs_functions.begin(), doc.cs_functions.end(), marked);
}

bool has_cs_counts(const ProfileDoc& doc) {
  return !doc.cs_functions.empty();
}

bool has_layout(const ProfileDoc& doc) {
  return std::any_of(doc.functions.begin(), doc.functions.end(), [](const auto& entry) {
    return entry.second.layout != FunctionLayout::normal;
  });
}

constexpr const char* kCsCountsKey = "cs_counts";

ProfilePart toggled(ProfilePart p) {
  return p == ProfilePart::kept ? ProfilePart::dropped : ProfilePart::kept;
}

// The first knob variant from step `from_step` on that applies; `step` gets its step.
std::optional<Variant> first_applicable(const Variant& from, int from_step, int end,
                                        const ProfileDoc& current, int& step) {
  for (int s = from_step; s < end; ++s)
    if (auto v = knob_variant(from, s, &current)) {
      step = s;
      return v;
    }
  return std::nullopt;
}

} // namespace

Variant recorded_incumbent(const GuardRecord& record, const ProfileDoc& current) {
  Variant v;
  v.knobs = current.knobs;
  if (record.incumbent_base && !record.incumbent_knobs.is_null())
    if (auto parsed = variant_from_knobs_json(*record.incumbent_base, record.incumbent_knobs))
      v = *parsed;
  v.base = record.incumbent_base.value_or(VariantBase::plain);
  v.knobs.mode.reset();
  v.version = 0;
  return v;
}

std::string describe(const Variant& v) {
  const Knobs& k = v.knobs;
  std::string s(to_string(v.base));
  s += k.size_level == 1 ? " Os" : k.size_level == 2 ? " Oz" : " O" + std::to_string(k.opt_level);
  if (!k.unroll) s += " -unroll";
  if (!k.vectorize) s += " -vectorize";
  if (k.inline_threshold) s += " inline=" + std::to_string(*k.inline_threshold);
  if (k.text_offset != 0) s += " text+" + std::to_string(k.text_offset);
  if (v.cs_counts == ProfilePart::dropped) s += " -cs";
  if (v.branch_marks == ProfilePart::dropped) s += " -marks";
  if (v.layout == ProfilePart::dropped) s += " -layout";
  return s;
}

nlohmann::json variant_knobs_json(const Variant& v) {
  nlohmann::json j = to_json(v.knobs);
  if (v.cs_counts == ProfilePart::dropped) j[kCsCountsKey] = false;
  if (v.branch_marks == ProfilePart::dropped) j["branch_marks"] = false;
  if (v.layout == ProfilePart::dropped) j["layout"] = false;
  return j;
}

std::optional<Variant> variant_from_knobs_json(VariantBase base, const nlohmann::json& j) {
  auto knobs = knobs_from_json(j);
  if (!knobs) return std::nullopt;
  Variant v;
  v.base = base;
  v.knobs = *knobs;
  auto part = [&](const char* key, ProfilePart& out) {
    auto it = j.find(key);
    if (it == j.end()) return true;
    if (!it->is_boolean()) return false;
    out = it->get<bool>() ? ProfilePart::kept : ProfilePart::dropped;
    return true;
  };
  if (!part(kCsCountsKey, v.cs_counts) || !part("branch_marks", v.branch_marks) ||
      !part("layout", v.layout))
    return std::nullopt;
  return v;
}

bool incumbent_drops_cs(const GuardRecord& record) {
  if (record.incumbent_base != VariantBase::profiled || record.incumbent_knobs.is_null())
    return false;
  auto v = variant_from_knobs_json(VariantBase::profiled, record.incumbent_knobs);
  return v && v->cs_counts == ProfilePart::dropped;
}

ProfileDoc variant_doc(const Variant& v, const ProfileDoc& current) {
  ProfileDoc doc;
  doc.knobs = v.knobs;
  if (v.base == VariantBase::plain) {
    doc.knobs.mode = CompileMode::plain;
    return doc;
  }
  doc.knobs.mode.reset();
  doc.functions = current.functions;
  if (v.cs_counts == ProfilePart::kept) doc.cs_functions = current.cs_functions;
  doc.outside_functions = current.outside_functions;
  if (v.branch_marks == ProfilePart::dropped) {
    for (auto& [name, f] : doc.functions)
      f.unpredictable.clear();
    for (auto& [name, f] : doc.cs_functions)
      f.unpredictable.clear();
  }
  if (v.layout == ProfilePart::dropped)
    for (auto& [name, f] : doc.functions)
      f.layout = FunctionLayout::normal;
  return doc;
}

std::optional<Variant> knob_variant(const Variant& from, int step, const ProfileDoc* current) {
  Variant v = from;
  Knobs& k = v.knobs;
  switch (step) {
  case knob_step::opt_level: // more optimisation (or back to O2 when the incumbent is O3)
    k.opt_level = from.knobs.opt_level >= 3 ? 2 : 3;
    break;
  case knob_step::text32: // the code half a cache line further on (docs/jit.md, "Text offset")
  case knob_step::text16: // a quarter
  case knob_step::text48: // three quarters
  {
    const int offset = step == knob_step::text32 ? 32 : step == knob_step::text16 ? 16 : 48;
    // (or back to 0 from that offset, as O3 goes back to O2)
    k.text_offset = from.knobs.text_offset == offset ? 0 : offset;
    // A plain incumbent beside a profile is there because the profiled build
    // lost its trial at one placement; placement alone moves a kernel by as
    // much as a profile does (docs/jit.md, "Text offset"), so the offset
    // steps give the current profile its chance at the other placements.
    // (Guarded profiles never set a mode, so choose_mode says whether it has counts.)
    if (from.base == VariantBase::plain && current &&
        choose_mode(current) == CompileMode::optimized) {
      v.base = VariantBase::profiled;
      v.version = 0; // the current profile's counts
    }
    break;
  }
  case knob_step::cs_counts: // the context-sensitive round's counts (CSIRUse after the inliner)
    if (from.base != VariantBase::profiled || !current || !has_cs_counts(*current))
      return std::nullopt;
    v.cs_counts = toggled(from.cs_counts);
    break;
  case knob_step::marks: // the sampled !unpredictable marks (select/cmov for the marked branches)
    if (from.base != VariantBase::profiled || !current || !has_marks(*current)) return std::nullopt;
    v.branch_marks = toggled(from.branch_marks);
    break;
  case knob_step::layout: // the sampled i-cache layout (hot functions first, cold apart and for
                          // size)
    if (from.base != VariantBase::profiled || !current || !has_layout(*current))
      return std::nullopt;
    v.layout = toggled(from.layout);
    break;
  case knob_step::unroll: // unrolling grows hot loops: it can cost i-cache
    k.unroll = !from.knobs.unroll;
    break;
  case knob_step::vectorize:
    k.vectorize = !from.knobs.vectorize;
    break;
  case knob_step::inline500: // aggressive inlining
    k.inline_threshold = from.knobs.inline_threshold == 500 ? std::optional<int>() : 500;
    break;
  case knob_step::inline75: // conservative inlining
    k.inline_threshold = from.knobs.inline_threshold == 75 ? std::optional<int>() : 75;
    break;
  default:
    return std::nullopt;
  }
  return v;
}

Arms arms_of(const GuardRecord& record, const ProfileDoc& current,
             const std::string& current_digest, std::int64_t stages_seen,
             const GuardConfig& config) {
  Arms a;
  a.incumbent = recorded_incumbent(record, current);
  if (a.incumbent.base == VariantBase::profiled) a.incumbent.version = record.incumbent_version;
  if (record.trialled_digest != current_digest) {
    if (!record.incumbent_base && stages_seen < config.min_stages) {
      a.incumbent.base = VariantBase::profiled;
      a.waiting = true;
      return a;
    }
    // A new profile, tried against what is served now: the plain build
    // before any verdict, or the earlier profile's build that won. A record
    // written before profiled incumbents kept their version (0) cannot name
    // that build: the plain build stands in, as it did then.
    if (a.incumbent.base == VariantBase::profiled && a.incumbent.version == 0)
      a.incumbent.base = VariantBase::plain;
    // The new profile with the incumbent's knobs and sampled parts.
    Variant candidate = a.incumbent;
    candidate.base = VariantBase::profiled;
    candidate.version = 0;
    a.candidate = candidate;
    a.kind = TrialKind::profile;
    return a;
  }
  // The budget counts variants tried, not steps passed over.
  int tried = 0;
  for (int s = 0; s < std::min(record.tuning_step, kKnobVariants); ++s)
    if (knob_variant(a.incumbent, s, &current)) ++tried;
  if (tried >= config.tune_max_variants) return a;
  int step = 0;
  std::optional<Variant> first =
      first_applicable(a.incumbent, record.tuning_step, kKnobVariants, current, step);
  if (!first) return a;
  if (stages_seen >= config.tune_min_stages) {
    a.candidate = std::move(first);
    a.kind = TrialKind::tuning;
    a.step = step;
    int after = 0;
    if (tried + 1 < config.tune_max_variants)
      a.next = first_applicable(a.incumbent, step + 1, kKnobVariants, current, after);
  } else if (2 * stages_seen >= config.tune_min_stages) {
    // Halfway to tuning: its first variant is compiled ahead of its trial.
    a.next = std::move(first);
  }
  return a;
}

std::string stage_shape(const std::string& entry, const PreparedCall& call) {
  std::string s = entry + "(";
  for (std::size_t i = 0; i < call.slots.size(); ++i) {
    if (i) s += ",";
    int b = i < call.buffer_of_param.size() ? call.buffer_of_param[i] : -1;
    if (b >= 0 && static_cast<std::size_t>(b) < call.buffers.size()) {
      const Buffer& buf = call.buffers[static_cast<std::size_t>(b)];
      s += std::string(to_string(buf.elem)) + "[" + std::to_string(buf.bytes.size()) + "B]";
    } else {
      char hex[20];
      std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(call.slots[i]));
      s += hex;
    }
  }
  return s + ")";
}

Arm kept_arm(const TrialResult& result) {
  // Only a candidate shown faster is kept: a trial that could not tell the
  // builds apart keeps what was served (docs/guard.md, "What no difference
  // keeps").
  return result.verdict == Verdict::accepted ? Arm::candidate : Arm::incumbent;
}

} // namespace fdo::daemon
