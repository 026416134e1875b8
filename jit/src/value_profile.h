// The runtime half of value profiling, in place of compiler-rt's profile
// runtime: the hooks the InstrProfiling lowering calls
// (__llvm_profile_instrument_target for indirect-call targets,
// __llvm_profile_instrument_memop for memcpy/memset/memmove sizes), and the
// per-program tables they fill, read back by PGO name.
//
// The hooks find their tables through the function's __profd_ record, as
// compiler-rt does: its Values field points to one slot per value site (the
// __profvp_ array the lowering allocates statically), and a slot holds this
// file's table for the site once a value was seen there. The tables belong
// to the program's ValueProfiles, which frees them (before the program's
// memory goes away). Not thread-safe, like the counters: one thread per exec
// worker.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace fdo::jit::detail {

// The hook argument value profiling calls (arg_profile.h): one call per
// profiled argument on entry to the function, with the argument's value
// (zero-extended) and the address of its slot in the function's slot array.
inline constexpr const char* kArgValueHook = "__fdo_profile_arg";

// The hooks' symbol names and addresses, defined in every program's JITDylib.
struct RuntimeHook {
  const char* name;
  std::uint64_t address;
};
std::vector<RuntimeHook> value_profile_hooks();

struct FunctionValues {
  std::vector<fdo::ValueSite> indirect_calls; // targets as MD5 of their PGO names
  std::vector<fdo::ValueSite> memop_sizes;    // sizes (range representatives) in bytes
  std::vector<fdo::ArgValues> arguments;      // one per InstrumentedFunction::arg_sites
};

class ValueProfiles {
public:
  ValueProfiles() = default;
  // records[i]: the address of layout[i]'s __profd_ record, 0 when absent;
  // arg_slots[i]: the address of its argument slot array, 0 when it has none.
  ValueProfiles(std::span<const InstrumentedFunction> layout, std::vector<std::uint64_t> records,
                std::vector<std::uint64_t> arg_slots = {});
  ValueProfiles(ValueProfiles&& o) noexcept;
  ValueProfiles& operator=(ValueProfiles&& o) noexcept;
  ValueProfiles(const ValueProfiles&) = delete;
  ValueProfiles& operator=(const ValueProfiles&) = delete;
  ~ValueProfiles() { clear(); }

  // Functions with value sites, each with every one of its sites (empty when
  // nothing was seen there), values most frequent first. Indirect-call
  // targets outside the program (libc, ...) are left out.
  std::map<std::string, FunctionValues> read() const;
  // Frees every table: sites start empty again. Call before the program's
  // memory is released.
  void clear();

private:
  std::vector<std::string> names_;     // PGO names of functions with value sites
  std::vector<std::uint64_t> records_; // their __profd_ records, parallel to names_
  std::map<std::uint64_t, std::uint64_t> md5_of_address_; // function address -> MD5 of PGO name
  struct ArgSlots {
    std::string name;                // PGO name
    std::uint64_t slots = 0;         // address of the slot array
    std::vector<std::uint32_t> args; // the argument of each slot
  };
  std::vector<ArgSlots> arg_slots_;
};

} // namespace fdo::jit::detail
