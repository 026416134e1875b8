#include "engine.h"

#include "fdo/jit/compiler.h"
#include "fdo/util/log.h"
#include "fdo/util/value_json.h"
#include "generation.h"

#include <algorithm>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::inprocess {

using nlohmann::json;

namespace {
// How long a swap waits for calls still inside the old generation before
// submitting its last batch; calls that run longer are not reported.
constexpr std::chrono::milliseconds kLateCallsWait{50};

// Per-thread call counter choosing which calls are timed.
thread_local std::uint32_t t_calls_until_timed = 0;
thread_local pid_t t_tid = 0;

// Threads fdod is told of per engine: past this, new ones are not sampled.
constexpr std::size_t kMaxReportedThreads = 256;
} // namespace

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

bool time_this_call(std::uint32_t time_every) {
  if (t_calls_until_timed == 0) {
    t_calls_until_timed = time_every - 1;
    return true;
  }
  --t_calls_until_timed;
  return false;
}

Engine::Engine(std::shared_ptr<DaemonLink> link, EngineOptions options)
    : link_(std::move(link)), options_(std::move(options)), entry_names_(options_.entries),
      loader_(std::make_shared<LoaderBox>()), pid_(::getpid()) {
  if (options_.time_every == 0) options_.time_every = 1;
}

Expected<std::unique_ptr<Engine>> Engine::open(std::shared_ptr<DaemonLink> link,
                                               EngineOptions options) {
  if (!link) return make_error(Errc::invalid_argument, "in-process engine: no daemon connection");
  if (options.program.empty())
    return make_error(Errc::invalid_argument, "in-process engine: no program id");
  if (options.entries.empty())
    return make_error(Errc::invalid_argument, "in-process engine: no entries named");
  std::unique_ptr<Engine> e(new Engine(std::move(link), std::move(options)));
  FDO_TRY(std::unique_ptr<jit::Loader> loader, jit::Loader::create());
  e->loader_->loader = std::move(loader);
  FDO_TRY(Leased first, e->lease_object({}));
  if (!first.fresh)
    return make_error(Errc::corrupt, "program.lease named an object this engine has not linked");
  std::shared_ptr<Generation> g = std::move(first.fresh);
  e->set_variant(first.variant, first.renew);
  e->last_profile_version_ = g->profile_version;
  e->note_thread(); // the opening thread is the runtime's likeliest caller
  e->report_sampling(*g, Ranges::send);
  e->current_.store(std::move(g));
  {
    std::lock_guard lk(e->marks_mu_);
    e->epoch_began_[e->epoch_.load()] = std::chrono::steady_clock::now();
  }
  if (e->options_.flushing == Flushing::background)
    e->flusher_ = std::jthread([raw = e.get()](std::stop_token st) { raw->flusher_loop(st); });
  return e;
}

Engine::~Engine() {
  if (flusher_.joinable()) {
    flusher_.request_stop();
    wake_.notify_all();
    flusher_.join();
  }
  // The last submit; no new lease (fdod may have planned one more stage).
  if (auto r = flush_then(AfterSubmit::stop); !r)
    log::warning("in-process: final flush: " + r.error().describe());
  std::shared_ptr<Generation> g = current_.exchange(nullptr);
  std::lock_guard lk(flush_mu_);
  if (g) give_back(g->lease.exchange(0));
  kept_.clear();
}

std::optional<std::size_t> Engine::entry_index(std::string_view name) const {
  for (std::size_t i = 0; i < entry_names_.size(); ++i)
    if (entry_names_[i] == name) return i;
  return std::nullopt;
}

void Engine::call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret) const {
  // The reference keeps the generation's code mapped until this returns,
  // even when a flush swaps a newer one in meanwhile.
  std::shared_ptr<Generation> g = current_.load(std::memory_order_acquire);
  EntryStats& st = g->stats[entry];
  run_call(g->thunks[entry], args, ret, options_.time_every, [this, &st](std::uint64_t ns) {
    st.timed_ns.fetch_add(ns, std::memory_order_relaxed);
    st.timed_calls.fetch_add(1, std::memory_order_relaxed);
    note_thread();
  });
  st.calls.fetch_add(1, std::memory_order_relaxed);
}

