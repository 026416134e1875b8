#include "block_map.h"

#include <algorithm>
#include <limits>
#include <llvm/BinaryFormat/Dwarf.h>
#include <llvm/DebugInfo/DWARF/DWARFContext.h>
#include <llvm/IR/DIBuilder.h>
#include <llvm/IR/DebugInfoMetadata.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/ProfDataUtils.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/ProfileData/InstrProf.h>

namespace fdo::jit {

const BlockRange* find_block(std::span<const BlockRange> ranges, std::uint64_t offset) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), offset,
                             [](std::uint64_t off, const BlockRange& r) { return off < r.offset; });
  if (it == ranges.begin()) return nullptr;
  --it;
  return offset < std::uint64_t{it->offset} + it->size ? &*it : nullptr;
}

} // namespace fdo::jit

namespace fdo::jit::detail {

namespace {
// A DILocation column is 16 bits wide; branches past it keep their block only.
constexpr std::uint32_t kMaxColumn = std::numeric_limits<std::uint16_t>::max();
} // namespace

void add_block_locations(llvm::Module& m) {
  llvm::DIBuilder dib(m);
  llvm::DIFile* unit_file = dib.createFile("fdo-canonical-ir", "");
  dib.createCompileUnit(llvm::dwarf::DW_LANG_C, unit_file, "fdo", /*isOptimized=*/true, "", 0, "",
                        llvm::DICompileUnit::LineTablesOnly, 0, /*SplitDebugInlining=*/false,
                        /*DebugInfoForProfiling=*/false,
                        llvm::DICompileUnit::DebugNameTableKind::None);
  llvm::DISubroutineType* type = dib.createSubroutineType(dib.getOrCreateTypeArray({}));
  llvm::LLVMContext& ctx = m.getContext();
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    // The file names the function: code inlined elsewhere keeps it, so its
    // samples count for the block of the function it came from.
    llvm::DIFile* file = dib.createFile(llvm::getPGOFuncName(f), "");
    auto flags = llvm::DISubprogram::SPFlagDefinition | llvm::DISubprogram::SPFlagOptimized;
    if (f.hasLocalLinkage()) flags |= llvm::DISubprogram::SPFlagLocalToUnit;
    llvm::DISubprogram* sp = dib.createFunction(file, f.getName(), "", file, /*LineNo=*/1, type,
                                                /*ScopeLine=*/1, llvm::DINode::FlagZero, flags);
    f.setSubprogram(sp);
    std::uint32_t block = 0, branch = 0;
    for (llvm::BasicBlock& bb : f) {
      std::uint32_t column = 0;
      // The same order as conditional_branches() in pgo.cpp.
      if (auto* br = llvm::dyn_cast<llvm::BranchInst>(bb.getTerminator());
          br != nullptr && br->isConditional()) {
        column = branch + 1 <= kMaxColumn ? branch + 1 : 0;
        ++branch;
      }
      llvm::DILocation* loc = llvm::DILocation::get(ctx, block + 1, column, sp);
      for (llvm::Instruction& inst : bb)
        inst.setDebugLoc(loc);
      ++block;
    }
  }
  dib.finalize();
  m.addModuleFlag(llvm::Module::Warning, "Debug Info Version", llvm::DEBUG_METADATA_VERSION);
  m.addModuleFlag(llvm::Module::Warning, "Dwarf Version", 5);
}

std::map<std::string, std::vector<BranchWeight>> read_branch_weights(const llvm::Module& m) {
  std::map<std::string, std::vector<BranchWeight>> out;
  for (const llvm::Function& f : m) {
    const llvm::DISubprogram* sp = f.getSubprogram();
    if (f.isDeclaration() || sp == nullptr) continue;
    std::map<std::uint32_t, BranchWeight> by_index;
    for (const llvm::BasicBlock& bb : f) {
      const auto* br = llvm::dyn_cast<llvm::BranchInst>(bb.getTerminator());
      if (br == nullptr || !br->isConditional()) continue;
      const llvm::DebugLoc& dl = br->getDebugLoc();
      if (!dl || dl.getInlinedAt() != nullptr || dl.getCol() == 0 ||
          dl->getScope()->getSubprogram() != sp)
        continue;
      std::uint64_t taken = 0, not_taken = 0;
      if (!llvm::extractBranchWeights(*br, taken, not_taken)) continue;
      // Early cleanup may have duplicated a branch (jump threading): its
      // copies share the location, and their weights add up.
      BranchWeight& w = by_index[dl.getCol() - 1];
      w.index = dl.getCol() - 1;
      w.taken += taken;
      w.not_taken += not_taken;
    }
    if (by_index.empty()) continue;
    auto& list = out[llvm::getPGOFuncName(f)];
    for (auto& [index, w] : by_index)
      list.push_back(w);
  }
  return out;
}

