#include "code_layout.h"

#include <algorithm>
#include <llvm/IR/Attributes.h>
#include <llvm/ProfileData/InstrProf.h>
#include <llvm/Support/MathExtras.h>
#include <type_traits>
#include <vector>

namespace fdo::jit::detail {

std::optional<CodeLayout> CodeLayout::from(const fdo::ProfileDoc* profile, fdo::CompileMode mode) {
  if (profile == nullptr || mode != fdo::CompileMode::optimized) return std::nullopt;
  const bool places =
      std::any_of(profile->functions.begin(), profile->functions.end(),
                  [](const auto& f) { return f.second.layout != fdo::FunctionLayout::normal; });
  if (!places) return std::nullopt;
  return CodeLayout(*profile);
}

fdo::FunctionLayout CodeLayout::layout_of(const llvm::Function& f) const {
  if (f.isDeclaration()) return fdo::FunctionLayout::normal;
  auto it = profile_->functions.find(llvm::getPGOFuncName(f));
  return it == profile_->functions.end() ? fdo::FunctionLayout::normal : it->second.layout;
}

void CodeLayout::before_pipeline(llvm::Module& m) const {
  for (llvm::Function& f : m) {
    if (layout_of(f) != fdo::FunctionLayout::cold) continue;
    // The verifier rejects optsize/minsize beside optnone.
    if (f.hasFnAttribute(llvm::Attribute::OptimizeNone)) continue;
    f.addFnAttr(llvm::Attribute::Cold);
    f.addFnAttr(llvm::Attribute::OptimizeForSize);
    f.addFnAttr(llvm::Attribute::MinSize);
  }
}

void CodeLayout::configure_codegen(llvm::TargetMachine& tm) const {
  // Not LLVM's IR hot/cold splitting: in LLVM 16 it also marks every function
  // whose *entry* count is cold `cold minsize`, among them an entry function
  // called once around the program's hottest loop.
  tm.Options.EnableMachineFunctionSplitter = true;
}

void CodeLayout::before_codegen(llvm::Module& m) const {
  std::vector<llvm::Function*> hot, cold;
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    const fdo::FunctionLayout layout = layout_of(f);
    if (layout == fdo::FunctionLayout::hot) {
      // CodeGenPrepare gives `hot` functions the .text.hot prefix whatever
      // the profile's counts say; set it here too so the decision is ours.
      f.addFnAttr(llvm::Attribute::Hot);
      f.setSectionPrefix("hot");
      hot.push_back(&f);
    } else if (layout == fdo::FunctionLayout::cold || f.hasFnAttribute(llvm::Attribute::Cold)) {
      // Also the functions the profile's own counts made cold.
      f.setSectionPrefix("unlikely");
      cold.push_back(&f);
    }
  }
  auto& list = m.getFunctionList();
  // Hot functions first, in module order; cold ones last.
  for (auto it = hot.rbegin(); it != hot.rend(); ++it)
    list.splice(list.begin(), list, (*it)->getIterator());
  for (llvm::Function* f : cold)
    list.splice(list.end(), list, f->getIterator());
}

namespace {
// 0: hot, 1: plain, 2: cold; nullopt: not a text section this orders.
std::optional<int> text_rank(const llvm::jitlink::Section& s) {
  const llvm::StringRef name = s.getName();
  using Bits = std::underlying_type_t<llvm::orc::MemProt>;
  if ((static_cast<Bits>(s.getMemProt()) & static_cast<Bits>(llvm::orc::MemProt::Exec)) == 0)
    return std::nullopt;
  if (name != ".text" && !name.starts_with(".text.")) return std::nullopt;
  if (name.starts_with(".text.hot")) return 0;
  if (name.starts_with(".text.unlikely") || name.starts_with(".text.split") ||
      name.starts_with(".text.cold"))
    return 2;
  return 1;
}
} // namespace

