#include "value_profile.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <llvm/ProfileData/InstrProf.h>
#include <new>
#include <utility>

namespace fdo::jit::detail {

namespace {

using Record = llvm::RawInstrProf::ProfileData<std::uint64_t>;

// Distinct values kept per site. Promotion looks at the few hottest (LLVM's
// -icp-max-prom is 3); values beyond the table are dropped, like compiler-rt
// drops them once its per-site node budget is spent.
constexpr std::size_t kValuesPerSite = 16;

struct SiteTable {
  std::uint32_t used = 0;
  std::array<std::pair<std::uint64_t, std::uint64_t>, kValuesPerSite> entries{};
};

// Tables are filled by the program's own threads, any number at once, and
// read by another (an in-process flush) while they run: every field is
// accessed atomically, with plain loads and stores rather than
// read-modify-writes (an increment racing another may be lost, as PGO's own
// counters' may; it never tears or writes past the table). A table is
// published by a compare-and-swap of its slot, so racing first calls of a
// site make one table, not two.
template <class T> std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

// Counts `value` in a table of {value, count} entries (SiteTable, ArgTable);
// false when it is new and the table is full. `used` only ever grows to the
// table's size, and is published after the entry it covers.
template <class Table> bool count_value(Table& table, std::uint64_t value) {
  const std::uint32_t used =
      std::min<std::uint32_t>(at(table.used).load(std::memory_order_acquire),
                              static_cast<std::uint32_t>(table.entries.size()));
  for (std::uint32_t i = 0; i < used; ++i)
    if (at(table.entries[i].first).load(std::memory_order_relaxed) == value) {
      auto count = at(table.entries[i].second);
      count.store(count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return true;
    }
  if (used == table.entries.size()) return false;
  at(table.entries[used].first).store(value, std::memory_order_relaxed);
  at(table.entries[used].second).store(1, std::memory_order_relaxed);
  at(table.used).store(used + 1, std::memory_order_release);
  return true;
}

// How many entries of a table hold values (never more than it has).
template <class Table> std::uint32_t used_entries(const Table& table) {
  return std::min<std::uint32_t>(
      at(const_cast<std::uint32_t&>(table.used)).load(std::memory_order_acquire),
      static_cast<std::uint32_t>(table.entries.size()));
}

// The table's entries in use, read atomically.
template <class Table> fdo::ValueSite entries_of(const Table& table) {
  fdo::ValueSite out;
  const std::uint32_t used = used_entries(table);
  for (std::uint32_t i = 0; i < used; ++i) {
    auto& e = const_cast<std::pair<std::uint64_t, std::uint64_t>&>(table.entries[i]);
    out.emplace_back(at(e.first).load(std::memory_order_relaxed),
                     at(e.second).load(std::memory_order_relaxed));
  }
  return out;
}

// The table in `slot`, made on first use; null when out of memory.
template <class Table> Table* table_in(Table*& slot) {
  auto ref = at(slot);
  Table* t = ref.load(std::memory_order_acquire);
  if (t != nullptr) return t;
  auto* made = new (std::nothrow) Table();
  if (made == nullptr) return nullptr;
  if (ref.compare_exchange_strong(t, made, std::memory_order_acq_rel, std::memory_order_acquire))
    return made;
  delete made; // another thread's came first
  return t;
}

// A table published in `slot`, or null; for readers.
template <class Table> const Table* table_at(Table* const& slot) {
  return at(const_cast<Table*&>(slot)).load(std::memory_order_acquire);
}

SiteTable** slots_of(const Record* record) {
  return reinterpret_cast<SiteTable**>(static_cast<std::uintptr_t>(record->Values));
}

void record_value(std::uint64_t value, void* data, std::uint32_t index) {
  auto* record = static_cast<Record*>(data);
  if (record == nullptr || record->Values == 0) return;
  std::uint32_t sites = 0;
  for (std::uint16_t n : record->NumValueSites)
    sites += n;
  if (index >= sites) return;
  SiteTable* site = table_in(slots_of(record)[index]);
  if (site == nullptr) return;
  count_value(*site, value); // values past the table's size are dropped
}

// Memop sizes are recorded by range, as compiler-rt does and as
// PGOMemOPSizeOpt expects: 0..8 and powers of two exactly, anything else as
// the previous power of two + 1, everything from 513 up as 513
// (InstrProfData.inc, InstrProfGetRangeRepValue).
std::uint64_t memop_range_value(std::uint64_t size) {
  if (size <= 8) return size;
  if (size >= 513) return 513;
  if ((size & (size - 1)) == 0) return size;
  return (std::uint64_t{1} << (63 - __builtin_clzll(size))) + 1;
}

void instrument_target(std::uint64_t target, void* data, std::uint32_t index) {
  record_value(target, data, index);
}

void instrument_memop(std::uint64_t size, void* data, std::uint32_t index) {
  record_value(memop_range_value(size), data, index);
}

// Distinct values kept per profiled argument: specialization looks at the
// most frequent one only; the rest tell how dominant it is. Values met once
// the table is full are counted in `other`, so the share of the top value is
// never overstated.
constexpr std::size_t kValuesPerArg = 8;

struct ArgTable {
  std::uint32_t used = 0;
  std::uint64_t other = 0;
  std::array<std::pair<std::uint64_t, std::uint64_t>, kValuesPerArg> entries{};
};

void profile_arg(std::uint64_t value, ArgTable** slot) {
  if (slot == nullptr) return;
  ArgTable* table = table_in(*slot);
  if (table == nullptr) return;
  if (!count_value(*table, value)) {
    auto other = at(table->other);
    other.store(other.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

fdo::ValueSite sorted(const SiteTable* site) {
  fdo::ValueSite out;
  if (site == nullptr) return out;
  out = entries_of(*site);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

} // namespace

std::vector<RuntimeHook> value_profile_hooks() {
  return {
      {INSTR_PROF_VALUE_PROF_FUNC_STR,
       static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&instrument_target))},
      {INSTR_PROF_VALUE_PROF_MEMOP_FUNC_STR,
       static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&instrument_memop))},
      {kArgValueHook, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&profile_arg))}};
}

