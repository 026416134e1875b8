// The only way the web view reaches the daemon or the store: a Backend that
// passes the read methods through and refuses every other one, so no page,
// link or crafted URL can pin, reset, delete, import, register or execute.
#pragma once

#include "fdo/ctl/backend.h"

#include <memory>
#include <string_view>

namespace fdo::ctl::web {

// profile.list, profile.get, profile.history, program.list, cache.explain,
// cache.stats, health.
bool is_read_method(std::string_view method);

class ReadOnlyBackend final : public Backend {
public:
  explicit ReadOnlyBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // permission_denied for a method that is not a read method.
  Expected<nlohmann::json> call(std::string_view method, const nlohmann::json& params) override;
  BackendKind kind() const override { return inner_->kind(); }
  std::string describe() const override { return inner_->describe(); }

private:
  std::unique_ptr<Backend> inner_;
};

} // namespace fdo::ctl::web