Hold Engine::hold() const {
  note_thread();
  return Hold(current_.load(std::memory_order_acquire), options_.time_every);
}

Hold::Hold(std::shared_ptr<Generation> g, std::uint32_t time_every)
    : g_(std::move(g)), time_every_(time_every), calls_(g_->thunks.size(), 0),
      timed_calls_(g_->thunks.size(), 0), timed_ns_(g_->thunks.size(), 0) {}

Hold& Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    hand_over();
    g_ = std::move(other.g_);
    time_every_ = other.time_every_;
    calls_ = std::move(other.calls_);
    timed_calls_ = std::move(other.timed_calls_);
    timed_ns_ = std::move(other.timed_ns_);
  }
  return *this;
}

Hold::~Hold() {
  hand_over();
}

void Hold::call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret) {
  run_call(g_->thunks[entry], args, ret, time_every_, [this, entry](std::uint64_t ns) {
    timed_ns_[entry] += ns;
    ++timed_calls_[entry];
  });
  ++calls_[entry];
}

std::uint64_t Hold::generation() const {
  return g_ ? g_->number : 0;
}

// Counts go to the generation before the reference is dropped, so the swap's
// wait for callers (use_count) sees them.
void Hold::hand_over() {
  if (!g_) return;
  for (std::size_t i = 0; i < calls_.size(); ++i) {
    if (calls_[i] == 0) continue;
    g_->stats[i].timed_ns.fetch_add(timed_ns_[i], std::memory_order_relaxed);
    g_->stats[i].timed_calls.fetch_add(timed_calls_[i], std::memory_order_relaxed);
    g_->stats[i].calls.fetch_add(calls_[i], std::memory_order_relaxed);
  }
  g_.reset();
}

std::uint64_t Engine::generation() const {
  auto g = current_.load();
  return g ? g->number : 0;
}

int Engine::generations_loaded() const {
  return loader_->loaded.load();
}

std::uint64_t Engine::lease() const {
  auto g = current_.load();
  return g ? g->lease.load() : 0;
}

std::string Engine::storage_key() const {
  auto g = current_.load();
  return g ? g->storage_key : std::string();
}

std::string Engine::mode() const {
  auto g = current_.load();
  return g ? g->mode : std::string();
}

std::int64_t Engine::profile_version() const {
  auto g = current_.load();
  return g ? g->profile_version : 0;
}

json Engine::variant() const {
  std::lock_guard lk(error_mu_);
  return variant_;
}

void Engine::set_variant(const json& variant, bool renew) {
  std::lock_guard lk(error_mu_);
  if (options_.guarding == Guarding::unguarded || !variant.is_object()) {
    variant_ = {{"guarded", false}};
    return;
  }
  variant_ = variant;
  variant_["guarded"] = true;
  variant_["renew"] = renew;
}

json Engine::sampling() const {
  std::lock_guard lk(error_mu_);
  return sampling_;
}

void Engine::note_thread() const {
  if (!sampling_wanted_.load(std::memory_order_relaxed)) return;
  if (t_tid == 0) t_tid = static_cast<pid_t>(::gettid());
  std::lock_guard lk(threads_mu_);
  if (std::find(threads_.begin(), threads_.end(), t_tid) != threads_.end()) return;
  if (threads_.size() >= kMaxReportedThreads) return;
  threads_.push_back(t_tid);
  new_threads_.store(true, std::memory_order_release);
}

