#include "pfm_encode.h"

#include <cstring>
#include <mutex>
#include <perfmon/pfmlib_perf_event.h>

namespace fdo::perf::detail {
namespace {

struct PfmState {
  int init_result = PFM_ERR_NOINIT;
  // libpfm4 does not promise thread safety of its encoders; serialise them.
  std::mutex mutex;
};

PfmState& pfm_state() {
  static PfmState state;
  static std::once_flag once;
  std::call_once(once, [] { state.init_result = pfm_initialize(); });
  return state;
}

std::vector<std::string> active_pmus_locked() {
  std::vector<std::string> out;
  for (int p = PFM_PMU_NONE; p < PFM_PMU_MAX; ++p) {
    pfm_pmu_info_t info;
    std::memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (pfm_get_pmu_info(static_cast<pfm_pmu_t>(p), &info) == PFM_SUCCESS && info.is_present &&
        info.name != nullptr)
      out.emplace_back(info.name);
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v)
    s += (s.empty() ? "" : ", ") + x;
  return s;
}

} // namespace

Expected<PfmEncoding> pfm_encode(const std::string& name) {
  PfmState& st = pfm_state();
  if (st.init_result != PFM_SUCCESS)
    return make_error(Errc::unsupported, "libpfm4 could not initialise (" +
                                             std::string(pfm_strerror(st.init_result)) +
                                             "): no PMU tables to encode '" + name + "'");
  std::lock_guard lock(st.mutex);
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  char* fstr = nullptr;
  pfm_perf_encode_arg_t arg;
  std::memset(&arg, 0, sizeof arg);
  arg.attr = &attr;
  arg.fstr = &fstr;
  arg.size = sizeof arg;
  int r = pfm_get_os_event_encoding(name.c_str(), PFM_PLM3, PFM_OS_PERF_EVENT_EXT, &arg);
  if (r != PFM_SUCCESS) {
    std::free(fstr);
    auto pmus = active_pmus_locked();
    // Only the generic "perf"/"perf_raw" tables: no hardware PMU model is known,
    // so raw names cannot exist here, which is a property of the host.
    bool hardware_pmu = false;
    for (const auto& p : pmus)
      if (p != "perf" && p != "perf_raw") hardware_pmu = true;
    std::string msg = "libpfm4 cannot encode event '" + name + "': " + pfm_strerror(r) +
                      " (active PMUs: " + (pmus.empty() ? "none" : join(pmus)) + ")";
    if (!hardware_pmu && r == PFM_ERR_NOTFOUND)
      return make_error(Errc::unsupported, msg + "; no hardware PMU is active in libpfm4");
    if (r == PFM_ERR_NOTFOUND) return make_error(Errc::not_found, msg);
    return make_error(Errc::invalid_argument, msg);
  }
  PfmEncoding enc;
  enc.type = attr.type;
  enc.config = attr.config;
  enc.config1 = attr.config1;
  enc.config2 = attr.config2;
  if (fstr != nullptr) {
    enc.canonical = fstr;
    std::free(fstr);
  }
  return enc;
}

std::vector<std::string> pfm_active_pmus() {
  PfmState& st = pfm_state();
  if (st.init_result != PFM_SUCCESS) return {};
  std::lock_guard lock(st.mutex);
  return active_pmus_locked();
}

} // namespace fdo::perf::detail