namespace {
struct Segment {
  std::uint64_t start = 0, end = 0; // section offsets
  std::string function;
  std::uint32_t line = 0, column = 0;
};

BlockRange to_range(const Segment& s, std::uint64_t symbol_start, std::uint64_t start,
                    std::uint64_t end) {
  BlockRange r;
  r.offset = static_cast<std::uint32_t>(start - symbol_start);
  r.size = static_cast<std::uint32_t>(end - start);
  r.function = s.function;
  r.block = s.line - 1;
  r.branch = s.column == 0 ? -1 : static_cast<std::int32_t>(s.column - 1);
  return r;
}
// Rows codegen adds without an instruction's location (the prologue takes the
// subprogram's line, column 0) name the block but not its branch. A block has
// one branch index or none, so every range of a block gets the one any of its
// rows names; neighbours that then agree become one range.
std::vector<FunctionBlocks> with_branches_filled(std::vector<FunctionBlocks> map) {
  std::map<std::pair<std::string, std::uint32_t>, std::int32_t> branch_of;
  for (const FunctionBlocks& fb : map)
    for (const BlockRange& r : fb.ranges)
      if (r.branch >= 0) branch_of[{r.function, r.block}] = r.branch;
  for (FunctionBlocks& fb : map) {
    std::vector<BlockRange> merged;
    for (BlockRange& r : fb.ranges) {
      if (auto it = branch_of.find({r.function, r.block}); it != branch_of.end())
        r.branch = it->second;
      if (!merged.empty()) {
        BlockRange& last = merged.back();
        if (last.offset + last.size == r.offset && last.function == r.function &&
            last.block == r.block && last.branch == r.branch) {
          last.size += r.size;
          continue;
        }
      }
      merged.push_back(std::move(r));
    }
    fb.ranges = std::move(merged);
  }
  return map;
}
} // namespace

llvm::Expected<std::vector<FunctionBlocks>> read_block_map(std::string_view object) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object.data(), object.size()), "object"));
  if (!file) return file.takeError();
  std::string problems;
  auto note = [&](llvm::Error e) {
    if (!problems.empty()) problems += "; ";
    problems += llvm::toString(std::move(e));
  };
  std::unique_ptr<llvm::DWARFContext> dwarf = llvm::DWARFContext::create(
      **file, llvm::DWARFContext::ProcessDebugRelocations::Process, nullptr, "", note, note);

  // Line-table rows, by the section they describe: in a relocatable object
  // every address is an offset into its section.
  std::map<std::uint64_t, std::vector<Segment>> by_section;
  for (const auto& unit : dwarf->compile_units()) {
    const llvm::DWARFDebugLine::LineTable* table = dwarf->getLineTableForUnit(unit.get());
    if (table == nullptr) continue;
    const auto& rows = table->Rows;
    for (std::size_t i = 0; i + 1 < rows.size(); ++i) {
      const auto& row = rows[i];
      const auto& next = rows[i + 1];
      if (row.EndSequence || row.Line == 0 ||
          next.Address.SectionIndex != row.Address.SectionIndex ||
          next.Address.Address <= row.Address.Address)
        continue;
      std::string name;
      if (!table->getFileNameByIndex(row.File, "",
                                     llvm::DILineInfoSpecifier::FileLineInfoKind::RawValue, name))
        continue;
      by_section[row.Address.SectionIndex].push_back(
          {row.Address.Address, next.Address.Address, std::move(name), row.Line, row.Column});
    }
  }
  if (!problems.empty() && by_section.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot read the object's line table: " + problems);
  for (auto& [section, segments] : by_section)
    std::sort(segments.begin(), segments.end(),
              [](const Segment& a, const Segment& b) { return a.start < b.start; });

  std::vector<FunctionBlocks> out;
  const auto* elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(file->get());
  if (elf == nullptr) return out;
  for (const llvm::object::ELFSymbolRef& sym : elf->symbols()) {
    auto type = sym.getType();
    auto name = sym.getName();
    auto section = sym.getSection();
    auto value = sym.getValue();
    if (!type || !name || !section || !value) {
      if (!type) llvm::consumeError(type.takeError());
      if (!name) llvm::consumeError(name.takeError());
      if (!section) llvm::consumeError(section.takeError());
      if (!value) llvm::consumeError(value.takeError());
      continue;
    }
    if (*type != llvm::object::SymbolRef::ST_Function || *section == elf->section_end() ||
        name->empty())
      continue;
    auto segments = by_section.find((*section)->getIndex());
    if (segments == by_section.end()) continue;
    const std::uint64_t start = *value, end = *value + sym.getSize();
    FunctionBlocks fb;
    fb.symbol = name->str();
    auto it = std::upper_bound(segments->second.begin(), segments->second.end(), start,
                               [](std::uint64_t v, const Segment& s) { return v < s.start; });
    if (it != segments->second.begin()) --it;
    for (; it != segments->second.end() && it->start < end; ++it) {
      const std::uint64_t lo = std::max(it->start, start), hi = std::min(it->end, end);
      if (lo >= hi) continue;
      // Neighbouring rows of one block are merged by with_branches_filled().
      fb.ranges.push_back(to_range(*it, start, lo, hi));
    }
    if (!fb.ranges.empty()) out.push_back(std::move(fb));
  }
  return with_branches_filled(std::move(out));
}

} // namespace fdo::jit::detail
