#include "part_keys.h"

#include "fdo/util/hash.h"
#include "fdo/util/profile.h"

#include <algorithm>
#include <bit>
#include <llvm/Analysis/ProfileSummaryInfo.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/ProfileSummary.h>
#include <memory>
#include <optional>
#include <vector>

namespace fdo::jit::detail {

namespace {

std::uint64_t floor_pow2(std::uint64_t v) {
  return v == 0 ? 0 : std::bit_floor(v);
}

// ProfileSummaryInfo's working-set thresholds (its cl::opt defaults,
// profile-summary-large/huge-working-set-size-threshold): a rounded count
// stays on the same side of both.
constexpr std::uint64_t kLargeWorkingSet = 12'500;
constexpr std::uint64_t kHugeWorkingSet = 15'000;

// An entry's count of counters is read only against those thresholds, and
// it moves with every count (fewer, larger counts reach a cutoff sooner):
// kept as which side of each it is on.
std::uint64_t round_num_counts(std::uint64_t n) {
  if (n == 0) return 0;
  if (n <= kLargeWorkingSet) return 1;
  if (n <= kHugeWorkingSet) return kLargeWorkingSet + 1;
  return kHugeWorkingSet + 1;
}

// The cutoffs read after the cut (LLVM 16's cl::opt defaults): hot
// (profile-summary-cutoff-hot), cold (profile-summary-cutoff-cold), the one
// profile-guided size optimization asks of an instrumentation profile
// (pgso-cutoff-instr-prof), and the machine function splitter's cold blocks
// (mfs-psi-cutoff; the i-cache layout turns the splitter on). No other
// cutoff is read in the pipelines fdo runs.
constexpr std::uint32_t kReadCutoffs[] = {950'000, 990'000, 999'950, 999'999};

// What a copy's multi-way branch weights add up to once normalized.
constexpr std::uint64_t kBranchWeightTotal = std::uint64_t{1} << 20;

// count * num / den, rounded down, saturated.
std::uint64_t scale(std::uint64_t count, std::uint64_t num, std::uint64_t den) {
  const unsigned __int128 v = static_cast<unsigned __int128>(count) * num / den;
  return v > ~std::uint64_t{0} ? ~std::uint64_t{0} : static_cast<std::uint64_t>(v);
}

// floor(sqrt(v)).
std::uint64_t isqrt(unsigned __int128 v) {
  std::uint64_t lo = 0, hi = ~std::uint64_t{0};
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
    if (static_cast<unsigned __int128>(mid) * mid <= v)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The entry count a copy gets for `c`: one count per class
// ProfileSummaryInfo tells apart — zero, cold, neither, hot — the same for
// every count of the class.
std::uint64_t class_count(std::uint64_t c, const llvm::ProfileSummaryInfo& psi) {
  if (c == 0) return 0;
  const std::uint64_t hot = psi.getOrCompHotCountThreshold();
  const std::uint64_t cold = psi.getOrCompColdCountThreshold();
  if (psi.isHotCount(c)) return hot;
  if (psi.isColdCount(c)) return cold;
  // cold < c < hot: their geometric mean, inside the same open range.
  const std::uint64_t lo = cold + 1, hi = hot - 1;
  return std::clamp(isqrt(static_cast<unsigned __int128>(lo) * hi), lo, hi);
}

void hash_metadata(Hasher& h, const llvm::Metadata* md) {
  if (const auto* s = llvm::dyn_cast_or_null<llvm::MDString>(md)) {
    h.update_u8(1).update_field(s->getString());
  } else if (const auto* c = llvm::dyn_cast_or_null<llvm::ConstantAsMetadata>(md)) {
    if (const auto* i = llvm::dyn_cast<llvm::ConstantInt>(c->getValue()))
      h.update_u8(2).update_u64(i->getZExtValue());
    else
      h.update_u8(3);
  } else if (const auto* n = llvm::dyn_cast_or_null<llvm::MDNode>(md)) {
    h.update_u8(4).update_u64(n->getNumOperands());
    for (const llvm::MDOperand& op : n->operands())
      hash_metadata(h, op.get());
  } else {
    h.update_u8(0);
  }
}

} // namespace

void round_profile_summary(llvm::Module& m) {
  llvm::Metadata* md = m.getProfileSummary(/*IsCS=*/false);
  if (!md) return;
  std::unique_ptr<llvm::ProfileSummary> s(llvm::ProfileSummary::getFromMD(md));
  if (!s) return;
  // Only the entries ProfileSummaryInfo answers the read cutoffs from: for
  // each, the first entry at or past it (its own lookup).
  const llvm::SummaryEntryVector& all = s->getDetailedSummary();
  std::vector<llvm::ProfileSummaryEntry> detailed;
  for (std::uint32_t cutoff : kReadCutoffs) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const llvm::ProfileSummaryEntry& e) { return e.Cutoff >= cutoff; });
    if (it == all.end() || (!detailed.empty() && detailed.back().Cutoff == it->Cutoff)) continue;
    detailed.emplace_back(it->Cutoff, floor_pow2(it->MinCount), round_num_counts(it->NumCounts));
  }
  // The totals and maxima are read by nothing after the cut: left out.
  llvm::ProfileSummary reduced(s->getKind(), detailed, 0, 0, 0, 0, 0, 0, s->isPartialProfile(),
                               s->getPartialProfileRatio());
  m.setProfileSummary(reduced.getMD(m.getContext()), s->getKind());
}