llvm::Error order_text_sections(llvm::jitlink::LinkGraph& g) {
  struct Ranked {
    int rank;
    llvm::jitlink::Section* section;
  };
  std::vector<Ranked> text;
  bool placed = false;
  for (llvm::jitlink::Section& s : g.sections()) {
    if (s.blocks().empty()) continue;
    if (auto rank = text_rank(s)) {
      text.push_back({*rank, &s});
      placed |= *rank != 1;
    }
  }
  if (!placed) return llvm::Error::success();
  // The destination keeps the lowest ordinal, so the merged text stays where
  // `.text` was among the graph's sections.
  llvm::jitlink::Section* into =
      std::min_element(text.begin(), text.end(), [](const Ranked& a, const Ranked& b) {
        return a.section->getOrdinal() < b.section->getOrdinal();
      })->section;
  std::stable_sort(text.begin(), text.end(), [](const Ranked& a, const Ranked& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.section->getOrdinal() < b.section->getOrdinal();
  });
  // Blocks are laid out by (section ordinal, address); in a relocatable
  // object every section's blocks start at 0, so give them consecutive
  // provisional addresses in the wanted order before they share a section.
  // Allocation assigns the real addresses afterwards.
  std::uint64_t next = 0;
  for (const Ranked& r : text) {
    std::vector<llvm::jitlink::Block*> blocks(r.section->blocks().begin(),
                                              r.section->blocks().end());
    std::sort(blocks.begin(), blocks.end(), [](const auto* a, const auto* b) {
      return a->getAddress() != b->getAddress() ? a->getAddress() < b->getAddress()
                                                : a->getSize() < b->getSize();
    });
    for (llvm::jitlink::Block* b : blocks) {
      const std::uint64_t align = std::max<std::uint64_t>(b->getAlignment(), 1);
      next = llvm::alignTo(next, align) + b->getAlignmentOffset();
      b->setAddress(llvm::orc::ExecutorAddr(next));
      next += std::max<std::uint64_t>(b->getSize(), 1);
    }
  }
  for (const Ranked& r : text)
    if (r.section != into) g.mergeSections(*into, *r.section);
  return llvm::Error::success();
}

llvm::Error offset_text(llvm::jitlink::LinkGraph& g, int offset) {
  if (offset == 0) return llvm::Error::success();
  if (!valid_text_offset(offset))
    return llvm::make_error<llvm::StringError>(
        "text offset " + std::to_string(offset) + " is not 0, 16, 32 or 48",
        llvm::inconvertibleErrorCode());
  using Bits = std::underlying_type_t<llvm::orc::MemProt>;
  // JITLink lays a segment (sections of one protection and deallocation
  // policy) out by section ordinal, then address, from the segment's start,
  // which the memory manager puts on a page boundary. So the code segment
  // starts with the lowest-ordinal executable section's lowest block.
  llvm::jitlink::Section* first = nullptr;
  for (llvm::jitlink::Section& s : g.sections()) {
    if (s.blocks().empty()) continue;
    if ((static_cast<Bits>(s.getMemProt()) & static_cast<Bits>(llvm::orc::MemProt::Exec)) == 0)
      continue;
    if (s.getMemDeallocPolicy() != llvm::orc::MemDeallocPolicy::Standard) continue;
    if (!first || s.getOrdinal() < first->getOrdinal()) first = &s;
  }
  if (!first) return llvm::Error::success();
  // Move the section's blocks up by a multiple of every block's alignment
  // (alignments are powers of two; order and alignment offsets unchanged),
  // so that the padding, at address 0, sorts first.
  std::uint64_t shift = fdo::kTextOffsetWindow;
  for (const llvm::jitlink::Block* b : first->blocks())
    shift = std::max<std::uint64_t>(shift, b->getAlignment());
  std::vector<llvm::jitlink::Block*> blocks(first->blocks().begin(), first->blocks().end());
  for (llvm::jitlink::Block* b : blocks)
    b->setAddress(b->getAddress() + shift);
  llvm::MutableArrayRef<char> pad = g.allocateBuffer(static_cast<std::size_t>(offset));
  std::fill(pad.begin(), pad.end(), static_cast<char>(0xcc)); // int3: never run
  g.createContentBlock(*first, pad, llvm::orc::ExecutorAddr(0),
                       static_cast<std::uint64_t>(fdo::kTextOffsetWindow), 0);
  return llvm::Error::success();
}

} // namespace fdo::jit::detail