ValueProfiles::ValueProfiles(std::span<const InstrumentedFunction> layout,
                             std::vector<std::uint64_t> records,
                             std::vector<std::uint64_t> arg_slots) {
  for (std::size_t i = 0; i < layout.size() && i < arg_slots.size(); ++i)
    if (arg_slots[i] != 0 && !layout[i].arg_sites.empty())
      arg_slots_.push_back({layout[i].pgo_name, arg_slots[i], layout[i].arg_sites});
  for (std::size_t i = 0; i < layout.size() && i < records.size(); ++i) {
    if (records[i] == 0) continue;
    const auto* record = reinterpret_cast<const Record*>(static_cast<std::uintptr_t>(records[i]));
    if (record->FunctionPointer != 0) md5_of_address_[record->FunctionPointer] = record->NameRef;
    if (layout[i].indirect_call_sites + layout[i].memop_sites == 0) continue;
    names_.push_back(layout[i].pgo_name);
    records_.push_back(records[i]);
  }
}

ValueProfiles::ValueProfiles(ValueProfiles&& o) noexcept
    : names_(std::move(o.names_)), records_(std::move(o.records_)),
      md5_of_address_(std::move(o.md5_of_address_)), arg_slots_(std::move(o.arg_slots_)) {
  o.records_.clear();
  o.names_.clear();
  o.arg_slots_.clear();
}

ValueProfiles& ValueProfiles::operator=(ValueProfiles&& o) noexcept {
  if (this != &o) {
    clear();
    names_ = std::move(o.names_);
    records_ = std::move(o.records_);
    md5_of_address_ = std::move(o.md5_of_address_);
    arg_slots_ = std::move(o.arg_slots_);
    o.names_.clear();
    o.records_.clear();
    o.arg_slots_.clear();
  }
  return *this;
}

std::map<std::string, FunctionValues> ValueProfiles::read() const {
  std::map<std::string, FunctionValues> out;
  for (std::size_t i = 0; i < records_.size(); ++i) {
    const auto* record = reinterpret_cast<const Record*>(static_cast<std::uintptr_t>(records_[i]));
    FunctionValues& fv = out[names_[i]];
    SiteTable* const* slots = record->Values ? slots_of(record) : nullptr;
    std::uint32_t flat = 0;
    for (std::uint32_t kind = llvm::IPVK_First; kind <= llvm::IPVK_Last; ++kind)
      for (std::uint16_t s = 0; s < record->NumValueSites[kind]; ++s, ++flat) {
        fdo::ValueSite site = sorted(slots ? table_at(slots[flat]) : nullptr);
        if (kind == llvm::IPVK_IndirectCallTarget) {
          fdo::ValueSite named;
          for (const auto& [address, count] : site)
            if (auto it = md5_of_address_.find(address); it != md5_of_address_.end())
              named.emplace_back(it->second, count);
          fv.indirect_calls.push_back(std::move(named));
        } else if (kind == llvm::IPVK_MemOPSize) {
          fv.memop_sizes.push_back(std::move(site));
        }
      }
  }
  for (const ArgSlots& a : arg_slots_) {
    auto* const* tables = reinterpret_cast<ArgTable* const*>(static_cast<std::uintptr_t>(a.slots));
    std::vector<fdo::ArgValues> args;
    for (std::size_t k = 0; k < a.args.size(); ++k) {
      const ArgTable* t = table_at(tables[k]);
      if (t == nullptr) continue; // never called (or inlined away everywhere)
      fdo::ArgValues av{a.args[k], entries_of(*t),
                        at(const_cast<std::uint64_t&>(t->other)).load(std::memory_order_relaxed)};
      std::stable_sort(av.values.begin(), av.values.end(),
                       [](const auto& x, const auto& y) { return x.second > y.second; });
      args.push_back(std::move(av));
    }
    if (!args.empty()) out[a.name].arguments = std::move(args);
  }
  return out;
}

void ValueProfiles::clear() {
  for (std::uint64_t address : records_) {
    auto* record = reinterpret_cast<Record*>(static_cast<std::uintptr_t>(address));
    if (record->Values == 0) continue;
    std::uint32_t sites = 0;
    for (std::uint16_t n : record->NumValueSites)
      sites += n;
    SiteTable** slots = slots_of(record);
    for (std::uint32_t i = 0; i < sites; ++i) {
      delete slots[i];
      slots[i] = nullptr;
    }
  }
  for (const ArgSlots& a : arg_slots_) {
    auto** tables = reinterpret_cast<ArgTable**>(static_cast<std::uintptr_t>(a.slots));
    for (std::size_t k = 0; k < a.args.size(); ++k) {
      delete tables[k];
      tables[k] = nullptr;
    }
  }
}

} // namespace fdo::jit::detail
