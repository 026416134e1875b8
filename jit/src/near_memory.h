// The loader's JITLink memory manager (docs/jit.md, "Where code is
// mapped"): each linked graph gets its own mapping, as LLVM's
// InProcessMemoryManager gives it, but placed just below the process's main
// executable instead of among the shared libraries. A call from the
// executable (an exec worker's thunk call, a runtime's native entry) into
// code more than 4 GB away costs ~0.9 ns more per call on the x86-64 hosts
// measured (bench/inprocess/README.md); next to it, none.
//
// Placement is best effort: where the room below the executable is taken,
// or the executable's bounds are unknown, the kernel picks the address.
// Everything else is what InProcessMemoryManager does: segments page-aligned
// in one mapping (standard-lifetime segments first), protections applied at
// finalization, finalize actions run then (their deallocation actions kept),
// finalize-lifetime segments unmapped after them, and everything unmapped
// (deallocation actions first) when the graph is removed.
#pragma once

#include <cstdint>
#include <llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h>
#include <map>
#include <memory>
#include <mutex>

namespace fdo::jit::detail {

class NearMemoryManager final : public llvm::jitlink::JITLinkMemoryManager {
public:
  NearMemoryManager();
  ~NearMemoryManager() override;

  void allocate(const llvm::jitlink::JITLinkDylib* jd, llvm::jitlink::LinkGraph& g,
                OnAllocatedFunction on_allocated) override;
  using JITLinkMemoryManager::allocate;
  void deallocate(std::vector<FinalizedAlloc> allocs,
                  OnDeallocatedFunction on_deallocated) override;
  using JITLinkMemoryManager::deallocate;

private:
  class InFlight;
  struct Finalized;

  // A fresh read-write mapping of `size` bytes, below the executable where
  // there is room.
  void* map(std::size_t size);
  void unmap(void* base, std::size_t size);

  std::size_t page_;
  std::uintptr_t exe_low_ = 0; // lowest address of the executable's image; 0: unknown
  std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> near_; // our live mappings below the executable
};

} // namespace fdo::jit::detail