void Engine::report_sampling(Generation& g, Ranges ranges) {
  if (!g.sampled) return;
  json threads;
  {
    std::lock_guard lk(threads_mu_);
    threads = threads_;
    new_threads_.store(false, std::memory_order_relaxed);
  }
  json params = {{"lease", g.lease.load()}, {"pid", pid_}, {"threads", std::move(threads)}};
  if (ranges == Ranges::send) {
    json list = json::array();
    for (const jit::FunctionRange& r : g.program->function_ranges())
      list.push_back({{"name", r.name}, {"start", r.start}, {"size", r.size}});
    params["ranges"] = std::move(list);
  }
  auto reply = link_->call("program.sample", params);
  std::lock_guard lk(error_mu_);
  json last = sampling_.is_object() ? sampling_.value("last_submit", json(nullptr)) : json(nullptr);
  if (reply) {
    sampling_ = reply->result.value("sampling", json::object());
  } else {
    // Sampling is an extra: the code runs and counts without it.
    sampling_ = {{"available", false},
                 {"reason", "program.sample failed: " + reply.error().describe()}};
    g.sampled = false;
  }
  sampling_["last_submit"] = std::move(last);
}

std::string Engine::last_error() const {
  std::lock_guard lk(error_mu_);
  return last_error_;
}

void Engine::give_back(std::uint64_t lease) {
  if (lease == 0) return;
  if (auto r = link_->call("program.release", {{"lease", lease}}); !r)
    log::debug("in-process: release of lease " + std::to_string(lease) + ": " +
               r.error().describe());
}

Expected<Engine::Leased> Engine::lease_object(const std::vector<std::string>& loaded) {
  const bool guarded = options_.guarding == Guarding::guarded;
  json params = {{"program", options_.program}, {"entries", entry_names_}};
  if (guarded) {
    params["guard"] = true;
    if (!loaded.empty()) params["loaded"] = loaded;
  } else if (!loaded.empty()) {
    params["unless_storage_key"] = loaded.front();
  }
  FDO_TRY(LinkReply reply, link_->call("program.lease", params));
  const json& r = reply.result;
  Leased out;
  out.lease =
      r.value("lease", json(nullptr)).is_number_unsigned() ? r["lease"].get<std::uint64_t>() : 0;
  out.storage_key = r.value("storage_key", "");
  out.variant = r.value("variant", json(nullptr));
  out.renew = r.value("renew", false);
  // Whether fdod samples this lease (each lease has its own samplers).
  if (const json& smp = r.value("sampling", json::object()); smp.is_object()) {
    out.sampled = smp.value("available", false);
    if (out.sampled) sampling_wanted_.store(true, std::memory_order_relaxed);
    std::lock_guard lk(error_mu_);
    json last =
        sampling_.is_object() ? sampling_.value("last_submit", json(nullptr)) : json(nullptr);
    sampling_ = {{"available", out.sampled},
                 {"reason", smp.value("reason", "")},
                 {"last_submit", std::move(last)}};
  }
  if (r.value("unchanged", false)) {
    if (!reply.fds.empty() || (guarded && out.lease == 0)) {
      give_back(out.lease);
      return make_error(Errc::corrupt, "program.lease answered unchanged with " +
                                           std::to_string(reply.fds.size()) +
                                           " file descriptors and lease " +
                                           std::to_string(out.lease));
    }
    return out;
  }
  auto g = std::make_shared<Generation>(loader_, entry_names_.size());
  g->lease = out.lease;
  g->storage_key = out.storage_key;
  g->profile_version = r.value("profile_version", std::int64_t{0});
  g->mode = r.value("mode", "");
  g->sampled = out.sampled;
  // From here on the lease is ours: a failure below gives it back.
  auto fail = [&](Error err) -> Error {
    give_back(g->lease.exchange(0));
    return err;
  };
  if (reply.fds.size() != 1)
    return fail(make_error(Errc::corrupt, "program.lease reply carried " +
                                              std::to_string(reply.fds.size()) +
                                              " file descriptors; expected the object's one"));
  struct stat sb {};
  if (::fstat(reply.fds[0].get(), &sb) != 0)
    return fail(Error::from_errno("fstat (leased object)", errno));
  const auto size = static_cast<std::size_t>(sb.st_size);
  if (size == 0 || size != r.value("object_size", std::size_t{0}))
    return fail(make_error(Errc::corrupt, "leased object is " + std::to_string(size) +
                                              " bytes; the reply said " +
                                              std::to_string(r.value("object_size", 0))));
  auto mapped = Mapping::map_file(reply.fds[0], size, Protection::read_only);
  if (!mapped) return fail(std::move(mapped).error());
  auto meta = jit::metadata_from_json(r.value("metadata", json::object()));
  if (!meta) return fail(std::move(meta).error().context("lease metadata"));
  {
    std::lock_guard lk(loader_->mu);
    auto loaded = loader_->loader->load(
        std::string_view(static_cast<const char*>(mapped->data()), size), *meta);
    if (!loaded) return fail(std::move(loaded).error().context("linking the leased object"));
    g->program = std::move(*loaded);
  }
  for (const std::string& name : entry_names_) {
    auto thunk = g->program->thunk(name);
    if (!thunk) return fail(std::move(thunk).error());
    g->thunks.push_back(*thunk);
  }
  // The entries' own functions, for native calls (CallerThread): the
  // object's symbol of that name, which the thunk calls.
  g->natives.assign(entry_names_.size(), nullptr);
  for (const jit::FunctionRange& r : g->program->function_ranges())
    for (std::size_t i = 0; i < entry_names_.size(); ++i)
      if (r.name == entry_names_[i])
        g->natives[i] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.start));
  if (entry_info_.empty()) {
    for (const std::string& name : entry_names_)
      for (const jit::EntryInfo& e : g->program->entries())
        if (e.name == name) entry_info_.push_back(e);
  } else {
    // Same program, so the same entries; anything else is not swapped in.
    for (std::size_t i = 0; i < entry_names_.size(); ++i)
      for (const jit::EntryInfo& e : g->program->entries())
        if (e.name == entry_names_[i] && !(e == entry_info_[i]))
          return fail(make_error(Errc::corrupt,
                                 "entry '" + e.name + "' changed its signature between leases"));
  }
  g->number = ++generations_made_;
  out.fresh = std::move(g);
  return out;
}

