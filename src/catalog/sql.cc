#include "catalog/sql.h"

#include <charconv>
#include <cstdlib>

#include "util/names.h"

namespace ckpt::catalog {
namespace {

Status BadValue(std::string_view what, std::string_view expected) {
  return DataLossError("column " + std::string(what) + " does not hold " +
                       std::string(expected));
}

}  // namespace

bool SqlIsNull(const SqlValue& v) {
  return std::holds_alternative<std::monostate>(v);
}

Result<int64_t> SqlInt(const SqlValue& v, std::string_view what) {
  if (const auto* x = std::get_if<int64_t>(&v)) return *x;
  if (const auto* s = std::get_if<std::string>(&v)) {
    int64_t out = 0;
    auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), out);
    if (ec == std::errc() && end == s->data() + s->size() && !s->empty()) {
      return out;
    }
  }
  return BadValue(what, "an integer");
}

Result<double> SqlDouble(const SqlValue& v, std::string_view what) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* x = std::get_if<int64_t>(&v)) return static_cast<double>(*x);
  if (const auto* s = std::get_if<std::string>(&v)) {
    double out = 0;
    auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), out);
    if (ec == std::errc() && end == s->data() + s->size() && !s->empty()) {
      return out;
    }
  }
  return BadValue(what, "a number");
}

Result<std::string> SqlText(const SqlValue& v, std::string_view what) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return BadValue(what, "text");
}

}  // namespace ckpt::catalog
