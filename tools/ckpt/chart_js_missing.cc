// Built where Debian's libjs-chart.js was not installed at configure time:
// `ckpt report` then says so instead of writing a page without charts.
#include "html_page.h"

namespace ckpt::cli {

std::string_view ChartJsSource() { return {}; }

}  // namespace ckpt::cli
