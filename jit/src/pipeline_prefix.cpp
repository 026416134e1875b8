#include "pipeline_prefix.h"

#include "fdo/util/hash.h"
#include "fdo/util/profile.h"
#include "pipeline_options.h"

#include <llvm/ADT/SmallVector.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

namespace fdo::jit::detail {

namespace {

bool is_pgo_pass(llvm::StringRef pass) {
  return pass == "PGOInstrumentationGen" || pass == "PGOInstrumentationUse";
}

// Use-list order kept, so that the module read back is the one the prefix
// left in every respect a later pass could see: a compile that ran the
// prefix and one that read it back build the same object.
llvm::SmallVector<char, 0> write_bitcode(const llvm::Module& m) {
  llvm::SmallVector<char, 0> out;
  llvm::raw_svector_ostream os(out);
  llvm::WriteBitcodeToFile(m, os, /*ShouldPreserveUseListOrder=*/true);
  return out;
}

llvm::Expected<std::unique_ptr<llvm::Module>> read_bitcode(std::string_view bytes,
                                                           llvm::LLVMContext& ctx) {
  return llvm::parseBitcodeFile(
      llvm::MemoryBufferRef(llvm::StringRef(bytes.data(), bytes.size()), "prefix"), ctx);
}

std::string_view view(const llvm::SmallVector<char, 0>& bytes) {
  return {bytes.data(), bytes.size()};
}

// False when the pipeline has no PGO pass to stop at (then it ran whole).
bool run_prefix(llvm::Module& m, const PrefixPipeline& p) {
  PrefixCut cut(PrefixCut::Side::prefix);
  llvm::PassInstrumentationCallbacks pic;
  cut.register_callbacks(pic);
  run_default_pipeline(m, *p.tm, p.tuning, p.pgo, pic, p.level);
  return cut.reached();
}

} // namespace

bool PrefixCut::runs(llvm::StringRef pass) {
  if (!reached_ && is_pgo_pass(pass)) reached_ = true;
  return (side_ == Side::rest) == reached_;
}

void PrefixCut::register_callbacks(llvm::PassInstrumentationCallbacks& pic) {
  pic.registerShouldRunOptionalPassCallback(
      [this](llvm::StringRef pass, llvm::Any) { return runs(pass); });
}

std::string prefix_key(const llvm::Module& m, const fdo::Knobs& knobs) {
  // What pipeline_options.h makes of the knobs, and nothing else of them:
  // the knobs that only later passes or the loader read (text offset, value
  // specialization, cold code, a mode override) leave the prefix alone.
  const llvm::PipelineTuningOptions t = tuning_options(knobs);
  std::string settings = host_identity().canonical();
  settings += ";opt=" + std::to_string(knobs.opt_level) +
              ";size=" + std::to_string(knobs.size_level) +
              ";codegen=" + std::to_string(static_cast<int>(codegen_level(knobs))) +
              ";unroll=" + std::to_string(t.LoopUnrolling) +
              ";interleave=" + std::to_string(t.LoopInterleaving) +
              ";vectorize=" + std::to_string(t.LoopVectorization) +
              ";slp=" + std::to_string(t.SLPVectorization) +
              ";inline=" + std::to_string(t.InlinerThreshold);
  Hasher h;
  h.update_field("fdo-prefix-v1").update_field(settings);
  h.update_field(view(write_bitcode(m)));
  return h.hex();
}

llvm::Expected<PrefixBuild> bring_to_prefix(std::unique_ptr<llvm::Module>& module,
                                            llvm::LLVMContext& fresh,
                                            const PrefixPipeline& pipeline, std::string key,
                                            const std::optional<HeldPrefix>& held) {
  PrefixBuild build;
  build.key = std::move(key);
  std::string_view bitcode;
  if (held) {
    if (held->key != build.key)
      build.origin = PrefixOrigin::input_changed;
    else if (blake3_hex(held->bitcode) != held->bitcode_hash)
      build.origin = PrefixOrigin::held_damaged;
    else
      bitcode = held->bitcode;
  }
  if (!bitcode.empty()) {
    auto read = read_bitcode(bitcode, fresh);
    if (read) {
      module = std::move(*read);
      build.bitcode_hash = held->bitcode_hash;
      build.origin = PrefixOrigin::reused;
      return build;
    }
    // Its hash matched, yet it does not read: not ours to trust either.
    llvm::consumeError(read.takeError());
    build.origin = PrefixOrigin::held_damaged;
  }
  if (!run_prefix(*module, pipeline))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the pipeline has no PGO pass to end its prefix at");
  auto written = write_bitcode(*module);
  build.bitcode.assign(written.data(), written.size());
  build.bitcode_hash = blake3_hex(build.bitcode);
  // The compile goes on from the module read back, as one that takes this
  // prefix later will: a module that ran the prefix in memory carries what
  // its bitcode does not (attribute groups no value uses any more, the
  // numbering of names made unique), and the parts cut from it would differ
  // in bitcode, and so in key, from the same parts cut from the prefix read
  // back (the objects do not).
  auto again = read_bitcode(build.bitcode, fresh);
  if (!again) return again.takeError();
  module = std::move(*again);
  return build;
}

} // namespace fdo::jit::detail
