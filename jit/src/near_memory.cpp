#include "near_memory.h"

#include <algorithm>
#include <cstring>
#include <link.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/Shared/AllocationActions.h>
#include <llvm/Support/Memory.h>
#include <sys/mman.h>
#include <unistd.h>

namespace fdo::jit::detail {

namespace orc = llvm::orc;
namespace jitlink = llvm::jitlink;

namespace {

// Mappings go in the window [executable - kWindow, executable - kGap): all
// of it within 1 GiB of the executable's code, a call's reach and then some.
constexpr std::uintptr_t kGap = 2u << 20;
constexpr std::uintptr_t kWindow = 1u << 30;

// The lowest address of the main executable's loaded image (0: not found).
std::uintptr_t executable_low() {
  std::uintptr_t low = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        // The first object is the main program.
        std::uintptr_t lo = UINTPTR_MAX;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_LOAD)
            lo = std::min<std::uintptr_t>(lo, info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        *static_cast<std::uintptr_t*>(out) = lo == UINTPTR_MAX ? 0 : lo;
        return 1;
      },
      &low);
  return low;
}

bool has(orc::MemProt p, orc::MemProt bit) {
  return (static_cast<unsigned>(p) & static_cast<unsigned>(bit)) != 0;
}

int prot_of(orc::MemProt p) {
  return (has(p, orc::MemProt::Read) ? PROT_READ : 0) |
         (has(p, orc::MemProt::Write) ? PROT_WRITE : 0) |
         (has(p, orc::MemProt::Exec) ? PROT_EXEC : 0);
}

llvm::Error errno_error(const char* what) {
  return llvm::make_error<llvm::StringError>(std::string(what) + ": " + std::strerror(errno),
                                             llvm::inconvertibleErrorCode());
}

} // namespace

// What a finalized allocation keeps: its standard segments' mapping and the
// deallocation actions its finalize actions returned. A FinalizedAlloc's
// address is a pointer to one.
struct NearMemoryManager::Finalized {
  void* base;
  std::size_t size;
  std::vector<orc::shared::WrapperFunctionCall> dealloc;
};

class NearMemoryManager::InFlight final : public jitlink::JITLinkMemoryManager::InFlightAlloc {
public:
  InFlight(NearMemoryManager& mm, jitlink::LinkGraph& g, jitlink::BasicLayout bl, char* base,
           std::size_t standard, std::size_t finalize)
      : mm_(mm), g_(g), bl_(std::move(bl)), base_(base), standard_(standard), finalize_(finalize) {}

  void finalize(OnFinalizedFunction on_finalized) override {
    for (auto& [group, seg] : bl_.segments()) {
      const std::size_t size =
          llvm::alignTo(seg.ContentSize + seg.ZeroFillSize, static_cast<std::uint64_t>(mm_.page_));
      if (size == 0) continue;
      std::memset(seg.WorkingMem + seg.ContentSize, 0, seg.ZeroFillSize);
      if (::mprotect(seg.WorkingMem, size, prot_of(group.getMemProt())) != 0)
        return fail(std::move(on_finalized), errno_error("mprotect (JIT segment)"));
      if (has(group.getMemProt(), orc::MemProt::Exec))
        llvm::sys::Memory::InvalidateInstructionCache(seg.WorkingMem, size);
    }
    auto dealloc = orc::shared::runFinalizeActions(g_.allocActions());
    if (!dealloc) return fail(std::move(on_finalized), dealloc.takeError());
    // Finalize-lifetime segments (what only the finalize actions needed) go now.
    if (finalize_ != 0) mm_.unmap(base_ + standard_, finalize_);
    auto* kept = new Finalized{base_, standard_, std::move(*dealloc)};
    base_ = nullptr;
    on_finalized(FinalizedAlloc(orc::ExecutorAddr::fromPtr(kept)));
  }

  void abandon(OnAbandonedFunction on_abandoned) override {
    release();
    on_abandoned(llvm::Error::success());
  }

  ~InFlight() override { release(); }

private:
  void fail(OnFinalizedFunction on_finalized, llvm::Error e) {
    release();
    on_finalized(std::move(e));
  }
  void release() {
    if (base_ == nullptr) return;
    mm_.unmap(base_, standard_ + finalize_);
    base_ = nullptr;
  }

