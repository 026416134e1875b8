// profile_store_bench: what the profile store costs, single process.
//   1. profile-version writes/s: one transaction per write (ProfileStore::write)
//      vs N writes per transaction (write_batch), synchronous=FULL; plus
//      unbatched with synchronous=NORMAL to show what FULL costs
//   2. feedback rows/s: one row per append_feedback call vs N rows per call
//   3. lookups/s: current(pk) (served through the store's verified-document
//      cache), get(pk, version) of older versions (cache misses: parse and
//      digest check), lookup_profile_key(ik), lookup_virtual_key(ck)
//   4. the same reads while another thread of the process writes profile
//      versions back to back (each commit an fsync): rate and per-read
//      latency (p50/p99/max), against the same reads with the writer idle
// Figures are medians over interleaved rounds (each round measures every
// variant once, so drift in disk speed hits all of them alike).
//
// Usage: profile_store_bench [--rounds N] [--batch N] [--dir DIR]
//   defaults: 5 rounds, batch 50, DIR = $TMPDIR or /var/tmp (a disk, so that
//   fsync costs what it costs in production; a tmpfs makes fsync free).
#include "common/stats.h"
#include "fdo/profile_store/profile_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <sys/vfs.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace fdo;
using fdo::bench::median;
using namespace fdo::profile_store;

