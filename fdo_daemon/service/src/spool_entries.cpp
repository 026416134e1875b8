#include "spool_entries.h"

#include <cstdio>
#include <random>

namespace fdo::daemon::spool_entries {

namespace ps = fdo::profile_store;
using nlohmann::json;

bool is_unavailable(const Error& e) {
  return e.code() == Errc::unavailable;
}

std::string new_batch_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

json row_to_json(const ps::FeedbackRow& r) {
  return json{
      {"pk", r.pk},           {"version", r.version},   {"stages", r.stages},
      {"exec_ns", r.exec_ns}, {"counters", r.counters}, {"function_counts", r.function_counts},
      {"host", r.host}};
}

ps::FeedbackRow row_from_json(const json& j) {
  ps::FeedbackRow r;
  r.pk = j.at("pk").get<std::string>();
  r.version = j.at("version").get<std::int64_t>();
  r.stages = j.at("stages").get<std::uint64_t>();
  r.exec_ns = j.at("exec_ns").get<std::uint64_t>();
  r.counters = j.at("counters").get<std::map<std::string, std::uint64_t>>();
  r.function_counts =
      j.at("function_counts").get<std::map<std::string, std::vector<std::uint64_t>>>();
  r.host = j.value("host", "");
  return r;
}

json info_to_json(const ps::WriteInfo& info) {
  json j = {{"source", std::string(ps::to_string(info.source))},
            {"reason", info.reason},
            {"owner", info.owner},
            {"host", info.host},
            {"stage", info.stage},
            {"program", info.program}};
  if (info.acting_owner) j["acting_owner"] = *info.acting_owner;
  return j;
}

Expected<ps::WriteInfo> info_from_json(const json& j) {
  ps::WriteInfo info;
  FDO_TRY(info.source, ps::parse_write_source(j.at("source").get<std::string>()));
  info.reason = j.at("reason").get<std::string>();
  info.owner = j.at("owner").get<std::int64_t>();
  info.host = j.at("host").get<std::string>();
  info.stage = j.at("stage").get<std::int64_t>();
  info.program = j.at("program").get<std::string>();
  if (j.contains("acting_owner")) info.acting_owner = j.at("acting_owner").get<std::int64_t>();
  return info;
}

json program_to_json(const ps::ProgramInfo& p) {
  return json{{"ik", p.ik},       {"name", p.name}, {"size", p.size},
              {"owner", p.owner}, {"pk", p.pk},     {"program_hash", p.program_hash}};
}

ps::ProgramInfo program_from_json(const json& j) {
  ps::ProgramInfo p;
  p.ik = j.at("ik").get<std::string>();
  p.name = j.at("name").get<std::string>();
  p.size = j.at("size").get<std::int64_t>();
  p.owner = j.at("owner").get<std::int64_t>();
  p.pk = j.at("pk").get<std::string>();
  p.program_hash = j.at("program_hash").get<std::string>();
  return p;
}

ps::StoredProfile provisional(std::string_view pk, std::int64_t version, const ProfileDoc& doc,
                              const ps::WriteInfo& info, std::string digest) {
  ps::StoredProfile p;
  p.pk = std::string(pk);
  p.version = version;
  p.doc = doc;
  p.digest = digest.empty() ? profile_digest(doc) : std::move(digest);
  p.owner = info.owner;
  p.author = info.owner;
  p.source = info.source;
  p.reason = info.reason;
  p.host = info.host;
  p.stage = info.stage;
  p.program = info.program;
  return p;
}

} // namespace fdo::daemon::spool_entries
