// The page's own files, embedded into fdoctl at build time
// (embed_assets.cmake writes embedded_assets.cpp from assets/), so the web
// view needs no install path to find them and works offline.
#pragma once

#include <span>
#include <string_view>

namespace fdo::ctl::web {

struct EmbeddedAsset {
  std::string_view name; // "index.html", "app.js", "style.css"
  std::string_view content_type;
  std::string_view body;
};

std::span<const EmbeddedAsset> embedded_assets();

} // namespace fdo::ctl::web
