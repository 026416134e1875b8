#include "profile_rules.h"

#include "fdo/util/log.h"
#include "internal.h"

namespace fdo::profile_store::detail {

Expected<PreparedWrite> prepare_write(std::string_view pk, std::int64_t expected_version,
                                      const ProfileDoc& doc, const WriteInfo& info,
                                      std::int64_t now) {
  FDO_TRY_STATUS(check_key("profile key", pk));
  const std::string what = "profile " + std::string(pk);
  if (expected_version < 0)
    return make_error(Errc::invalid_argument, "expected version of " + what + " must be >= 0");
  // Written from the struct (a big program's document holds thousands of
  // functions): checked and given the form a read returns, then its
  // canonical text and digest, with no JSON tree in between.
  PreparedWrite w;
  w.pk = std::string(pk);
  w.expected_version = expected_version;
  w.info = info;
  w.doc = doc;
  w.doc.provenance.reason = info.reason;
  w.doc.provenance.created_at = rfc3339_ms(now);
  w.doc.provenance.host = info.host;
  w.doc.provenance.stage = info.stage;
  w.doc.provenance.program = info.program;
  // The struct can hold values the document format forbids (opt_level 9);
  // such a profile must not reach the compiler through the store.
  if (auto st = normalize_profile(w.doc); !st) return std::move(st).error().context(what);
  auto written = profile_text_and_digest(w.doc);
  if (!written) return std::move(written).error().context(what);
  w.body = std::move(written->text);
  w.digest = std::move(written->digest);
  w.functions = static_cast<std::int64_t>(w.doc.functions.size());
  return w;
}

SharedProfile stored_record(PreparedWrite&& w, std::int64_t version, std::int64_t now,
                            const std::optional<ProfileState>& st) {
  auto p = std::make_shared<StoredProfile>();
  p->pk = std::move(w.pk);
  p->version = version;
  p->digest = std::move(w.digest);
  p->doc = std::move(w.doc);
  p->body = std::move(w.body);
  p->pinned = st && st->pinned;
  p->owner = st ? st->owner : w.info.owner;
  p->author = w.info.owner;
  p->source = w.info.source;
  p->created_at = now;
  p->reason = std::move(w.info.reason);
  p->host = std::move(w.info.host);
  p->stage = w.info.stage;
  p->program = std::move(w.info.program);
  return p;
}

Expected<std::int64_t> check_write(const PreparedWrite& req,
                                   const std::optional<ProfileState>& st) {
  // The tenant check comes first, so nothing below (pin state, version) is
  // ever reported about another tenant's profile.
  if (const ActingOwner& acting = req.info.acting_owner) {
    if (st && st->owner != *acting) return no_profile(req.pk);
    if (!st && req.expected_version != 0) return no_profile(req.pk);
  }
  if (!st) {
    if (req.expected_version != 0)
      return make_error(Errc::conflict, "profile " + req.pk + " does not exist (expected version " +
                                            std::to_string(req.expected_version) + ")");
    return std::int64_t{1};
  }
  if (st->pinned && req.info.source == WriteSource::feedback)
    return make_error(Errc::pinned, "profile " + req.pk +
                                        " is pinned; feedback may not rewrite it (unpin it, "
                                        "or write it as an operator)");
  if (st->current != req.expected_version)
    return make_error(Errc::conflict, "profile " + req.pk + " is at version " +
                                          std::to_string(st->current) + " (expected " +
                                          std::to_string(req.expected_version) + ")");
  return st->last + 1;
}

Status decode_body(StoredProfile& p, DocCache& docs) {
  if (auto cached = docs.find(p.pk, p.version, p.body, p.digest)) {
    p.doc = std::move(*cached);
    return ok();
  }
  auto doc = parse_profile(p.body);
  if (!doc)
    return make_error(Errc::corrupt, describe_profile(p.pk, p.version) +
                                         ": stored body does not parse: " + doc.error().message());
  p.doc = std::move(*doc);
  // The digest keys compiled outputs; serving a body that does not match it
  // would compile one profile under another's cache key.
  if (std::string d = profile_digest(p.doc); d != p.digest)
    return make_error(Errc::corrupt, describe_profile(p.pk, p.version) + ": stored digest " +
                                         p.digest + " does not match the body (" + d + ")");
  docs.insert(std::make_shared<const StoredProfile>(p));
  return ok();
}
MappingResult profile_key_put(std::string_view ik, std::string_view pk,
                              std::optional<std::string> previous) {
  MappingResult result;
  if (!previous) return result;
  if (*previous == pk) {
    result.change = MappingChange::unchanged;
    return result;
  }
  log::info("profile key mapping " + std::string(ik) + " re-mapped from " + *previous + " to " +
            std::string(pk));
  result.change = MappingChange::replaced;
  result.previous = std::move(previous);
  return result;
}

bool virtual_key_put_is_noop(const std::optional<std::string>& old_vk, std::string_view old_ik,
                             std::string_view vk, std::string_view ik) {
  return old_vk && *old_vk == vk && (ik.empty() || old_ik == ik);
}

MappingResult virtual_key_put(std::optional<std::string> old_vk, std::string_view vk) {
  MappingResult result;
  if (old_vk && *old_vk == vk) {
    result.change = MappingChange::unchanged;
  } else if (old_vk) {
    result.change = MappingChange::replaced;
    result.previous = std::move(old_vk);
  }
  return result;
}

} // namespace fdo::profile_store::detail