namespace {

// What a value site counted since `before` (the same site as last
// submitted): each value's count less its earlier one. Tables only grow; a
// smaller count (the value lost its slot and came back) counts from zero.
ValueSite site_delta(const ValueSite& now, const ValueSite* before) {
  ValueSite out;
  for (const auto& [value, count] : now) {
    std::uint64_t prev = 0;
    if (before != nullptr)
      for (const auto& [v, c] : *before)
        if (v == value) {
          prev = c;
          break;
        }
    const std::uint64_t d = count >= prev ? count - prev : count;
    if (d != 0) out.emplace_back(value, d);
  }
  return out;
}

// Site by site; true when any site counted something.
bool sites_delta(const std::vector<ValueSite>& now, const std::vector<ValueSite>* before,
                 std::vector<ValueSite>& out) {
  bool any = false;
  out.clear();
  for (std::size_t i = 0; i < now.size(); ++i) {
    const ValueSite* b = before != nullptr && i < before->size() ? &(*before)[i] : nullptr;
    out.push_back(site_delta(now[i], b));
    any = any || !out.back().empty();
  }
  return any;
}

// The value profiles of `now` less `before`, in feedback.submit's form
// (schemas/methods/feedback.submit.json: batches[*].values), as a profile
// document holds them; null when nothing was counted.
json values_delta(const std::map<std::string, jit::FunctionValueProfile>& now,
                  const std::map<std::string, jit::FunctionValueProfile>& before) {
  json out = json::object();
  for (const auto& [fn, v] : now) {
    auto b = before.find(fn);
    const jit::FunctionValueProfile* was = b == before.end() ? nullptr : &b->second;
    json f = json::object();
    std::vector<ValueSite> sites;
    if (sites_delta(v.indirect_calls, was ? &was->indirect_calls : nullptr, sites))
      f["indirect_calls"] = value_sites_json(sites, ValueText::hex);
    if (sites_delta(v.memop_sizes, was ? &was->memop_sizes : nullptr, sites))
      f["memop_sizes"] = value_sites_json(sites, ValueText::number);
    std::vector<ArgValues> args;
    for (const ArgValues& a : v.arguments) {
      const ArgValues* prev = nullptr;
      if (was != nullptr)
        for (const ArgValues& p : was->arguments)
          if (p.arg == a.arg) prev = &p;
      ArgValues d{a.arg, site_delta(a.values, prev ? &prev->values : nullptr), 0};
      const std::uint64_t before_other = prev ? prev->other : 0;
      d.other = a.other >= before_other ? a.other - before_other : a.other;
      if (!d.values.empty() || d.other != 0) args.push_back(std::move(d));
    }
    if (!args.empty()) f["arg_values"] = arg_values_json(args);
    if (!f.empty()) out[fn] = std::move(f);
  }
  return out.empty() ? json(nullptr) : out;
}

} // namespace