  NearMemoryManager& mm_;
  jitlink::LinkGraph& g_;
  jitlink::BasicLayout bl_;
  char* base_;
  std::size_t standard_, finalize_;
};

NearMemoryManager::NearMemoryManager()
    : page_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))), exe_low_(executable_low()) {}

NearMemoryManager::~NearMemoryManager() = default;

void NearMemoryManager::allocate(const jitlink::JITLinkDylib*, jitlink::LinkGraph& g,
                                 OnAllocatedFunction on_allocated) {
  jitlink::BasicLayout bl(g);
  auto sizes = bl.getContiguousPageBasedLayoutSizes(page_);
  if (!sizes) return on_allocated(sizes.takeError());
  const std::size_t total = sizes->total();
  char* base = total == 0 ? nullptr : static_cast<char*>(map(total));
  if (total != 0 && base == nullptr) return on_allocated(errno_error("mmap (JIT memory)"));
  // Standard-lifetime segments first, then those freed after finalization.
  char* standard = base;
  char* finalize = base + sizes->StandardSegs;
  for (auto& [group, seg] : bl.segments()) {
    char*& next =
        group.getMemDeallocPolicy() == orc::MemDeallocPolicy::Standard ? standard : finalize;
    seg.WorkingMem = next;
    seg.Addr = orc::ExecutorAddr::fromPtr(next);
    next += llvm::alignTo(seg.ContentSize + seg.ZeroFillSize, static_cast<std::uint64_t>(page_));
  }
  if (llvm::Error e = bl.apply()) {
    if (base != nullptr) unmap(base, total);
    return on_allocated(std::move(e));
  }
  on_allocated(std::make_unique<InFlight>(*this, g, std::move(bl), base, sizes->StandardSegs,
                                          sizes->FinalizeSegs));
}

void NearMemoryManager::deallocate(std::vector<FinalizedAlloc> allocs,
                                   OnDeallocatedFunction on_deallocated) {
  llvm::Error all = llvm::Error::success();
  for (FinalizedAlloc& fa : allocs) {
    std::unique_ptr<Finalized> f(fa.release().toPtr<Finalized*>());
    if (llvm::Error e = orc::shared::runDeallocActions(f->dealloc))
      all = llvm::joinErrors(std::move(all), std::move(e));
    if (f->base != nullptr && f->size != 0) unmap(f->base, f->size);
  }
  on_deallocated(std::move(all));
}

void* NearMemoryManager::map(std::size_t size) {
  if (exe_low_ > kWindow) {
    std::lock_guard lk(mu_);
    // First fit from the top of the window down, between our own live
    // mappings; the kernel refuses (MAP_FIXED_NOREPLACE) where anything
    // else lies.
    const std::uintptr_t floor = exe_low_ - kWindow;
    std::uintptr_t top = (exe_low_ - kGap) & ~(static_cast<std::uintptr_t>(page_) - 1);
    auto it = near_.rbegin();
    for (;;) {
      const std::uintptr_t bottom =
          it == near_.rend() ? floor : std::max(floor, it->first + it->second);
      if (top > bottom && top - bottom >= size) {
        void* want = reinterpret_cast<void*>(top - size);
        void* p = ::mmap(want, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == want) {
          near_.emplace(top - size, size);
          return p;
        }
        if (p != MAP_FAILED) ::munmap(p, size); // a kernel that took the flag as a hint
        break;
      }
      if (it == near_.rend()) break;
      top = std::min(top, it->first);
      ++it;
    }
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void NearMemoryManager::unmap(void* base, std::size_t size) {
  ::munmap(base, size);
  std::lock_guard lk(mu_);
  const auto at = reinterpret_cast<std::uintptr_t>(base);
  auto it = near_.upper_bound(at);
  if (it == near_.begin()) return;
  --it;
  if (it->first == at) {
    near_.erase(it);
  } else if (at < it->first + it->second) {
    // A finalize-lifetime tail unmapped on its own: the mapping ends there.
    it->second = at - it->first;
  }
}

} // namespace fdo::jit::detail
