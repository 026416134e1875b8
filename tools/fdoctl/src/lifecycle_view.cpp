#include "fdo/ctl/lifecycle_view.h"

#include "fdo/ctl/table.h"

#include <sstream>

namespace fdo::ctl {

using nlohmann::json;

namespace {
std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::string stage_text(const json& j) {
  auto it = j.find("stage");
  return it != j.end() && it->is_number_integer() ? std::to_string(it->get<std::int64_t>())
                                                  : std::string("-");
}
} // namespace

std::string render_lifecycle(const json& lifecycle) {
  if (!lifecycle.is_object()) return {};
  std::ostringstream out;
  out << "\nlifecycle: " << text(lifecycle, "phase");
  if (auto since = lifecycle.find("since_stage");
      since != lifecycle.end() && since->is_number_integer())
    out << " since stage " << since->get<std::int64_t>();
  out << "; " << lifecycle.value("rewrites_last_hour", 0) << " rewrite(s) in the last hour";
  if (const int stale = lifecycle.value("stale_stages", 0); stale > 0)
    out << "; the last " << stale << " stage(s) ran an earlier build";
  if (auto retry = lifecycle.find("retry_in_stages"); retry != lifecycle.end())
    out << "; the profile's build is tried again in " << retry->get<std::int64_t>() << " stage(s)";
  out << "\n";
  const json& history = lifecycle.value("history", json::array());
  if (history.empty()) return out.str();
  Table t({{"stage", Align::right},
           {"version", Align::right},
           {"time"},
           {"from"},
           {"to"},
           {"cause"},
           {"detail"}});
  for (const json& h : history) {
    std::string version = std::to_string(h.value("version", 0));
    version.insert(0, 1, 'v'); // (GCC 12 warns wrongly about "v" + std::to_string)
    t.add_row({stage_text(h), version, text(h, "time"), text(h, "from"), text(h, "to"),
               text(h, "cause"), text(h, "detail")});
  }
  out << t.render();
  return out.str();
}

} // namespace fdo::ctl