// The calls, time and counter increments of `g` since its last submit, as
// one batch; nullopt when nothing was called.
Expected<std::optional<json>> Engine::submit(Generation& g) {
  std::uint64_t calls = 0;
  double exec_ns = 0;
  std::vector<std::uint64_t> now_calls(g.stats.size()), now_timed(g.stats.size()),
      now_ns_(g.stats.size());
  for (std::size_t i = 0; i < g.stats.size(); ++i) {
    now_calls[i] = g.stats[i].calls.load(std::memory_order_relaxed);
    now_timed[i] = g.stats[i].timed_calls.load(std::memory_order_relaxed);
    now_ns_[i] = g.stats[i].timed_ns.load(std::memory_order_relaxed);
    const std::uint64_t dc = now_calls[i] - g.sent_calls[i];
    if (dc == 0) continue;
    calls += dc;
    // Untimed calls cost what the timed ones did, on average: over this
    // batch when it timed some, else over the generation's life.
    std::uint64_t dt = now_timed[i] - g.sent_timed_calls[i], dns = now_ns_[i] - g.sent_timed_ns[i];
    if (dt == 0) {
      dt = now_timed[i];
      dns = now_ns_[i];
    }
    if (dt != 0) exec_ns += static_cast<double>(dns) / static_cast<double>(dt) * dc;
  }
  if (calls == 0) return std::optional<json>();
  json counts = json::object();
  std::map<std::string, std::vector<std::uint64_t>> read = g.program->read_counters();
  for (auto& [fn, values] : read) {
    std::vector<std::uint64_t>& sent = g.sent_counts[fn];
    sent.resize(values.size(), 0);
    json delta = json::array();
    bool any = false;
    for (std::size_t k = 0; k < values.size(); ++k) {
      // Counters only grow; a smaller one (wrapped) counts from zero.
      std::uint64_t d = values[k] >= sent[k] ? values[k] - sent[k] : values[k];
      any = any || d != 0;
      delta.push_back(d);
    }
    if (any) counts[fn] = std::move(delta);
  }
  json batch = {{"calls", calls},
                {"exec_ns", static_cast<std::uint64_t>(exec_ns)},
                {"counts", std::move(counts)}};
  // Indirect-call targets, memop sizes and argument values, as an exec
  // worker's stage reports them (feedback.submit's `values`).
  std::map<std::string, jit::FunctionValueProfile> values = g.program->read_value_profiles();
  if (json v = values_delta(values, g.sent_values); !v.is_null()) batch["values"] = std::move(v);
  FDO_TRY(LinkReply reply, link_->call("feedback.submit", {{"lease", g.lease.load()},
                                                           {"batches", json::array({batch})}}));
  g.sent_calls = std::move(now_calls);
  g.sent_timed_calls = std::move(now_timed);
  g.sent_timed_ns = std::move(now_ns_);
  g.sent_counts = std::move(read);
  g.sent_values = std::move(values);
  calls_submitted_ += calls;
  if (auto s = reply.result.find("samples"); s != reply.result.end()) {
    std::lock_guard lk(error_mu_);
    sampling_["last_submit"] = *s;
  }
  return std::optional<json>(std::move(reply.result));
}

Expected<FlushResult> Engine::flush() {
  return flush_then(AfterSubmit::lease_again);
}