namespace {

using Clock = std::chrono::steady_clock;

// Operations per second of `ops` operations done by f.
double rate(std::size_t ops, const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(ops) / secs;
}

[[noreturn]] void die(const std::string& what, const Error& e) {
  std::fprintf(stderr, "profile_store_bench: %s: %s\n", what.c_str(), e.describe().c_str());
  std::exit(1);
}

template <class T> T must(Expected<T> r, const std::string& what) {
  if (!r) die(what, r.error());
  return std::move(*r);
}

// A document of realistic size: 30 functions with 8 counters each (about 4 KiB).
ProfileDoc doc_for(std::uint64_t n) {
  ProfileDoc d;
  for (int f = 0; f < 30; ++f) {
    FunctionProfile fp;
    fp.cfg_hash = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(f + 1);
    for (int c = 0; c < 8; ++c)
      fp.counts.push_back(n * 31 + static_cast<std::uint64_t>(c));
    fp.fingerprint = std::string(16, static_cast<char>('a' + f % 26));
    d.functions["function_" + std::to_string(f)] = std::move(fp);
  }
  return d;
}

// Per-operation latencies of one measured run, in microseconds.
struct Latencies {
  double rate = 0;
  double p50 = 0, p99 = 0, max = 0;
};

Latencies timed(std::size_t ops, const std::function<void()>& op) {
  std::vector<double> us;
  us.reserve(ops);
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < ops; ++i) {
    auto a = Clock::now();
    op();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::sort(us.begin(), us.end());
  Latencies l;
  l.rate = static_cast<double>(ops) / secs;
  l.p50 = us[us.size() / 2];
  l.p99 = us[us.size() * 99 / 100];
  l.max = us.back();
  return l;
}

std::string key(const char* prefix, std::size_t i) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%s%058zx", prefix, i);
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  int batch = 50;
  std::string base_dir;
  if (const char* t = std::getenv("TMPDIR"))
    base_dir = t;
  else
    base_dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--batch" && i + 1 < argc)
      batch = std::clamp(std::atoi(argv[++i]), 2, 200); // <= keys: distinct keys per batch
    else if (a == "--dir" && i + 1 < argc)
      base_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: profile_store_bench [--rounds N] [--batch N] [--dir DIR]\n");
      return 2;
    }
  }
  std::string tmpl = base_dir + "/fdo-ps-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    return 1;
  }
  const std::string dir = tmpl;
  struct statfs fs {};
  bool tmpfs = ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == 0x01021994; // TMPFS_MAGIC

  Options full;
  full.retention = 50;
  Options normal = full;
  normal.synchronous = Synchronous::normal;
  auto store = must(ProfileStore::open(dir + "/full.db", full), "open");
  auto store_normal = must(ProfileStore::open(dir + "/normal.db", normal), "open normal");

  // Unbatched writes are slow (an fsync each): fewer of them per round.
  const std::size_t unbatched_writes = 60;
  const std::size_t batched_writes = static_cast<std::size_t>(batch) * 10;
  const std::size_t keys = 200;
  std::vector<ProfileDoc> docs;
  for (int i = 0; i < 64; ++i)
    docs.push_back(doc_for(static_cast<std::uint64_t>(i)));

  // Writes rotate over `keys` profile keys, tracking each key's version.
  std::vector<std::int64_t> ver_full(keys, 0), ver_normal(keys, 0);
  std::size_t next_full = 0, next_normal = 0;
  WriteInfo wi;
  wi.reason = "bench";
  wi.host = "bench";

  std::vector<std::int64_t> ver_bg(keys, 0); // the background writer's keys
  std::vector<double> w_unbatched, w_batched, w_normal, f_unbatched, f_batched;
  for (int r = 0; r < rounds; ++r) {
    w_unbatched.push_back(rate(unbatched_writes, [&] {
      for (std::size_t i = 0; i < unbatched_writes; ++i, ++next_full) {
        std::size_t k = next_full % keys;
        ver_full[k] =
            must(store.write(key("p", k), ver_full[k], docs[next_full % docs.size()], wi), "write");
      }
    }));
    w_batched.push_back(rate(batched_writes, [&] {
      for (std::size_t done = 0; done < batched_writes; done += static_cast<std::size_t>(batch)) {
        std::vector<WriteRequest> reqs;
        std::vector<std::size_t> ks;
        for (int j = 0; j < batch; ++j, ++next_full) {
          // Distinct keys within a batch: each request expects the version
          // before the batch.
          std::size_t k = next_full % keys;
          reqs.push_back({key("p", k), ver_full[k], docs[next_full % docs.size()], wi});
          ks.push_back(k);
        }
        auto vs = must(store.write_batch(reqs), "write_batch");
        for (std::size_t j = 0; j < ks.size(); ++j)
          ver_full[ks[j]] = vs[j];
      }
    }));
    w_normal.push_back(rate(unbatched_writes, [&] {
      for (std::size_t i = 0; i < unbatched_writes; ++i, ++next_normal) {
        std::size_t k = next_normal % keys;
        ver_normal[k] = must(
            store_normal.write(key("p", k), ver_normal[k], docs[next_normal % docs.size()], wi),
            "write normal");
      }
    }));
    auto feedback_row = [&](std::size_t i) {
      std::size_t k = i % keys;
      FeedbackRow row;
      row.pk = key("p", k);
      row.version = ver_full[k] > 0 ? ver_full[k] : 1;
      row.stages = 1;
      row.exec_ns = 12345;
      row.counters = {{"branch-misses", 10}, {"cycles", 1000}, {"instructions", 2000}};
      row.function_counts = {{"function_0", std::vector<std::uint64_t>(8, 1)},
                             {"function_1", std::vector<std::uint64_t>(8, 2)}};
      return row;
    };
    f_unbatched.push_back(rate(unbatched_writes, [&] {
      for (std::size_t i = 0; i < unbatched_writes; ++i) {
        std::vector<FeedbackRow> one = {feedback_row(i)};
        must(store.append_feedback(one), "append_feedback");
      }
    }));
    f_batched.push_back(rate(batched_writes, [&] {
      for (std::size_t done = 0; done < batched_writes; done += static_cast<std::size_t>(batch)) {
        std::vector<FeedbackRow> rows;
        for (int j = 0; j < batch; ++j)
          rows.push_back(feedback_row(done + static_cast<std::size_t>(j)));
        must(store.append_feedback(rows), "append_feedback batch");
      }
    }));
  }

  // Lookups over a populated store.
  for (std::size_t k = 0; k < keys; ++k) {
    must(store.put_profile_key(key("i", k), key("p", k)), "put_profile_key");
    must(store.put_virtual_key(key("c", k), key("v", k), key("i", k)), "put_virtual_key");
  }
  std::mt19937_64 rng(42);
  const std::size_t lookups = 10000;
  std::vector<double> l_current, l_get, l_pk, l_vk;
  for (int r = 0; r < rounds; ++r) {
    l_current.push_back(rate(lookups / 4, [&] {
      for (std::size_t i = 0; i < lookups / 4; ++i)
        if (!must(store.current(key("p", rng() % keys)), "current"))
          die("current", make_error(Errc::internal, "missing profile"));
    }));
    // Random older versions (retention 50 x 200 keys x ~4 KiB = ~40 MB of
    // bodies): mostly not in the store's 8 MiB document cache, so most reads
    // parse and re-hash.
    l_get.push_back(rate(lookups / 20, [&] {
      for (std::size_t i = 0; i < lookups / 20; ++i) {
        std::size_t k = rng() % keys;
        std::int64_t v = ver_full[k] - static_cast<std::int64_t>(rng() % 50);
        if (v < 1) v = ver_full[k];
        if (!must(store.get(key("p", k), v), "get"))
          die("get", make_error(Errc::internal, "missing version"));
      }
    }));
    l_pk.push_back(rate(lookups, [&] {
      for (std::size_t i = 0; i < lookups; ++i)
        if (!must(store.lookup_profile_key(key("i", rng() % keys)), "lookup_profile_key"))
          die("lookup_profile_key", make_error(Errc::internal, "missing mapping"));
    }));
    l_vk.push_back(rate(lookups, [&] {
      for (std::size_t i = 0; i < lookups; ++i)
        if (!must(store.lookup_virtual_key(key("c", rng() % keys)), "lookup_virtual_key"))
          die("lookup_virtual_key", make_error(Errc::internal, "missing mapping"));
    }));
  }

  // Reads while another thread writes. Medians of each figure over rounds;
  // idle and contended runs alternate so drift hits both alike.
  std::vector<double> idle_rate, idle_p99, busy_rate, busy_p50, busy_p99, busy_max, bg_rate,
      idle_pk, busy_pk;
  const std::size_t contended = lookups / 4;
  auto read_current = [&] {
    if (!must(store.current(key("p", rng() % keys)), "current"))
      die("current", make_error(Errc::internal, "missing profile"));
  };
  auto read_pk = [&] {
    if (!must(store.lookup_profile_key(key("i", rng() % keys)), "lookup_profile_key"))
      die("lookup_profile_key", make_error(Errc::internal, "missing mapping"));
  };
  for (int r = 0; r < rounds; ++r) {
    Latencies idle = timed(contended, read_current);
    idle_rate.push_back(idle.rate);
    idle_p99.push_back(idle.p99);
    idle_pk.push_back(timed(contended, read_pk).rate);

    std::atomic<bool> stop{false};
    std::atomic<std::size_t> written{0};
    std::thread writer([&] {
      // Its own keys, so the readers' document cache stays as warm as idle.
      for (std::size_t i = 0; !stop; ++i) {
        std::size_t k = i % keys;
        ver_bg[k] = must(store.write(key("w", k), ver_bg[k], docs[i % docs.size()], wi), "write");
        written++;
      }
    });
    while (written == 0)
      std::this_thread::yield();
    auto t0 = Clock::now();
    std::size_t w0 = written;
    Latencies busy = timed(contended, read_current);
    busy_pk.push_back(timed(contended, read_pk).rate);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    bg_rate.push_back(static_cast<double>(written - w0) / secs);
    stop = true;
    writer.join();
    busy_rate.push_back(busy.rate);
    busy_p50.push_back(busy.p50);
    busy_p99.push_back(busy.p99);
    busy_max.push_back(busy.max);
  }

  double wu = median(w_unbatched), wb = median(w_batched), wn = median(w_normal);
  double fu = median(f_unbatched), fb = median(f_batched);
  std::printf("profile_store_bench: %s%s, %d rounds (medians), documents of ~%zu bytes\n",
              dir.c_str(), tmpfs ? " (tmpfs: fsync is free, figures overstate writes)" : "", rounds,
              canonical_json(to_json(docs[0])).size());
  std::printf("profile-version writes, 1 per transaction (synchronous=FULL): %10.0f writes/s\n",
              wu);
  std::printf("profile-version writes, %d per transaction (write_batch):     %10.0f writes/s"
              "   batched/unbatched = %.1fx\n",
              batch, wb, wb / wu);
  std::printf("profile-version writes, 1 per transaction (synchronous=NORMAL):%9.0f writes/s"
              "   NORMAL/FULL = %.1fx\n",
              wn, wn / wu);
  std::printf("feedback rows, 1 per transaction:                            %10.0f rows/s\n", fu);
  std::printf("feedback rows, %d per transaction (append_feedback batch):    %10.0f rows/s"
              "   batched/unbatched = %.1fx\n",
              batch, fb, fb / fu);
  std::printf("lookups current(pk) (document cache hit: read + byte compare): %7.0f /s\n",
              median(l_current));
  std::printf("lookups get(pk, version) (~80%% cache misses: parse + digest): %7.0f /s\n",
              median(l_get));
  std::printf("lookups lookup_profile_key(ik):                              %10.0f /s\n",
              median(l_pk));
  std::printf("lookups lookup_virtual_key(ck):                              %10.0f /s\n",
              median(l_vk));

  std::printf("reads while another thread writes (FULL, 1 version per transaction, "
              "%.0f writes/s meanwhile):\n",
              median(bg_rate));
  std::printf("  current(pk):          %7.0f /s (idle writer: %7.0f /s)   p50 %.0f us, "
              "p99 %.0f us (idle: %.0f us), max %.0f us\n",
              median(busy_rate), median(idle_rate), median(busy_p50), median(busy_p99),
              median(idle_p99), median(busy_max));
  std::printf("  lookup_profile_key:   %7.0f /s (idle writer: %7.0f /s)\n", median(busy_pk),
              median(idle_pk));

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
