// Code layout from the profile's per-function placement (docs/perf.md,
// "i-cache layout"). The daemon's policy marks the functions where sampled
// L1 i-cache misses concentrate `hot` and the functions the profile saw never
// run `cold` (FunctionProfile::layout); the compile worker turns that into
// attributes, section prefixes, function order and split-out cold blocks, and
// the loader lays the object's text out hot first, cold last.
#pragma once

#include "fdo/util/profile.h"

#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>
#include <optional>

namespace fdo::jit::detail {

// The profile's placement decisions for one optimized compile. Absent (see
// from()) when the profile places nothing, so programs without decisions
// compile exactly as before.
class CodeLayout {
public:
  // nullopt unless `mode` is optimized and some function of `profile` has a
  // layout other than normal.
  static std::optional<CodeLayout> from(const fdo::ProfileDoc* profile, fdo::CompileMode mode);

  // Before the pass pipeline: cold functions become `cold`, `optsize` and
  // `minsize`, so the mid-level passes already optimise them for size
  // (functions the optimizer must not touch, `optnone`, are left alone).
  void before_pipeline(llvm::Module& m) const;
  // Turns on LLVM's machine function splitter for this compile's target
  // machine (TargetOptions, not the process-global -enable-split-machine-
  // functions): blocks the profile saw never run move to a `.text.split.<fn>`
  // section (symbol `<fn>.cold`), out of the hot and plain text.
  void configure_codegen(llvm::TargetMachine& tm) const;
  // After the pipeline, before codegen: hot functions get the `hot` attribute
  // and the `.text.hot` section prefix and move to the front of the module,
  // cold ones (and those the profile's own counts made cold) the
  // `.text.unlikely` prefix and the end, so the object lists them in that order.
  void before_codegen(llvm::Module& m) const;

private:
  explicit CodeLayout(const fdo::ProfileDoc& profile) : profile_(&profile) {}
  fdo::FunctionLayout layout_of(const llvm::Function& f) const;

  const fdo::ProfileDoc* profile_;
};

// In the loader, before memory is allocated: puts the blocks of every
// executable `.text*` section of `g` into one section in the order hot
// (`.text.hot*`), plain, cold (`.text.unlikely*`, `.text.split*`), each
// section's blocks in their object order. JITLink lays a segment out by
// section ordinal, and `.text` always comes first in an object, so without
// this `.text.hot` would land after the plain text. No-op for a graph without
// hot or cold text.
llvm::Error order_text_sections(llvm::jitlink::LinkGraph& g);

// Whether `offset` is a text offset the knob can have (0, 16, 32 or 48).
inline bool valid_text_offset(long long offset) {
  return offset >= 0 && offset < fdo::kTextOffsetWindow && offset % fdo::kTextOffsetStep == 0;
}

// In the loader, after order_text_sections: puts `offset` bytes of padding
// (int3) aligned to 64 in front of the graph's first executable section, so
// that its code starts `offset` bytes past a 64-byte boundary of the
// allocation's page-aligned code segment (Knobs::text_offset). An offset that
// is negative, not below 64 or not a multiple of 16 fails the link. No-op at
// 0 or for a graph without code.
llvm::Error offset_text(llvm::jitlink::LinkGraph& g, int offset);

} // namespace fdo::jit::detail