Expected<FlushResult> Engine::flush_then(AfterSubmit then) {
  std::lock_guard lk(flush_mu_);
  FlushResult out;
  std::shared_ptr<Generation> g = current_.load();
  if (!g) return out;
  out.generation = g->number;
  // Threads that called since fdod was last told get sampled from now on.
  if (new_threads_.load(std::memory_order_acquire)) report_sampling(*g, Ranges::omit);
  FDO_TRY(std::optional<json> reply, submit(*g));
  bool renew = false;
  json judged = nullptr; // what the guard made of the stage just submitted
  if (reply) {
    out.batches = 1;
    last_profile_version_ = reply->value("profile_version", last_profile_version_);
    out.stale = reply->value("stale", false);
    renew = reply->value("renew", false);
    judged = reply->value("variant", json(nullptr));
  }
  out.profile_version = last_profile_version_;
  if ((out.stale || renew) && then == AfterSubmit::lease_again)
    FDO_TRY_STATUS(take_lease(std::move(g), out));
  if (judged.is_object()) {
    std::lock_guard vk(error_mu_);
    if (variant_.value("guarded", false)) {
      variant_["counted"] = judged.value("counted", false);
      variant_["trial"] = judged.value("trial", json(nullptr));
    }
  }
  note_lagging(out);
  return out;
}

Status Engine::take_lease(std::shared_ptr<Generation> g, FlushResult& out) {
  std::vector<std::string> loaded{g->storage_key};
  for (const std::shared_ptr<Generation>& k : kept_)
    loaded.push_back(k->storage_key);
  FDO_TRY(Leased next, lease_object(loaded));
  if (next.lease == 0) return {}; // unguarded, same output: nothing to swap
  out.renewed = options_.guarding == Guarding::guarded;
  std::shared_ptr<Generation> to = std::move(next.fresh);
  if (!to) {
    if (next.storage_key == g->storage_key) {
      to = g;
    } else {
      for (const std::shared_ptr<Generation>& k : kept_)
        if (k->storage_key == next.storage_key) to = k;
    }
    if (!to) {
      give_back(next.lease);
      return make_error(Errc::corrupt, "program.lease named object " + next.storage_key +
                                           ", which this engine has not linked, and sent none");
    }
  }
  set_variant(next.variant, next.renew);
  to->sampled = next.sampled; // fdod samples per lease
  if (to == g) {              // the same code runs on under the new lease
    give_back(g->lease.exchange(next.lease));
    report_sampling(*g, Ranges::send);
    if (!next.renew) kept_.clear(); // no trial needs another arm
    kept_count_.store(kept_.size(), std::memory_order_relaxed);
    return {};
  }
  std::erase(kept_, to);
  to->lease = next.lease;
  report_sampling(*to, Ranges::send);
  publish(to);
  out.swapped = true;
  out.generation = to->number;
  // Calls that entered the old generation before the swap are told too: wait
  // (briefly) for them to return, so that its last batch has them all. Its
  // code stays mapped until the last of them returns, however long that is.
  const auto until = std::chrono::steady_clock::now() + kLateCallsWait;
  while (g.use_count() > 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  if (auto late = submit(*g); !late)
    log::debug("in-process: last submit of generation " + std::to_string(g->number) + ": " +
               late.error().describe());
  give_back(g->lease.exchange(0));
  // While a guarded trial runs, the arm that stops running now may run again
  // at its next stage: it stays linked (the least recently run goes first).
  // Otherwise (a new profile's code, a verdict's) older code goes.
  const std::string role = next.variant.is_object() ? next.variant.value("role", "") : "";
  if (next.renew && (role == "candidate" || role == "incumbent")) {
    kept_.insert(kept_.begin(), std::move(g));
    if (kept_.size() > kKeptArms) kept_.pop_back();
  } else {
    kept_.clear();
  }
  kept_count_.store(kept_.size(), std::memory_order_relaxed);
  return {};
}

void Engine::flusher_loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    {
      std::unique_lock lk(wake_mu_);
      wake_.wait_for(lk, stop, options_.flush_interval, [] { return false; });
    }
    if (stop.stop_requested()) break;
    auto r = flush();
    std::lock_guard lk(error_mu_);
    last_error_ = r ? std::string() : r.error().describe();
  }
}

} // namespace fdo::inprocess
