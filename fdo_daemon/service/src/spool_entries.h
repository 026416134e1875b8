// The spool entries' bodies (JSON) for StoreFallback (store_fallback.h), and
// the small helpers its decorated interfaces and its replay share.
#pragma once

#include "fdo/profile_store/profile_store.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fdo::daemon::spool_entries {

// The one error the fallback acts on: the store cannot be reached.
bool is_unavailable(const Error& e);
// 128 random bits, hex: unique across hosts and restarts.
std::string new_batch_id();

nlohmann::json row_to_json(const profile_store::FeedbackRow& r);
profile_store::FeedbackRow row_from_json(const nlohmann::json& j);
nlohmann::json info_to_json(const profile_store::WriteInfo& info);
Expected<profile_store::WriteInfo> info_from_json(const nlohmann::json& j);
nlohmann::json program_to_json(const profile_store::ProgramInfo& p);
profile_store::ProgramInfo program_from_json(const nlohmann::json& j);

// The provisional current profile a spooled write stands for (`digest`: the
// document's, when the caller has it; empty: hashed here).
profile_store::StoredProfile provisional(std::string_view pk, std::int64_t version,
                                         const ProfileDoc& doc,
                                         const profile_store::WriteInfo& info,
                                         std::string digest = {});

} // namespace fdo::daemon::spool_entries