void normalize_import_profile(llvm::Function& copy, const llvm::ProfileSummaryInfo& psi) {
  std::optional<std::uint64_t> entry;
  std::optional<std::uint64_t> rep;
  // Classes need a summary: without one the counts are left as they are.
  if (auto c = copy.getEntryCount();
      c && c->getType() == llvm::Function::PCT_Real && psi.hasProfileSummary()) {
    entry = c->getCount();
    rep = class_count(*entry, psi);
    copy.setEntryCount(llvm::Function::ProfileCount(*rep, llvm::Function::PCT_Real));
  }
  llvm::LLVMContext& ctx = copy.getContext();
  for (llvm::BasicBlock& b : copy)
    for (llvm::Instruction& i : b) {
      llvm::MDNode* prof = i.getMetadata(llvm::LLVMContext::MD_prof);
      if (!prof || prof->getNumOperands() < 2) continue;
      const auto* kind = llvm::dyn_cast<llvm::MDString>(prof->getOperand(0));
      if (!kind) continue;
      std::vector<std::uint64_t> values;
      for (unsigned k = 1; k < prof->getNumOperands(); ++k) {
        const auto* c = llvm::mdconst::dyn_extract<llvm::ConstantInt>(prof->getOperand(k));
        if (!c) break;
        values.push_back(c->getZExtValue());
      }
      if (values.size() + 1 != prof->getNumOperands()) continue;
      const llvm::StringRef what = kind->getString();
      if (what == "branch_weights" && values.size() >= 2) {
        // Only their ratios are read: a fixed total, no weight made zero.
        std::uint64_t total = 0;
        for (std::uint64_t v : values)
          total += v;
        if (total == 0) continue;
        for (std::uint64_t& v : values)
          if (v != 0) v = std::max<std::uint64_t>(1, scale(v, kBranchWeightTotal, total));
      } else if (entry && *entry != 0 && what == "branch_weights" && llvm::isa<llvm::CallBase>(i)) {
        values[0] = scale(values[0], *rep, *entry); // a call's count, with the entry's
      } else if (entry && *entry != 0 && what == "VP" && values.size() >= 2) {
        // kind, total, then value/count pairs: the counts with the entry's.
        values[1] = scale(values[1], *rep, *entry);
        for (std::size_t k = 3; k < values.size(); k += 2)
          values[k] = scale(values[k], *rep, *entry);
      } else {
        continue;
      }
      std::vector<llvm::Metadata*> ops{prof->getOperand(0).get()};
      for (unsigned k = 1; k < prof->getNumOperands(); ++k) {
        auto* old = llvm::mdconst::extract<llvm::ConstantInt>(prof->getOperand(k));
        const unsigned bits = old->getType()->getIntegerBitWidth();
        const std::uint64_t most = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
        ops.push_back(llvm::ConstantAsMetadata::get(
            llvm::ConstantInt::get(old->getType(), std::min(values[k - 1], most))));
      }
      i.setMetadata(llvm::LLVMContext::MD_prof, llvm::MDNode::get(ctx, ops));
    }
}

