// The self-contained HTML page of `ckpt report` and `ckpt bench --html`:
// Chart.js and the page's script inline, the data as JSON inside the page,
// nothing fetched when it is opened.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt::cli {

// Chart.js 3 (chart.min.js), embedded at build time; empty when the build
// found none.
std::string_view ChartJsSource();

// The scripts that draw each kind of page from its data (report_js.cc).
std::string_view RootReportScript();
std::string_view CatalogReportScript();
std::string_view BenchReportScript();

// Writes the page titled `title` that runs `script` over `data` to `path`,
// replacing it (WriteFileAtomically: a reader never sees half a page, and a
// write killed midway leaves no temporary behind).
// The page exposes window.ckptReport = {data, charts, summary}; `summary`,
// also written as JSON into the element #ckpt-summary once drawn, gives each
// chart's datasets and their point counts, and #ckpt-errors holds any
// script error or console.error.
Status WriteHtmlPage(const std::string& path, std::string_view title,
                     const nlohmann::json& data, std::string_view script);

}  // namespace ckpt::cli
