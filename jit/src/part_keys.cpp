#include "part_keys.h"

#include "fdo/util/hash.h"
#include "fdo/util/profile.h"

#include <algorithm>
#include <bit>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/ProfileSummary.h>
#include <memory>
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
  std::vector<llvm::ProfileSummaryEntry> detailed;
  for (const llvm::ProfileSummaryEntry& e : s->getDetailedSummary())
    detailed.emplace_back(e.Cutoff, floor_pow2(e.MinCount), round_num_counts(e.NumCounts));
  llvm::ProfileSummary rounded(s->getKind(), detailed, floor_pow2(s->getTotalCount()),
                               floor_pow2(s->getMaxCount()), floor_pow2(s->getMaxInternalCount()),
                               floor_pow2(s->getMaxFunctionCount()),
                               static_cast<std::uint32_t>(floor_pow2(s->getNumCounts())),
                               static_cast<std::uint32_t>(floor_pow2(s->getNumFunctions())),
                               s->isPartialProfile(), s->getPartialProfileRatio());
  m.setProfileSummary(rounded.getMD(m.getContext()), s->getKind());
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