std::string profile_slice_hash(const llvm::Module& part) {
  Hasher h;
  h.update_field("fdo-part-slice-v1");
  hash_metadata(h, part.getProfileSummary(/*IsCS=*/false));
  for (const llvm::Function& f : part) {
    if (f.isDeclaration()) continue;
    h.update_field(f.getName());
    hash_metadata(h, f.getMetadata(llvm::LLVMContext::MD_prof));
    for (const llvm::BasicBlock& b : f)
      for (const llvm::Instruction& i : b)
        if (const llvm::MDNode* prof = i.getMetadata(llvm::LLVMContext::MD_prof))
          hash_metadata(h, prof);
  }
  return h.hex();
}

std::string part_key(llvm::StringRef bitcode, const std::string& settings) {
  Hasher h;
  h.update_field("fdo-part-v1").update_field(settings);
  h.update_field(std::string_view(bitcode.data(), bitcode.size()));
  return h.hex();
}

void drop_unused_declarations(llvm::Module& part) {
  // Declarations hold no references, so erasing one leaves no other unused.
  std::vector<llvm::GlobalValue*> unused;
  auto unused_declaration = [](llvm::GlobalValue& g) {
    if (!g.isDeclaration()) return false;
    g.removeDeadConstantUsers();
    return g.use_empty();
  };
  for (llvm::Function& f : part)
    if (unused_declaration(f)) unused.push_back(&f);
  for (llvm::GlobalVariable& v : part.globals())
    if (!v.getName().startswith("llvm.") && unused_declaration(v)) unused.push_back(&v);
  for (llvm::GlobalValue* g : unused)
    g->eraseFromParent();
}

void strip_local_names(llvm::Module& part) {
  for (llvm::Function& f : part) {
    for (llvm::Argument& a : f.args())
      a.setName("");
    for (llvm::BasicBlock& b : f) {
      b.setName("");
      for (llvm::Instruction& i : b)
        i.setName("");
    }
  }
}

std::string part_settings(const CompileRequest& request, const std::vector<EntryInfo>& entries) {
  const Knobs knobs = request.profile ? request.profile->knobs : Knobs{};
  std::string s = host_identity().canonical();
  s += ";mode=" + std::string(to_string(request.mode));
  s += ";blocks=";
  s += request.block_locations == BlockLocations::on ? "on" : "off";
  s += ";knobs=" + canonical_json(to_json(knobs)) + ";entries=";
  for (const EntryInfo& e : entries) {
    s += e.name + "(";
    for (const std::string& p : e.param_types)
      s += p + ",";
    s += ")" + e.return_type + (e.return_signext ? "s" : "") + ";";
  }
  return s;
}

std::optional<std::string> PartReuse::offer(unsigned index, const llvm::Module& part,
                                            llvm::StringRef bitcode) {
  PartBuild b;
  b.key = part_key(bitcode, settings_);
  b.slice = profile_slice_hash(part);
  for (const llvm::Function& f : part)
    if (!f.isDeclaration() && !f.hasAvailableExternallyLinkage()) {
      if (b.functions++ == 0) b.first_function = f.getName().str();
    }
  std::optional<std::string> object;
  if (auto it = std::find_if(held_.begin(), held_.end(),
                             [&](const HeldPart& h) { return h.key == b.key; });
      it != held_.end()) {
    if (blake3_hex(it->object) == it->object_hash) {
      b.origin = PartOrigin::reused;
      b.object_hash = it->object_hash;
      object = std::string(it->object);
    } else {
      b.origin = PartOrigin::held_damaged;
    }
  } else if (index < held_.size()) {
    b.origin =
        held_[index].slice != b.slice ? PartOrigin::profile_changed : PartOrigin::input_changed;
  }
  if (builds_.size() <= index) builds_.resize(index + 1);
  builds_[index] = std::move(b);
  return object;
}

std::vector<PartBuild> PartReuse::finish(std::span<const std::string> objects) {
  builds_.resize(objects.size());
  for (std::size_t i = 0; i < objects.size(); ++i)
    if (builds_[i].object_hash.empty()) builds_[i].object_hash = blake3_hex(objects[i]);
  return std::move(builds_);
}

} // namespace fdo::jit::detail
